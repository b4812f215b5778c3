"""Attribution of ``jax.monitoring`` duration events to pending misses.

JAX reports the cost of a compile through ``jax.monitoring`` duration events,
synchronously, on the thread that compiles: one for tracing, one for lowering
(jaxpr to MLIR) and one for the backend compile. On a miss, the trace hook of a
watched function commits the miss and marks it open on its thread; the events
that follow on that thread are added to it, phase by phase:

* trace: to the open miss while it has not been lowered (jax 0.5 also emits
  trace events for nested traces: those go to the latest inlined miss);
* lower, then compile: to the open miss if it compiles (not for inlined misses);
* an event that carries a name (jax >= 0.7: ``f`` or ``jit(f)``) must match the
  open miss's function name, so unwatched code that compiles in between is not
  charged to it. A lowering named ``jit(f)`` with no open miss is a compile
  without retrace of the watched function named ``f``.

Everything else is totalled as compile time spent outside watched functions.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from shapewatch._monitor import compat as _compat
from shapewatch._monitor.records import Miss
from shapewatch._monitor.registry import FunctionState, registry

_local = threading.local()
_PHASES = {_compat.TRACE_EVENT: "trace", _compat.LOWER_EVENT: "lower", _compat.COMPILE_EVENT: "compile"}


class _Open:
    __slots__ = ("state", "miss", "phase", "short_name")

    def __init__(self, state: FunctionState, miss: Miss) -> None:
        self.state = state
        self.miss = miss
        self.phase = "traced"
        self.short_name = state.function.rsplit(".", 1)[-1]

    def matches(self, name: str | None) -> bool:
        if name is None:
            return True
        return name == self.short_name or name.rstrip(")").endswith("(" + self.short_name)


def opened(state: FunctionState, miss: Miss) -> None:
    """Marks a committed miss as the one that this thread's next events belong to."""
    if miss.kind == "inlined":
        _local.inlined = _Open(state, miss)
    else:
        _local.open = _Open(state, miss)
        _local.inlined = None


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    phase = _PHASES.get(event)
    if phase is None:
        return
    try:
        _attribute(phase, float(duration), kwargs.get("fun_name"))
    except Exception:  # never break JAX's compile
        from shapewatch._monitor.errors import internal_failure

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
        if current is not None and current.phase == "traced" and current.matches(name):
            registry.add_cost(current.state, current.miss, phase, seconds, end, name)
            return
        _local.unwatched_trace = name
    elif phase == "lower":
        unwatched_trace, _local.unwatched_trace = getattr(_local, "unwatched_trace", None), None
        if current is not None and current.matches(name) and (
            current.phase == "traced" or (name is not None and current.miss.kind == "transform")
        ):
            current.phase = "lowered"
            registry.add_cost(current.state, current.miss, phase, seconds, end, name)
            return
        if (name is not None and name.startswith("jit(") and name.endswith(")")
                and unwatched_trace != name[4:-1]):
            candidates = registry.by_name.get(name[4:-1])
            if candidates:
                state = max(candidates, key=lambda s: s.misses[-1].seq if s.misses else 0)
                miss = registry.add(state, None, "no_retrace", None, None,
                                    threading.current_thread().name, end - seconds)
                _local.open = current = _Open(state, miss)
                current.phase = "lowered"
                registry.add_cost(state, miss, phase, seconds, end, name)
                return
    elif phase == "compile":
        if current is not None and current.phase == "lowered" and current.matches(name):
            current.phase = "compiled" if name is None or current.miss.kind != "transform" else "reopenable"
            if current.phase == "compiled":
                _local.open = None
            registry.add_cost(current.state, current.miss, phase, seconds, end, name)
            return
    registry.add_cost(None, None, phase, seconds, end, name)


def _on_event(event: str, **kwargs: Any) -> None:
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
