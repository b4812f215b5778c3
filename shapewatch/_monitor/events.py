"""Attribution of ``jax.monitoring`` duration events to misses.

JAX reports the cost of a compile through ``jax.monitoring`` duration events,
synchronously, on the thread that compiles: one for tracing, one for lowering
(jaxpr to MLIR) and one for the backend compile. On a miss, the trace hook of a
watched function commits the miss and opens it on its thread; the events that
follow on that thread are added to it, phase by phase:

* trace: to the open miss while it has not been lowered (jax 0.5 also emits
  trace events for nested traces: those go to the latest inlined miss);
* lower, then compile: to the open miss if it builds an executable (an inlined
  miss never does; an ahead-of-time miss takes only the events made with JAX's
  ahead-of-time machinery on the stack, so that a later compile is not its cost);
* an event that carries a name (jax >= 0.7: ``f`` or ``jit(f)``) must match the
  name JAX gives the open miss's function, so unwatched code that compiles in
  between is not charged to it.

A lowering or compile that no open miss takes is a compile without a retrace.
A guard may stop it while it is lowered (JAX
builds no executable then), not at the backend compile. It belongs to the function whose jit call is on the stack (``compat.called_function``)
or, where none is, to the one watched function of that name. Under a
transformation with no jit call on the stack it is the backward pass of the
latest ``grad`` of that function on this thread: its cost joins that miss (one
transformed call is one compile). Otherwise it is a miss of its own, of kind
``transform`` when a transformation is being evaluated, else ``no_retrace``. Everything else is
totalled as compile time spent outside watched functions.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from shapewatch._monitor import compat as _compat
from shapewatch._monitor import persistent as _persistent
from shapewatch._monitor.errors import RecompileError, internal_failure
from shapewatch._monitor.records import Miss
from shapewatch._monitor.registry import FunctionState, registry
from shapewatch._monitor.signature import concrete_signature
from shapewatch._monitor.stack import call_site

_local = threading.local()
_PHASES = {_compat.TRACE_EVENT: "trace", _compat.LOWER_EVENT: "lower", _compat.COMPILE_EVENT: "compile"}


class _Open:
    __slots__ = ("state", "miss", "phase", "name")

    def __init__(self, state: FunctionState, miss: Miss, name: str) -> None:
        self.state = state
        self.miss = miss
        self.phase = "traced"
        self.name = name  # the name JAX gives the function in its events

    def matches(self, name: str | None) -> bool:
        if name is None:
            return True
        return name == self.name or name.rstrip(")").endswith("(" + self.name)


def opened(state: FunctionState, miss: Miss, hook: Any) -> None:
    """Marks a committed miss as the one that this thread's next events belong to."""
    if miss.kind == "inlined":
        _local.inlined = _local.staged = _Open(state, miss, hook.__name__)
    elif miss.kind != "unknown":
        _local.open = _Open(state, miss, hook.__name__)
        _local.inlined = None
        _local.transform = _local.open if miss.kind == "transform" else None
        _local.staged = None
        if miss.kind == "ahead_of_time":
            _local.ahead = _local.open


def _takes(current: _Open) -> bool:
    """Whether the open miss takes this event: an ahead-of-time miss stays open after its
    ``lower``/``trace``/``eval_shape`` returned, and takes only the events made with JAX's
    ahead-of-time machinery on the stack (its own trace and lowering, the stage object's
    ``lower()`` and ``compile()``), never a later compile of other code."""
    return current.miss.kind != "ahead_of_time" or _compat.ahead_of_time_on_stack(sys._getframe(2))


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    phase = _PHASES.get(event)
    if phase is None:
        if event in _persistent.DURATIONS:
            _persistent.on_duration(event, duration)
        return
    try:
        _attribute(phase, float(duration), kwargs.get("fun_name"))
    except RecompileError:  # a guard stops a compile without a retrace while it is lowered
        raise
    except Exception:  # never break JAX's compile
        internal_failure("attributing a compile event")


def _attribute(phase: str, seconds: float, name: str | None) -> None:
    end = time.time()
    current: _Open | None = getattr(_local, "open", None)
    if phase == "trace":
        inlined: _Open | None = getattr(_local, "inlined", None)
        if inlined is not None and name is None:
            _local.inlined = None
            registry.add_cost(inlined.state, inlined.miss, phase, seconds, end, name)
            return
        if current is not None and current.phase == "traced" and current.matches(name) and _takes(current):
            registry.add_cost(current.state, current.miss, phase, seconds, end, name)
            return
    elif phase == "lower":
        if current is not None and current.phase == "traced" and current.matches(name) and _takes(current):
            current.phase = "lowered"
            registry.add_cost(current.state, current.miss, phase, seconds, end, name)
            return
        current = _without_retrace(phase, seconds, end, name)
        if current is not None:
            current.phase = "lowered"
            registry.add_cost(current.state, current.miss, phase, seconds, end, name)
            return
    elif phase == "compile":
        truth = _persistent.settle(seconds)  # what the persistent cache did for this compile
        if current is not None and current.phase in ("traced", "lowered") and current.matches(name) and (
                current.miss.kind != "ahead_of_time" or current.phase == "lowered") and _takes(current):
            _local.open = None
            current.miss.cache = _persistent.with_program(truth)
            registry.add_cost(current.state, current.miss, phase, seconds, end, name)
            return
        current = _without_retrace(phase, seconds, end, name)
        if current is not None:
            _local.open = None
            current.miss.cache = _persistent.with_program(truth)
            registry.add_cost(current.state, current.miss, phase, seconds, end, name)
            return
    registry.add_cost(None, None, phase, seconds, end, name)


def _without_retrace(phase: str, seconds: float, end: float, name: str | None) -> _Open | None:
    """The miss that a lowering or compile nothing was traced for belongs to, if a watched
    function's: a new one for a jit call of it on the stack, else the latest transform or
    ahead-of-time miss of this thread of that name (the backward pass of ``grad``, the
    ``compile()`` of a lowered function), else None."""
    # The caller's frame, not this one: a local holding its own frame is a reference cycle that
    # keeps every caller's locals (the call's arrays) alive until the next garbage collection.
    frame = sys._getframe(1)
    hook = _compat.called_function(frame)
    if hook is None:
        if name is None:  # jax < 0.7: nothing tells whose compile this is
            return None
        transform = getattr(_local, "transform", None)
        if transform is not None and transform.matches(name) and _compat.transformation_on_stack(frame):
            transform.phase = "traced"  # one transformed call (forward and backward) is one compile
            return transform
        ahead = getattr(_local, "ahead", None)
        if ahead is not None and ahead.matches(name) and _compat.ahead_of_time_on_stack(frame):
            ahead.phase = "traced"  # an ahead-of-time lowering or compile: its cost, not a compile
            return ahead
        staged: _Open | None = getattr(_local, "staged", None)
        if staged is None or not staged.matches(name):
            return None
        # Traced into an enclosing trace that is then evaluated outside jit (jax.checkpoint,
        # say): that evaluation compiles the function, once per trace.
        _local.staged = None
        hook = staged.state.hook(staged.miss.hook_id)
        if hook is None:
            return None
        return _record(phase, seconds, end, hook, frame, "transform",
                       "compiled when a transformation evaluated outside jit (jax.checkpoint, ...) ran it")
    _local.staged = None  # a jit call compiles: no enclosing trace is being evaluated eagerly
    if hook not in registry.hooks:
        _local.transform = None  # another function's transformation: not the backward pass of ours
        return None  # an unwatched jit
    transform = _compat.transformation_on_stack(frame)
    state = registry.state_for(hook, hook.__wrapped__)
    if transform is not None:
        kind, reason = "transform", f"compiled for {transform} of a signature traced before (no retrace)"
    elif hook.ahead_of_time:
        signature = hook.ahead_of_time.pop()
        kind, reason = "compile", f"first compile of a signature traced ahead of time ({signature.short()})"
        hook.ahead_of_time.clear()
    elif state.kinds["inlined"] > 0 or state.kinds["transform"] > 0:
        kind, reason = "no_retrace", ("compiled without a retrace: a signature traced before (inlined or "
                                      "under a transformation) compiled now, or an argument's sharding, device "
                                      "or committedness changed")
    else:
        kind, reason = "no_retrace", None
    signature = _placed_signature(state, hook, frame) if kind == "no_retrace" else None
    inlined = _inlined_before(state, signature) if reason is not None and signature is not None else None
    if inlined is not None:  # the trace made inside another jit, compiled now for a call of its own
        where = os.path.basename(inlined.call_site or "?")
        signature, reason = inlined.signature, (f"compiled on its own, once, without a retrace: the signature "
                                                f"first traced inside {inlined.inside} ({where})")
    return _record(phase, seconds, end, hook, frame, kind, reason, signature)


def _inlined_before(state: FunctionState, signature: Any) -> Miss | None:
    """The inlined miss whose signature this one is (placements aside) if that signature has not
    compiled on its own yet: a function traced inside another jit, now called by itself."""
    return state.signatures.inlined_before(signature)


def _placed_signature(state: FunctionState, hook: Any, frame: Any) -> Any:
    """The signature of a compile without a retrace, with placements, from the call's real arguments."""
    try:
        static = set(state.signatures.static_names)
        return concrete_signature(hook.names[0] if hook.names else None, frame, hook, static, hook.plans)
    except Exception:  # an argument JAX accepts but shapewatch cannot read: the compile still counts
        return None


def _record(phase: str, seconds: float, end: float, hook: Any, frame: Any, kind: str,
            reason: str | None, signature: Any = None) -> _Open:
    state = registry.state_for(hook, hook.__wrapped__)
    miss = registry.add(state, hook, kind, signature, call_site(frame), threading.current_thread().name,
                        end - seconds, reason=reason, stoppable=phase == "lower")
    miss.returns = state.returns  # not traced: as the latest miss that read them
    opened = _Open(state, miss, hook.__name__)
    _local.open = opened
    if kind == "transform":
        _local.transform = opened
    return opened


def _on_event(event: str, **kwargs: Any) -> None:
    if event in _persistent.EVENTS:
        try:
            _persistent.on_event(event)
        except Exception:  # never break JAX's compile
            internal_failure("reading a persistent-cache event")
    if event != _compat.PERSISTENT_CACHE_HIT_EVENT:
        return
    current: _Open | None = getattr(_local, "open", None)
    if current is not None and current.miss.kind == "compile":
        registry.set_kind(current.state, current.miss, "persistent_cache_hit")


_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Registers the listeners with ``jax.monitoring`` (once per process)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _installed = True
