"""Everything that depends on JAX's internals, for every supported version.

shapewatch reads JAX's public ``jax.monitoring`` events and looks at the Python
stack only on a cache miss. What differs between JAX versions is named here:

* jax >= 0.7 passes ``fun_name`` with its duration events (``f`` for the trace,
  ``jit(f)`` for lowering and compile); jax 0.5 passes no name at all.
* jax 0.10 emits no trace event for a trace nested in another trace; jax 0.5
  does.
* The frames that JAX's jit runs on a cache miss: ``cache_miss`` in
  ``jax/_src/pjit.py`` holds the call's real arguments, and the functions in
  ``partial_eval.py`` that open a new jaxpr trace.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import jax
import jaxlib

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
PERSISTENT_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

#: Code names of the functions that open a jaxpr trace (a frame of one of them
#: outside a jit's own call means the call is inlined into an enclosing trace).
TRACE_FRAMES = frozenset({"trace_to_jaxpr", "trace_to_jaxpr_dynamic", "trace_to_jaxpr_dynamic2"})
#: The Python fallback of jit's C++ dispatch; its locals hold the call's arguments.
CACHE_MISS_FRAME = "cache_miss"

#: Directories whose frames are JAX's, never the user's call site.
JAX_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (jax, jaxlib) if getattr(m, "__file__", None))
PJIT_FILE_SUFFIX = os.path.join("_src", "pjit.py")
PARTIAL_EVAL_SUFFIX = "partial_eval.py"

Tracer = jax.core.Tracer


def jit_keywords() -> frozenset[str]:
    """The keyword arguments that the installed ``jax.jit`` accepts."""
    return frozenset(
        name
        for name, p in inspect.signature(jax.jit).parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name != "fun"
    )


def hide_frames_of(path: str) -> None:
    """Hides a directory's frames from the tracebacks that JAX filters."""
    from jax._src import traceback_util

    traceback_util.register_exclusion(path)


_dtype_names: dict[Any, str] = {}


def aval_of(tracer: Any) -> tuple[tuple[int, ...], str, bool]:
    """Shape, dtype name and weak type of a tracer's abstract value."""
    aval = tracer.aval
    dtype = aval.dtype
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype)  # str(dtype) is slow; there are few dtypes
    return tuple(aval.shape), name, bool(getattr(aval, "weak_type", False))


def fun_name(fun: Any) -> str:
    """The name JAX gives a function in its events and errors."""
    from jax._src import util

    return util.fun_name(fun)


def distributed_state() -> Any:
    """``jax.distributed``'s global state (process id, count, coordination client)."""
    from jax._src import distributed

    return distributed.global_state
