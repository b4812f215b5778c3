"""The thread-safe, bounded store of watched functions and their misses.

It keeps no reference to user values: a miss holds its signature (shapes,
dtypes and the ``repr`` of static values) and nothing else. Records are keyed
by the function's code (module, qualified name, file and line) rather than by
the function object, so that they outlive a function re-created in a loop and
can still be reported at exit; :func:`shapewatch.reset` clears them.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from shapewatch._monitor.config import settings
from shapewatch._monitor.env import process_place
from shapewatch._monitor.records import COMPILING_KINDS, FunctionRecord, Miss
from shapewatch._monitor.signature import Signature, explain


def code_key(fun: Any) -> tuple[str, str, str, str]:
    """(key, qualname, module, location) of a function, stable across re-creation."""
    inner = fun
    while hasattr(inner, "func") and not hasattr(inner, "__code__"):  # functools.partial
        inner = inner.func
    inner = getattr(inner, "__func__", inner)  # bound methods
    code = getattr(inner, "__code__", None)
    qualname = getattr(inner, "__qualname__", None) or getattr(type(inner), "__qualname__", "<callable>")
    module = getattr(inner, "__module__", None) or "?"
    location = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "?"
    return f"{module}:{qualname}@{location}", qualname, module, location


@dataclasses.dataclass(eq=False)
class FunctionState:
    """The live, mutable records of one watched function (guarded by the registry lock)."""

    key: str
    function: str
    module: str
    location: str
    misses: collections.deque[Miss]
    # The latest distinct signatures (ordered, capped at max_records), for the nearest-diff.
    signatures: dict[Signature, None] = dataclasses.field(default_factory=dict)
    distinct: int = 0
    kinds: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    hook_ids: set[int] = dataclasses.field(default_factory=set)
    trace_s: float = 0.0
    lower_s: float = 0.0
    compile_s: float = 0.0
    dropped: int = 0
    calls: int | None = None
    max_recompiles: int | None = None
    on_excess: str | None = None
    warned: bool = False

    @property
    def compiles(self) -> int:
        return sum(self.kinds[k] for k in COMPILING_KINDS)

    def snapshot(self) -> FunctionRecord:
        return FunctionRecord(
            key=self.key,
            function=self.function,
            module=self.module,
            location=self.location,
            compiles=self.compiles,
            kinds=dict(self.kinds),
            signatures=self.distinct,
            trace_s=self.trace_s,
            lower_s=self.lower_s,
            compile_s=self.compile_s,
            calls=self.calls,
            dropped=self.dropped,
            misses=tuple(dataclasses.replace(m, spans=list(m.spans)) for m in self.misses),
        )


class Registry:
    """All watched functions of this process and what compiled outside them."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.functions: dict[str, FunctionState] = {}
        self.by_name: dict[str, list[FunctionState]] = collections.defaultdict(list)
        self.unwatched: dict[str, list[float]] = {}  # name -> [compiles, seconds]
        self.observers: list[Callable[[FunctionState, Miss], None]] = []
        # Budgets set by watched_jit belong to the function, not to its records: reset() keeps them.
        self.budgets: dict[str, tuple[int | None, str | None]] = {}
        self._seq = itertools.count(1)
        self.pid = os.getpid()
        self.host = socket.gethostname()

    def state_for(self, fun: Any) -> FunctionState:
        key, qualname, module, location = code_key(fun)
        with self.lock:
            state = self.functions.get(key)
            if state is None:
                state = FunctionState(key, qualname, module, location,
                                      collections.deque(maxlen=settings.max_records))
                state.max_recompiles, state.on_excess = self.budgets.get(key, (None, None))
                self.functions[key] = state
                self.by_name[qualname.rsplit(".", 1)[-1]].append(state)
            return state

    def add(self, state: FunctionState, hook_id: int | None, kind: str, signature: Signature | None,
            call_site: str | None, thread: str, timestamp: float) -> Miss:
        """Commits a miss: diff, counters, the cap; then tells the observers (guards)."""
        with self.lock:
            recreated = hook_id is not None and bool(state.hook_ids) and hook_id not in state.hook_ids
            if hook_id is not None:
                state.hook_ids.add(hook_id)
            changes = explain(signature, list(state.signatures)) if signature is not None else ()
            if signature is not None and signature not in state.signatures:
                state.signatures[signature] = None
                state.distinct += 1
                if len(state.signatures) > settings.max_records:
                    del state.signatures[next(iter(state.signatures))]
            if self.pid != os.getpid():  # forked
                self.pid = os.getpid()
            miss = Miss(next(self._seq), state.function, state.module, state.location, call_site,
                        thread, timestamp, kind, signature, changes, recreated=recreated,
                        pid=self.pid, host=self.host)
            miss.process_index, miss.process_count = process_place()
            if len(state.misses) == state.misses.maxlen:
                state.dropped += 1
            state.misses.append(miss)
            state.kinds[kind] += 1
            observers = list(self.observers)
        for observe in observers:
            observe(state, miss)
        return miss

    def add_cost(self, state: FunctionState | None, miss: Miss | None, phase: str,
                 seconds: float, end: float, name: str | None) -> None:
        with self.lock:
            if miss is None or state is None:
                entry = self.unwatched.setdefault(name or "<unnamed>", [0, 0.0])
                entry[0] += phase == "compile"
                entry[1] += seconds
                return
            setattr(miss, f"{phase}_s", getattr(miss, f"{phase}_s") + seconds)
            setattr(state, f"{phase}_s", getattr(state, f"{phase}_s") + seconds)
            miss.spans.append((phase, end - seconds, end))

    def set_kind(self, state: FunctionState, miss: Miss, kind: str) -> None:
        with self.lock:
            state.kinds[miss.kind] -= 1
            state.kinds[kind] += 1
            miss.kind = kind

    def set_budget(self, fun: Any, max_recompiles: int | None, on_excess: str | None) -> None:
        state = self.state_for(fun)
        with self.lock:
            state.max_recompiles, state.on_excess = max_recompiles, on_excess
            self.budgets[state.key] = (max_recompiles, on_excess)

    def count_call(self, state: FunctionState) -> None:
        with self.lock:
            state.calls = (state.calls or 0) + 1

    def reset(self) -> None:
        with self.lock:
            self.functions.clear()
            self.by_name.clear()
            self.unwatched.clear()


registry = Registry()
