"""What runs when a watched function is traced (a cache miss), and only then.

The trace hook calls :func:`begin` before the user's function runs, with the
tracers JAX passes, and :func:`commit` after it returned: a function that
raises leaves no record. Both look at the Python stack once, to find the user's
call site and whether the call was a top-level compile, inlined into an
enclosing trace, or made under a transformation such as ``grad``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import types
from typing import Any

import jax

from shapewatch._monitor import compat as _compat
from shapewatch._monitor import events as _events
from shapewatch._monitor.registry import FunctionState, registry
from shapewatch._monitor.signature import Signature, bind_names, named_signature, signature_of

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # shapewatch/
_LIBRARY_DIRS = (_PACKAGE_DIR, *_compat.JAX_DIRS, os.path.dirname(os.__file__) + os.sep + "contextlib.py",
                 os.path.dirname(os.__file__) + os.sep + "functools.py")


logger = logging.getLogger("shapewatch")
_USER_CODE_IN_PACKAGE = (os.path.join("_integrations", "demo.py"),)  # the built-in demo plays the user


class Pending:
    __slots__ = ("state", "hook_id", "kind", "signature", "call_site", "thread", "timestamp")

    def __init__(self, state: FunctionState, hook_id: int, kind: str, signature: Signature,
                 call_site: str | None) -> None:
        self.state = state
        self.hook_id = hook_id
        self.kind = kind
        self.signature = signature
        self.call_site = call_site
        self.thread = threading.current_thread().name
        self.timestamp = time.time()


def _is_library(filename: str) -> bool:
    if filename.endswith(_USER_CODE_IN_PACKAGE):
        return False
    return filename.startswith(_LIBRARY_DIRS) or filename.startswith("<frozen")


def _has_tracer(args: Any, kwargs: Any) -> bool:
    return any(isinstance(x, _compat.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs)))


def inspect_stack(frame: types.FrameType | None) -> tuple[str, str | None]:
    """(kind, call site) of the jit call whose trace is running above ``frame``."""
    cache_miss: types.FrameType | None = None
    enclosing = 0
    call_site = None
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if cache_miss is None and code.co_name == _compat.CACHE_MISS_FRAME and filename.endswith(
            _compat.PJIT_FILE_SUFFIX
        ):
            cache_miss = frame
        elif cache_miss is not None and code.co_name in _compat.TRACE_FRAMES and filename.endswith(
            _compat.PARTIAL_EVAL_SUFFIX
        ):
            enclosing += 1
        elif call_site is None and not _is_library(filename):
            call_site = f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    if cache_miss is None:
        return "ahead_of_time", call_site
    if enclosing:
        return "inlined", call_site
    f_locals = cache_miss.f_locals
    if _has_tracer(f_locals.get("args", ()), f_locals.get("kwargs", {})):
        return "transform", call_site
    return "compile", call_site


def begin(fun: Any, hook_id: int, names: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Pending:
    """Reads the abstract signature and the stack; records nothing yet."""
    if not names:
        names.append(named_signature(fun))
    signature = signature_of(bind_names(names[0], args, kwargs))
    kind, call_site = inspect_stack(sys._getframe(2))
    return Pending(registry.state_for(fun), hook_id, kind, signature, call_site)


def commit(pending: Pending) -> None:
    """Records the miss (the user's function returned) and opens it for cost events."""
    miss = registry.add(pending.state, pending.hook_id, pending.kind, pending.signature,
                        pending.call_site, pending.thread, pending.timestamp)
    _events.opened(pending.state, miss)
    if logger.isEnabledFor(logging.INFO):
        logger.info("[shapewatch] %s %s at %s: %s", miss.function, miss.kind, miss.call_site, miss.explanation)
