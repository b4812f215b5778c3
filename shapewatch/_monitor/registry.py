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
import weakref
from collections.abc import Callable
from typing import Any

from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor import calls as _calls
from shapewatch._monitor.config import settings
from shapewatch._monitor.env import process_place
from shapewatch._monitor.index import SignatureIndex
from shapewatch._monitor.records import COMPILING_KINDS, RECREATED, FunctionRecord, Miss
from shapewatch._monitor.signature import Signature, explain


def _unwrapped(fun: Any) -> Any:
    """``fun`` without its decorators' wrappers (``__wrapped__``, as ``functools.wraps`` sets),
    so that a function decorated with ``jax.named_scope`` is located at its own definition."""
    seen = 0
    while seen < 100 and callable(getattr(fun, "__wrapped__", None)) and hasattr(fun, "__code__"):
        target = fun.__wrapped__
        if not hasattr(getattr(target, "__func__", target), "__code__"):
            break  # wraps a builtin or a callable object: the wrapper is the code that runs
        fun, seen = target, seen + 1
    return fun


def code_key(fun: Any) -> tuple[str, str, str, str]:
    """(key, qualname, module, location) of a function, stable across re-creation.

    The key holds the code's own ``file:line``; the location is how reports name it
    (a notebook cell's function: ``In [2]:1``, whichever cell ran its code last).
    """
    inner = fun
    while hasattr(inner, "func") and not hasattr(inner, "__code__"):  # functools.partial
        inner = inner.func
    inner = _unwrapped(getattr(inner, "__func__", inner))  # bound methods; functools.wraps
    code = getattr(inner, "__code__", None)
    if code is None:  # a callable object: its class's __call__ (unwrapped: jax.named_scope, ...)
        call = _unwrapped(type(inner).__dict__.get("__call__"))
        code = getattr(getattr(call, "__func__", call), "__code__", None)
    qualname = getattr(inner, "__qualname__", None) or getattr(type(inner), "__qualname__", "<callable>")
    module = getattr(inner, "__module__", None) or "?"
    if code is None:
        return f"{module}:{qualname}@?", qualname, module, "?"
    location = _adapt.place(code.co_filename, code.co_firstlineno)
    return f"{module}:{qualname}@{code.co_filename}:{code.co_firstlineno}", qualname, module, location


@dataclasses.dataclass(eq=False)
class FunctionState:
    """The live, mutable records of one watched function (guarded by the registry lock).

    One function is one state: watched twice with other options, it is still one;
    re-created (a new object of the same code once the old one is gone), it is
    still one; two live functions that share code (closures of one factory, two
    instances of one callable class) are two, the second named ``name [2]``.
    """

    key: str
    function: str
    module: str
    location: str
    code: str = ""
    misses: collections.deque[Miss] = dataclasses.field(default_factory=collections.deque)
    # The latest distinct signatures (ordered, capped at max_records), indexed for what a miss asks.
    signatures: SignatureIndex = dataclasses.field(default_factory=SignatureIndex)
    distinct: int = 0
    kinds: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    hooks: list[weakref.ReferenceType[Any]] = dataclasses.field(default_factory=list)  # the live ones
    hook_ids: set[int] = dataclasses.field(default_factory=set)  # of the hooks that committed a miss
    hooks_seen: int = 0  # hooks that ever committed a miss (a new one, the old ones gone: re-created)
    #: compiles per jit options (a budget counts the compiles of its own options)
    by_options: collections.Counter[Any] = dataclasses.field(default_factory=collections.Counter)
    trace_s: float = 0.0
    lower_s: float = 0.0
    compile_s: float = 0.0
    dropped: int = 0
    warned: bool = False
    #: the arguments the latest miss that read them found returned whole (a compile without a retrace
    #: reads none: it keeps these)
    returns: tuple[str, ...] = ()

    @property
    def compiles(self) -> int:
        return sum(self.kinds[k] for k in COMPILING_KINDS)

    def live_hooks(self) -> list[Any]:
        return [h for h in (r() for r in self.hooks) if h is not None]

    def hook(self, hook_id: int | None) -> Any:
        """The live hook of that id, or None."""
        return next((h for h in self.live_hooks() if h.id == hook_id), None)

    @property
    def calls(self) -> int | None:
        counts = [h.calls for h in self.live_hooks() if h.calls is not None]
        return sum(counts) if counts else None

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
            misses=_with_calls([m.copy() for m in self.misses], _calls.calls_by_signature(self.live_hooks())),
        )


def _with_calls(misses: list[Miss], counted: dict[Any, int] | None) -> tuple[Miss, ...]:
    """The misses, the first of each signature holding its calls (when calls were counted per signature)."""
    if counted is not None:
        seen: set[Any] = set()
        for m in misses:
            if m.signature is not None and m.signature not in seen:
                seen.add(m.signature)
                m.calls = counted.get(m.signature, 0)
    return tuple(misses)


def _same_function(hook: Any, fun: Any) -> bool:
    other = hook.__wrapped__
    if other is fun:
        return True
    try:
        return bool(other == fun)
    except Exception:
        return False


class Registry:
    """All watched functions of this process and what compiled outside them."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.functions: dict[str, FunctionState] = {}
        self.by_code: dict[str, list[FunctionState]] = {}
        self.unwatched: dict[str, list[float]] = {}  # name -> [compiles, seconds]
        self.observers: list[Callable[[FunctionState, Miss], None]] = []
        self.generation = 0  # reset() starts a new one; hooks re-join their records lazily
        self.counting: weakref.WeakSet[Any] = weakref.WeakSet()  # hooks that count calls
        self.hooks: weakref.WeakSet[Any] = weakref.WeakSet()  # every live hook (to tell one from other callables)
        self._seq = itertools.count(1)
        self.pid = os.getpid()
        self.host = socket.gethostname()

    def state_for(self, hook: Any, fun: Any) -> FunctionState:
        """The records of the function behind ``hook`` (made at its first miss after a reset)."""
        with self.lock:
            if hook.generation == self.generation and hook.state is not None:
                return hook.state
            code, qualname, module, location = code_key(fun)
            group = self.by_code.setdefault(code, [])
            state = next((s for s in group if any(_same_function(h, fun) for h in s.live_hooks())), None)
            if state is None:  # re-created: the earlier function of this code is gone
                state = next((s for s in group if not s.live_hooks()), None)
            if state is None:
                n = len(group) + 1
                key, name = (code, qualname) if n == 1 else (f"{code}#{n}", f"{qualname} [{n}]")
                state = FunctionState(key, name, module, location, code)
                group.append(state)
                self.functions[key] = state
            live = state.live_hooks()  # drop the dead: a loop of re-created functions keeps one entry
            state.hooks = [weakref.ref(h) for h in live] + ([] if hook in live else [weakref.ref(hook)])
            state.hook_ids &= {h.id for h in live}
            hook.state, hook.generation = state, self.generation
            return state

    def state_of(self, hook: Any) -> FunctionState | None:
        """The records of a hook in this generation, or None before its first miss."""
        with self.lock:
            return hook.state if hook.generation == self.generation else None

    def add(self, state: FunctionState, hook: Any, kind: str, signature: Signature | None,
            call_site: str | None, thread: str, timestamp: float, *, reason: str | None = None,
            context: int | None = None, stoppable: bool = True, inside: str | None = None) -> Miss:
        """Commits a miss: diff, counters, the cap; then tells the observers (guards)."""
        with self.lock:
            hook_id = None if hook is None else hook.id
            recreated = hook_id is not None and state.hooks_seen > 0 and hook_id not in state.hook_ids and (
                not any(_same_function(h, hook.__wrapped__) for h in state.live_hooks() if h is not hook))
            if hook_id is not None and hook_id not in state.hook_ids:
                state.hook_ids.add(hook_id)
                state.hooks_seen += 1
            why = RECREATED if recreated else reason  # the text of an identical signature's marker
            changes = explain(signature, state.signatures, why) if signature is not None else ()
            if signature is not None and signature not in state.signatures:
                state.signatures.add(signature)
                state.distinct += 1
                if len(state.signatures) > settings.max_records:
                    state.signatures.remove(state.signatures.oldest())
            if self.pid != os.getpid():  # forked
                self.pid = os.getpid()
            miss = Miss(next(self._seq), state.function, state.module, state.location, call_site,
                        thread, timestamp, kind, signature, changes, recreated=recreated,
                        pid=self.pid, host=self.host, reason=reason, hook_id=hook_id, context=context,
                        stoppable=stoppable, inside=inside)
            miss.process_index, miss.process_count = process_place()
            if signature is not None:
                state.signatures.note(miss)
            state.misses.append(miss)
            while len(state.misses) > settings.max_records:
                state.misses.popleft()
                state.dropped += 1
            state.kinds[kind] += 1
            if kind in COMPILING_KINDS and hook is not None:
                state.by_options[hook.options] += 1
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

    def count_calls_of(self, hook: Any) -> None:
        """Remembers a hook that counts calls, so that :meth:`reset` restarts its count."""
        with self.lock:
            self.counting.add(hook)

    def reset(self) -> None:
        with self.lock:
            self.functions.clear()
            self.by_code.clear()
            self.unwatched.clear()
            self.generation += 1
            for hook in list(self.counting):
                hook.calls = 0
                hook.tally = None


registry = Registry()
