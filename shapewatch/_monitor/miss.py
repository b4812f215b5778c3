"""What runs when a watched function is traced (a cache miss), and only then.

The trace hook calls :func:`begin` before the user's function runs, with the
tracers JAX passes, and :func:`commit` after it returned: a function that
raises leaves no record. ``begin`` decides the kind of the miss from JAX's trace
context (``compat.enclosing_kind``): a top-level compile, a trace inlined into an
enclosing trace, a trace under a transformation such as ``grad``, or an
ahead-of-time trace (``lower``/``trace``/``eval_shape``, told by jit's frames on
the stack); it looks once at the stack for the user's call site.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import types
from typing import Any

from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor import calls as _calls
from shapewatch._monitor import compat as _compat
from shapewatch._monitor import events as _events
from shapewatch._monitor.config import settings
from shapewatch._monitor.errors import internal_failure
from shapewatch._monitor.registry import FunctionState, registry
from shapewatch._monitor.signature import (
    Signature,
    bind_names,
    named_signature,
    output_shapes,
    real_arguments,
    returned_arguments,
    signature_of,
)
from shapewatch._monitor.stack import user_frame

logger = logging.getLogger("shapewatch")


class Pending:
    __slots__ = ("state", "hook", "kind", "signature", "call_site", "thread", "timestamp", "reason", "context",
                 "inside")

    def __init__(self, state: FunctionState, hook: Any, kind: str, signature: Signature | None,
                 frame: types.FrameType | None, reason: str | None) -> None:
        self.state = state
        self.hook = hook
        self.kind = kind
        self.signature = signature
        user = user_frame(frame)
        self.call_site = None if user is None else _adapt.place(user.f_code.co_filename, user.f_lineno)
        self.inside = user.f_code.co_name if user is not None and kind == "inlined" else None
        self.reason = reason
        self.context = _context_hash()
        self.thread = threading.current_thread().name
        self.timestamp = time.time()


def _context_hash() -> int | None:
    try:
        return hash(_compat.trace_context())
    except Exception:
        return None


def kind_of_trace(frame: types.FrameType | None) -> str:
    """The kind of the miss whose trace is running: from the trace context, else from jit's frames."""
    where = _compat.enclosing_kind()
    if where is None:
        where = _compat.enclosing_kind_from_frames(frame)
    if where in ("inlined", "transform"):
        return where
    if _compat.ahead_of_time_call(frame):  # lower, trace or eval_shape of a jitted object
        return "ahead_of_time"
    return "compile" if where == "top" else "unknown"


def begin(hook: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Pending:
    """Reads the abstract signature and the stack; records nothing yet."""
    fun, named = _adapt.resolve(hook.__wrapped__, args, kwargs)  # a framework's wrapper: the user's function
    frame = sys._getframe(2)
    kind = kind_of_trace(frame)
    state = registry.state_for(hook, fun)
    reason = None
    try:
        if named is None and not hook.names:
            hook.names.append(named_signature(fun))
        real = None if kind == "inlined" else real_arguments(hook.names[0] if named is None else None, frame, hook,
                                                             resolve=named is not None)  # for placements
        signature = signature_of(bind_names(hook.names[0], args, kwargs) if named is None else named, hook.plans, real)
    except Exception:  # a pytree whose repr fails, say: the miss still counts
        internal_failure("recording a miss")
        signature, reason = None, "signature unreadable (shapewatch could not read these arguments)"
    return Pending(state, hook, kind, signature, frame, reason)


def commit(pending: Pending, out: Any = None) -> None:
    """Records the miss (the user's function returned ``out``) and opens it for cost events."""
    hook, state, signature = pending.hook, pending.state, pending.signature
    reason = pending.reason
    if reason is None and signature is not None and state.signatures.traced_before(signature):
        reason = _identical(pending)  # None for a re-created function: its own explanation says so
    elif reason is None and pending.inside is not None and not state.signatures:
        reason = f"first traced inside {pending.inside}, as part of its trace (no compile of its own)"
    hook.cleared = False
    counting = hook.calls is not None and hook.tally is None
    fresh = counting and signature is not None and signature not in state.signatures
    # The signature this miss's add evicts (max_records) was compiled before counting began, too.
    evicted = state.signatures.oldest() if fresh and len(state.signatures) >= settings.max_records else None
    miss = registry.add(state, hook, pending.kind, signature, pending.call_site, pending.thread,
                        pending.timestamp, reason=reason, context=pending.context, inside=pending.inside)
    hook.last_signature = signature
    if counting and _calls.starts(miss.changes):  # the signatures before this miss: the tally's start
        earlier = list(state.signatures)
        if fresh and earlier and earlier[-1] == signature:
            earlier.pop()
        if evicted is not None and evicted not in state.signatures:
            earlier.insert(0, evicted)
        _calls.start(hook, earlier, signature, miss.changes)
    if signature is not None and pending.kind != "inlined":
        pinned = any(k == "out_shardings" and v != "None" for k, v in hook.options)
        miss.returns = returned_arguments(signature, out, pinned)
        try:
            miss.outputs = output_shapes(out)
        except Exception:  # an output node that cannot be read: its shapes stay unknown
            miss.outputs = None
        if miss.returns:
            state.returns = miss.returns
    if pending.kind == "ahead_of_time" and signature is not None:
        hook.ahead_of_time.append(signature)
    _events.opened(state, miss, hook)
    if logger.isEnabledFor(logging.INFO):
        logger.info("[shapewatch] %s %s at %s: %s", miss.function, miss.kind, miss.call_site, miss.explanation)


def _identical(pending: Pending) -> str | None:
    """Why JAX traced a signature it had traced before."""
    state, hook = pending.state, pending.hook
    if hook.id not in state.hook_ids:
        if any(h is not hook and h.__wrapped__ is hook.__wrapped__ for h in state.live_hooks()):
            return "identical signature, traced for another watched_jit of this function (other jit options)"
        return None
    if pending.hook.cleared:
        return "identical signature, traced again after clear_cache()"
    if state.signatures.other_contexts(pending.signature, pending.context):
        return ("identical signature, traced again under another JAX trace context (a configuration such as "
                "jax.default_matmul_precision or jax.numpy_dtype_promotion, or an enclosing transformation's "
                "axis names)")
    return ("identical shapes and dtypes, traced again for a reason outside them (an argument's sharding, "
            "jax.clear_caches(), a configuration context, or a cache eviction); shapewatch cannot tell which")
