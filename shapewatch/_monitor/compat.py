"""Everything that depends on JAX's internals, for every supported version.

shapewatch reads JAX's public ``jax.monitoring`` events and looks at the Python
stack only on a cache miss. What differs between JAX versions is named here:

* jax >= 0.7 passes ``fun_name`` with its duration events (``f`` for the trace,
  ``jit(f)`` for lowering and compile); jax 0.5 passes no name at all.
* jax 0.10 emits no trace event for a trace nested in another trace; jax 0.5
  does.
* How a trace was entered (the kind of a miss): jax >= 0.6.2 links every jaxpr
  trace to the trace it was opened from (``parent_trace``), so the trace running
  the hook tells whether the call is staged into an enclosing jaxpr (inlined),
  made under a transformation (grad, vmap, ...) or at the top level. Older jax
  keeps no such link; there the frames that jit runs on a cache miss tell it
  (``cache_miss`` in ``jax/_src/pjit.py`` holds the call's real arguments, and the
  functions in ``partial_eval.py`` open a new jaxpr trace).
* Whether a trace is ahead of time: jit's ``lower``, ``trace`` and ``eval_shape``
  are functions of ``jax/_src/pjit.py`` (the jitted type's methods ``jit_lower``,
  ``jit_trace``, ``jit_eval_shape`` on jax >= 0.6; closures named ``lower``,
  ``trace``, ``eval_shape`` set on each jitted object on jax 0.5), so the
  innermost of them or of ``cache_miss`` on the stack tells an ahead-of-time
  trace from a call. shapewatch sets no method of its own on the jitted object:
  what ``functools.wraps`` or ``jax.grad`` copy from it is what they copy from
  ``jax.jit``'s.
* ``clear_cache``: the jitted type's method is pjit.py's ``jit_evict_fn``
  (``_cpp_pjit_evict_fn`` on jax 0.5), which jit sets on the type each time it
  makes a function; :func:`note_clear_cache` puts a wrapper in its place so that
  the retrace after it can be explained.
* Which jitted function a lowering or compile belongs to when nothing was traced
  (a compile without a retrace): the innermost ``cache_miss`` frame of
  ``jax/_src/pjit.py`` closes over the function being called (``fun``); frames
  of ``interpreters/ad.py`` or ``interpreters/batching.py`` on the stack mean a
  transformation (grad, vmap) is being evaluated.

``tests/test_compat.py`` checks each of these on the installed JAX, so that a
release that changes one fails loudly there; where one cannot be read, the
monitor records the kind ``unknown`` and the guards never act on it.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jaxlib

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
PERSISTENT_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

#: Code names of the functions that open a jaxpr trace (a frame of one of them
#: outside a jit's own call means the call is inlined into an enclosing trace).
TRACE_FRAMES = frozenset({"trace_to_jaxpr", "trace_to_jaxpr_dynamic", "trace_to_jaxpr_dynamic2",
                          "trace_to_jaxpr_nocache"})
#: The Python fallback of jit's C++ dispatch; its locals hold the call's arguments.
CACHE_MISS_FRAME = "cache_miss"

#: Code names of jit's ahead-of-time entry points in ``jax/_src/pjit.py`` (jax >= 0.6, then jax 0.5).
AHEAD_OF_TIME_FRAMES = frozenset({"jit_lower", "jit_trace", "jit_eval_shape", "lower", "trace", "eval_shape"})
#: The function behind a jitted type's ``clear_cache`` in ``jax/_src/pjit.py`` (jax >= 0.6, then jax 0.5).
CLEAR_CACHE_FUNCTIONS = ("jit_evict_fn", "_cpp_pjit_evict_fn")

#: Directories whose frames are JAX's, never the user's call site.
JAX_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (jax, jaxlib) if getattr(m, "__file__", None))
PJIT_FILE_SUFFIX = os.path.join("_src", "pjit.py")
PARTIAL_EVAL_SUFFIX = "partial_eval.py"
STAGES_FILE_SUFFIX = os.path.join("_src", "stages.py")
#: Files whose frames on the stack mean a transformation is being evaluated.
TRANSFORM_FILES = {os.path.join("interpreters", "ad.py"): "differentiation (grad, vjp, jvp)",
                   os.path.join("interpreters", "batching.py"): "vmap"}

Tracer = jax.core.Tracer

try:  # the concrete jax.Array type, with ``_sharding`` and ``_committed`` (read on a miss only)
    from jax._src.array import ArrayImpl
except ImportError:  # pragma: no cover - a jax without it: every leaf takes the slow path
    ArrayImpl = None


def jit_keywords() -> frozenset[str]:
    """The keyword arguments that the installed ``jax.jit`` accepts."""
    return frozenset(
        name
        for name, p in inspect.signature(jax.jit).parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name != "fun"
    )


def hide_frames_of(path: str) -> None:
    """Hides a directory's frames from the tracebacks that JAX filters and from the source
    locations it writes into programs (``compiled.as_text()`` names no frame of it)."""
    from jax._src import source_info_util, traceback_util

    traceback_util.register_exclusion(path)
    source_info_util.register_exclusion(path)


_dtype_names: dict[Any, str] = {}
_PARTS_LIMIT = 4  # lowered values of one high-level value written out


def dtype_name(dtype: Any) -> str:
    """``str(dtype)``, remembered (it is slow; there are few dtypes)."""
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype)
    return name


def array_fields(aval: Any) -> tuple[tuple[int, ...], str, bool] | None:
    """Shape, dtype name and weak type of an array's abstract value (a ``ShapedArray``, a
    ``Ref``'s), or None for a value of another kind. A Ref's dtype is named ``Ref float32``:
    ``jax.jit`` keys a Ref apart from an array of its shape and dtype, and so must a signature."""
    try:
        fields = tuple(aval.shape), dtype_name(aval.dtype), bool(getattr(aval, "weak_type", False))
    except Exception:
        return None
    if type(aval).__name__ == "AbstractRef":
        return fields[0], f"Ref {fields[1]}", fields[2]
    return fields


def aval_fields(aval: Any, tracer: Any = None) -> tuple[tuple[int, ...], str, bool]:
    """Shape, dtype name and weak type of any abstract value that ``jax.jit`` accepts.

    An array's are read as they are (:func:`array_fields`). A value of another
    kind is named by its kind, with what can be read of it: a high-level value
    (JAX's hijax types, such as Flax's ``Param(..., hijax=True)``) by the arrays
    it lowers to (``Variable float32`` of shape ``(4, 3)``; for a mutable one,
    ``tracer`` holds its current type), a token as ``Token``. Never raises: a
    kind that JAX adds later still gets a name.

    >>> from jax._src import core
    >>> aval_fields(core.ShapedArray((8, 128), jax.numpy.float32))
    ((8, 128), 'float32', False)
    >>> aval_fields(core.abstract_token)
    ((), 'Token', False)
    """
    found = array_fields(aval)
    if found is not None:
        return found
    kind = type(aval).__name__.removeprefix("Abstract") or "value"
    lowered = [array_fields(a) for a in _lowered(aval, tracer)]
    if not lowered or None in lowered:  # a token lowers to itself
        return (), kind, False
    if len(lowered) == 1:
        shape, dtype, weak = lowered[0]  # type: ignore[misc]
        return shape, f"{kind} {dtype}", weak
    parts = [f"{d}[{','.join(map(str, s))}]" for s, d, _ in lowered[:_PARTS_LIMIT]]  # type: ignore[misc]
    if len(lowered) > _PARTS_LIMIT:
        parts.append(f"... {len(lowered) - _PARTS_LIMIT} more")
    return (), f"{kind}({', '.join(parts)})", False


def _lowered(aval: Any, tracer: Any) -> list[Any]:
    """The abstract values a high-level one lowers to: ``lo_ty()``, or for a mutable one
    (jax 0.10) ``lo_ty_qdd`` of its tracer's current type; [] where neither is read."""
    try:
        current = getattr(tracer, "cur_qdd", None)
        if callable(current) and callable(getattr(aval, "lo_ty_qdd", None)):
            return list(aval.lo_ty_qdd(current()))
        return list(aval.lo_ty()) if callable(getattr(aval, "lo_ty", None)) else []
    except Exception:
        return []


def aval_of(tracer: Any) -> tuple[tuple[int, ...], str, bool]:
    """Shape, dtype name and weak type of a tracer's abstract value."""
    return aval_fields(tracer.aval)


def fun_name(fun: Any) -> str:
    """The name JAX gives a function in its events and errors."""
    from jax._src import util

    return util.fun_name(fun)


def distributed_state() -> Any:
    """``jax.distributed``'s global state (process id, count, coordination client)."""
    from jax._src import distributed

    return distributed.global_state


def enclosing_kind() -> str | None:
    """How the jaxpr trace now running was entered: ``"top"``, ``"inlined"`` or ``"transform"``.

    Read from the trace context (jax >= 0.6.2): the trace that runs the hook was
    opened from a parent trace; an enclosing jaxpr trace anywhere above it means
    the call is staged into another function, a parent other than the evaluation
    trace means a transformation. None when this JAX keeps no such link.
    """
    try:
        from jax._src import core
        from jax._src.interpreters import partial_eval as pe

        trace = core.trace_ctx.trace
        parent = getattr(trace, "parent_trace", None)
        if not isinstance(trace, pe.DynamicJaxprTrace) or parent is None:
            return None
        staging = (pe.DynamicJaxprTrace, pe.JaxprTrace)
        above: Any = parent
        for _ in range(1000):  # a chain of traces; bounded in case a future one loops
            if above is None:
                break
            if isinstance(above, staging):
                return "inlined"
            above = getattr(above, "parent_trace", None)
        return "top" if isinstance(parent, core.EvalTrace) else "transform"
    except Exception:
        return None


def enclosing_kind_from_frames(frame: Any) -> str | None:
    """The same answer as :func:`enclosing_kind`, from the frames of jit (for jax < 0.6.2).

    None when no ``cache_miss`` frame is found (an ahead-of-time trace, or a JAX
    whose frames are named otherwise).
    """
    cache_miss = None
    enclosing = False
    while frame is not None:
        code = frame.f_code
        if cache_miss is None and code.co_name == CACHE_MISS_FRAME and code.co_filename.endswith(PJIT_FILE_SUFFIX):
            cache_miss = frame
        elif cache_miss is not None and code.co_name in TRACE_FRAMES and code.co_filename.endswith(
                PARTIAL_EVAL_SUFFIX):
            enclosing = True
            break
        frame = frame.f_back
    if cache_miss is None:
        return None
    if enclosing:
        return "inlined"
    f_locals = cache_miss.f_locals
    leaves = jax.tree_util.tree_leaves((f_locals.get("args", ()), f_locals.get("kwargs", {})))
    return "transform" if any(isinstance(x, Tracer) for x in leaves) else "top"


def called_function(frame: Any) -> Any:
    """The function that the innermost jit call on the stack was made for, or None.

    JAX's jit falls back to Python (``cache_miss`` in ``pjit.py``) to trace, lower
    and compile; that frame closes over the function being jitted.
    """
    while frame is not None:
        code = frame.f_code
        if code.co_name == CACHE_MISS_FRAME and code.co_filename.endswith(PJIT_FILE_SUFFIX):
            return frame.f_locals.get("fun")
        frame = frame.f_back
    return None


def transformation_on_stack(frame: Any) -> str | None:
    """The transformation being evaluated on the stack (``"vmap"``, ...), or None."""
    while frame is not None:
        filename = frame.f_code.co_filename
        for suffix, what in TRANSFORM_FILES.items():
            if filename.endswith(suffix) and filename.startswith(JAX_DIRS):
                return what
        frame = frame.f_back
    return None


def ahead_of_time_call(frame: Any) -> bool:
    """Whether the innermost jit entry on the stack is ``lower``, ``trace`` or ``eval_shape`` (not a call)."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(PJIT_FILE_SUFFIX):
            if code.co_name == CACHE_MISS_FRAME:
                return False
            if code.co_name in AHEAD_OF_TIME_FRAMES:
                return True
        frame = frame.f_back
    return False


def ahead_of_time_on_stack(frame: Any) -> bool:
    """Whether JAX's ahead-of-time machinery is on the stack: jit's ``lower``, ``trace`` or
    ``eval_shape``, or a stage object (``Traced.lower``, ``Lowered.compile``)."""
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if filename.startswith(JAX_DIRS) and (
                filename.endswith(STAGES_FILE_SUFFIX)
                or (code.co_name in AHEAD_OF_TIME_FRAMES and filename.endswith(PJIT_FILE_SUFFIX))):
            return True
        frame = frame.f_back
    return False


def jitted_function(jitted: Any) -> Any:
    """The function a ``jax.jit`` object traces (its ``_fun``), or None."""
    return getattr(jitted, "_fun", None)


def own_methods(jitted: Any) -> list[Any]:
    """jit's ahead-of-time methods set on the object itself (closures, jax 0.5), else [].

    They close over the traced function, not over the object, so they outlive it
    (``jax.jit(f).lower`` on a temporary); on jax >= 0.6 they are the type's.
    """
    own = getattr(jitted, "__dict__", None) or {}
    return [own[name] for name in ("lower", "trace", "eval_shape") if callable(own.get(name))]


def note_clear_cache(note: Callable[[Any], None]) -> bool:
    """Has ``note(jitted)`` run before every ``clear_cache()`` of a ``jax.jit`` object from now on.

    jit sets its type's ``clear_cache`` to pjit.py's evict function each time it
    makes a function; that function is wrapped in place, once. ``note`` never
    stops the clearing. False where this JAX names it otherwise (the retrace is
    then explained without naming ``clear_cache``).
    """
    from jax._src import pjit

    name = next((n for n in CLEAR_CACHE_FUNCTIONS if hasattr(pjit, n)), None)
    if name is None:
        return False
    original = getattr(pjit, name)
    if getattr(original, "__shapewatch_note__", None) is not None:
        return True

    @functools.wraps(original)
    def clear_cache(self: Any) -> Any:
        try:
            note(self)
        except Exception:  # noqa: BLE001 - clearing the cache must never fail because of shapewatch
            pass
        return original(self)

    clear_cache.__shapewatch_note__ = note  # type: ignore[attr-defined]
    setattr(pjit, name, clear_cache)
    return True


def trace_context() -> Any:
    """The JAX configuration that jit's caches key on besides the arguments, or None."""
    try:
        from jax._src import config

        return config.trace_context()
    except Exception:
        return None


def valid_output(out: Any) -> bool:
    """Whether JAX accepts ``out`` as a traced function's result (else it raises, and builds nothing)."""
    try:
        from jax._src import core

        return all(isinstance(x, Tracer) or core.valid_jaxtype(x) for x in jax.tree_util.tree_leaves(out))
    except Exception:
        return True  # cannot tell: record the miss


def call_arguments(frame: Any, fun: Any) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The real ``(args, kwargs)`` of the innermost jit call of ``fun`` on the stack, or None.

    They are the locals of jit's ``cache_miss`` frame (``pjit.py``), read on a
    miss only: arrays there carry their sharding, committedness and memory kind.
    """
    while frame is not None:
        code = frame.f_code
        if code.co_name == CACHE_MISS_FRAME and code.co_filename.endswith(PJIT_FILE_SUFFIX):
            f_locals = frame.f_locals
            if f_locals.get("fun") is not fun:
                return None
            args, kwargs = f_locals.get("args"), f_locals.get("kwargs")
            if not isinstance(args, tuple) or not isinstance(kwargs, dict):
                return None
            return args, kwargs
        frame = frame.f_back
    return None


#: Where JAX holds a miss's flat arguments, between the traced function and jit's ``cache_miss``:
#: the tracers it passes (``in_tracers`` of the trace's frame: a list on jax 0.5, a flat tree's
#: ``vals`` after, whose ``tree`` is the call's structure) and the concrete values they stand for
#: (``explicit_args`` of pjit's ``_infer_params_impl`` on jax 0.5, whose ``in_tree`` is the
#: structure there; ``args_ft`` of ``_trace_for_jit`` after), index-aligned.
_FLAT_TRACERS = "in_tracers"
_FLAT_CONCRETE = {"_trace_for_jit": "args_ft", "_infer_params_impl": "explicit_args"}
_FLAT_TREE = "in_tree"


def flat_arguments(frame: Any, fun: Any) -> tuple[Sequence[Any], Sequence[Any], Any] | None:
    """JAX's own flat lists of the arguments of the miss of ``fun`` being traced: ``(tracers,
    concrete values, structure)``, index-aligned, in JAX's order (positional arguments, then
    keyword ones by name; statics left out of the lists), the structure the ``PyTreeDef`` of the
    call (None where not found), or None where the lists are not found as expected. What a miss
    would otherwise get by flattening the arguments again; the caller checks, by identity, that
    the tracers are the ones its function received before it trusts the alignment.

    None under JAX's tracer-leak checker: reading a frame's locals leaves a snapshot of them on
    it (Python < 3.13, and under a trace function such as a debugger's), where the checker would
    find the tracers once the trace ends."""
    if getattr(jax.config, "jax_check_tracer_leaks", False):
        return None
    tracers = concrete = tree = None
    while frame is not None:
        code = frame.f_code
        name = code.co_name
        if name == CACHE_MISS_FRAME and code.co_filename.endswith(PJIT_FILE_SUFFIX):
            if frame.f_locals.get("fun") is not fun:
                return None
            break
        if tracers is None and name in TRACE_FRAMES and code.co_filename.endswith(PARTIAL_EVAL_SUFFIX):
            held = frame.f_locals.get(_FLAT_TRACERS)
            tracers, tree = _flat_values(held), getattr(held, "tree", None)
            if tracers is None:
                return None
        elif tracers is not None and concrete is None and name in _FLAT_CONCRETE \
                and code.co_filename.endswith(PJIT_FILE_SUFFIX):
            f_locals = frame.f_locals
            concrete = _flat_values(f_locals.get(_FLAT_CONCRETE[name]))
            if tree is None:
                tree = f_locals.get(_FLAT_TREE)
        frame = frame.f_back
    else:
        return None
    if tracers is None or concrete is None or len(tracers) != len(concrete):
        return None
    return tracers, concrete, tree if isinstance(tree, jax.tree_util.PyTreeDef) else None


def _flat_values(found: Any) -> Sequence[Any] | None:
    values = getattr(found, "vals", found)
    return values if isinstance(values, (list, tuple)) else None


def committed(array: Any) -> bool:
    """Whether a ``jax.Array`` is committed to its devices (``jax.device_put`` with a device or sharding)."""
    return bool(array._committed)


def abstract_value(x: Any) -> Any:
    """The abstract value JAX's jit gives a concrete argument (a jax.Array, numpy array or Python scalar)."""
    from jax._src import core

    return core.shaped_abstractify(x)


_high_level_types: dict[type, bool] = {}


def is_high_level(x: Any) -> bool:
    """Whether a concrete argument leaf is a high-level value (a hijax type, such as Flax's
    ``nnx.Param(..., hijax=True)``), told by the type of its abstract value, once per type.
    Such a value's own attributes (``.sharding``) read it: inside jit's trace JAX would take
    the concrete value as a constant of the traced program."""
    kind = type(x)
    found = _high_level_types.get(kind)
    if found is None:
        try:
            from jax._src import core

            found = bool(getattr(core.typeof(x) if hasattr(core, "typeof") else core.get_aval(x), "is_high", False))
        except Exception:
            found = False
        if len(_high_level_types) < 1024:
            _high_level_types[kind] = found
    return found
