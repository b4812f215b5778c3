"""Guards: recompile budgets, no-recompile sections, ``freeze`` and ``expect_compiles``.

One registry observer runs them after every committed miss, in the thread that
traced or lowered. Only compiles count. A guard stops a compile by raising from
the trace hook, or, for a compile without a retrace, from JAX's lowering event:
no executable is built, and the miss is taken back out of the records so that it
is not counted. A backend compile of a signature lowered earlier (``.lower()``,
then a call) is seen only once built: for it a guard warns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from shapewatch._monitor.config import settings
from shapewatch._monitor.errors import RecompileError, RecompileWarning, internal_failure
from shapewatch._monitor.jit import hook_of
from shapewatch._monitor.records import COMPILING_KINDS, Miss
from shapewatch._monitor.registry import FunctionState, registry

logger = logging.getLogger("shapewatch")


@dataclasses.dataclass(eq=False)
class Section:
    """An open guard. ``label`` names it in messages; ``action`` is ``"raise"``, ``"warn"``
    or ``"collect"``; ``misses`` holds the compiles of covered functions while open (every
    kind with ``every_kind``); ``violations`` the misses it raised or warned about."""

    hooks: frozenset[int] | None  # ids of the guarded functions' hooks; None: every watched function
    action: str
    label: str
    allowance: int = 0  # compiles allowed in the section
    allow_first: bool = False  # the first compile of each function is allowed
    every_kind: bool = False
    first_seen: set[str] = dataclasses.field(default_factory=set)
    misses: list[Miss] = dataclasses.field(default_factory=list)
    violations: list[Miss] = dataclasses.field(default_factory=list)

    def covers(self, state: FunctionState) -> bool:
        return self.hooks is None or not self.hooks.isdisjoint(state.hook_ids)

    def admits(self, state: FunctionState) -> bool:
        """Whether this compile is allowed (called under the guards' lock)."""
        if self.allow_first and state.key not in self.first_seen:
            self.first_seen.add(state.key)
            return True
        self.allowance -= 1
        return self.action == "collect" or self.allowance >= 0


_lock = threading.Lock()
_sections: tuple[Section, ...] = ()  # copy-on-write: the observer reads it without the lock
_frozen: Section | None = None


def _open(sec: Section | None = None, close: Section | None = None) -> None:
    global _sections
    with _lock:
        _sections = tuple(s for s in _sections if s is not close) + ((sec,) if sec else ())


@contextlib.contextmanager
def section(sec: Section) -> Iterator[Section]:
    """Opens ``sec`` for the duration of the block (used by the pytest plugin too)."""
    _open(sec)
    try:
        yield sec
    finally:
        _open(close=sec)


def hooks_of(fns: tuple[Any, ...]) -> frozenset[int]:
    """The hooks of watched functions (and of every function of the same records). With
    ``SHAPEWATCH=0`` nothing is watched: the set is empty and the guard guards nothing."""
    ids = set()
    for fn in fns:
        hook = hook_of(fn)
        if hook is not None:
            ids.add(hook.id)
            state = registry.state_of(hook)
            ids.update(state.hook_ids if state is not None else ())
    return frozenset(ids)


def name_of(state: FunctionState) -> str:
    """The qualified name without the ``<locals>`` of enclosing functions."""
    return state.function.rsplit("<locals>.", 1)[-1]


def describe(headline: str, state: FunctionState, miss: Miss, note: str = "") -> str:
    """The message of a guard: ``[shapewatch] headline`` then the details, one per line."""
    signature = "" if miss.signature is None else f"  (signature: {miss.signature.short()})"
    lines = [f"[shapewatch] {headline}", f"  function:  {state.function} (defined at {state.location})",
             f"  call site: {miss.call_site or 'unknown'}", f"  this miss: {miss.explanation}{signature}"]
    from shapewatch._reports.analysis import causes  # the aggregated cause, over all the misses

    with registry.lock:
        misses = list(state.misses)
    with contextlib.suppress(Exception):  # the cause is a bonus: never lose the guard over it
        found = causes(misses)[:2]
        lines += [f"  cause:     {'; '.join(c.text for c in found)}", f"  fix:       {found[0].fix}"] if found else []
    lines += [f"  {note}"] * bool(note)
    return "\n".join(lines)


def _budget(state: FunctionState, miss: Miss) -> tuple[str, str] | None:
    """The budget of the watched_jit whose call compiled, over the compiles made with its jit options."""
    hook = state.hook(miss.hook_id)
    own, action = hook.budget if hook is not None else (None, None)
    budget = own if own is not None else settings.max_recompiles
    action = action or settings.on_excess
    compiles = state.by_options[hook.options] if hook is not None else state.compiles
    if budget is None or compiles <= budget + 1 or (action == "warn" and state.warned):
        return None
    state.warned = state.warned or action == "warn"
    stopped = action == "raise" and _stoppable(miss)
    note = "This compile was stopped: the signatures compiled before still work." if stopped else (
        "This warning is given once per function." if action == "warn" else "")
    headline = (f"{name_of(state)} compiled {compiles} times, over its budget of {budget + 1} "
                f"(max_recompiles={budget}; the first compile is free).")
    return action.replace("warn", "warn_once"), describe(headline, state, miss, note)


def _decide(state: FunctionState, miss: Miss) -> list[tuple[str, str]]:
    """What the guards do about one miss: (action, message) pairs."""
    actions: list[tuple[str, str]] = []
    compiling = miss.kind in COMPILING_KINDS
    with _lock:
        for sec in _sections:
            if sec.covers(state) and (compiling or sec.every_kind):
                sec.misses.append(miss)
                if compiling and not sec.admits(state):
                    sec.violations.append(miss)
                    actions.append((sec.action, describe(f"{name_of(state)} compiled inside {sec.label}.", state, miss)))
        budget = _budget(state, miss) if compiling else None
    return actions + [budget] if budget else actions


def reject(state: FunctionState, miss: Miss) -> None:
    """Takes a stopped miss back out of the records: no executable was built."""
    with registry.lock:
        with contextlib.suppress(ValueError):
            state.misses.remove(miss)
        state.kinds[miss.kind] = max(0, state.kinds[miss.kind] - 1)
        hook = state.hook(miss.hook_id)
        if hook is not None and miss.kind in COMPILING_KINDS:
            state.by_options[hook.options] = max(0, state.by_options[hook.options] - 1)
        sig = miss.signature
        if sig is not None:
            state.signatures.unnote(miss)  # it did not compile: not a compile of its own, nor a context seen
        if sig is not None and sig in state.signatures and all(m.signature != sig for m in state.misses):
            del state.signatures[sig]
            state.distinct -= 1
    with _lock:
        for sec in _sections:
            with contextlib.suppress(ValueError):
                sec.misses.remove(miss)


def _warn(message: str, miss: Miss) -> None:
    filename, _, line = (miss.call_site or "?:?").rpartition(":")  # the warning points at the user's call
    warnings.warn_explicit(message, RecompileWarning, filename, int(line) if line.isdigit() else 0)


def _stoppable(miss: Miss) -> bool:
    """A compile reported before JAX builds the executable (by the trace hook, or while lowering)."""
    return miss.kind in COMPILING_KINDS and miss.stoppable


def _act(state: FunctionState, miss: Miss) -> RecompileError | None:
    stoppable = _stoppable(miss)
    error: RecompileError | None = None
    for action, message in _decide(state, miss):
        if action == "raise" and stoppable:
            error = error or RecompileError(message)
        elif action == "log":
            logger.warning("%s", message)
        elif action in ("raise", "warn", "warn_once"):
            if action == "raise":
                message += ("\n  (JAX built this executable before shapewatch saw it: a backend compile of a "
                            "signature lowered earlier; shapewatch could not stop it.)")
            try:
                _warn(message, miss)
            except Warning as w:  # the warnings filter made it an error
                if not stoppable:
                    logger.warning("%s", message)
                elif error is None:
                    error = RecompileError(message)
                    error.__cause__ = w
                    state.warned = state.warned and action != "warn_once"  # a retry must stop again
    if error is not None:
        reject(state, miss)
    return error


def _observe(state: FunctionState, miss: Miss) -> None:
    if not _sections and settings.max_recompiles is None and all(h.budget[0] is None for h in state.live_hooks()):
        return  # the common case: no guard at all
    try:
        error = _act(state, miss)
    except Exception:
        internal_failure("checking guards")
        return
    if error is not None:
        raise error


registry.observers.append(_observe)


@contextlib.contextmanager
def no_recompiles(*fns: Any) -> Iterator[Section]:
    """Raises :class:`RecompileError` at the first compile inside the block.

    The section guards the functions named (none: every watched function),
    whichever thread calls them, for the duration of the block: a compile in
    another thread raises in that thread. Cache hits, inlined traces and
    unwatched code never fire it; the stopped call builds no executable, and
    the signatures compiled before keep working. Sections nest.

    Args:
      *fns: the watched functions to guard; none: all of them.
    Yields:
      The open :class:`Section`; ``.violations`` lists the misses it stopped.
    Raises:
      TypeError: if one of ``fns`` is not watched.
      RecompileError: from the call that would compile, with the full explanation.

    >>> import jax.numpy as jnp, shapewatch
    >>> @shapewatch.watched_jit
    ... def step(x):
    ...     return x + 1
    >>> _ = step(jnp.ones(3))  # warm-up: compiles
    >>> try:
    ...     with shapewatch.no_recompiles(step):
    ...         _ = step(jnp.ones(3))  # a cache hit: fine
    ...         _ = step(jnp.ones(4))  # a new shape: stopped
    ... except shapewatch.RecompileError as err:
    ...     print(str(err).splitlines()[0])
    [shapewatch] step compiled inside shapewatch.no_recompiles(step).
    """
    names = ", ".join(getattr(f, "__name__", "?") for f in fns)
    with section(Section(hooks_of(fns) if fns else None, "raise", f"shapewatch.no_recompiles({names})")) as sec:
        yield sec


def freeze(on_miss: str = "raise") -> None:
    """After warm-up, makes any further compile of any watched function an error.

    Process-wide, in every thread, until :func:`unfreeze`; a second call
    replaces the first. Cache hits, inlined traces and unwatched code are free.

    Args:
      on_miss: ``"raise"`` (:class:`RecompileError`; no executable is built) or
        ``"warn"`` (a :class:`RecompileWarning` at each compile).
    Raises:
      ValueError: for another ``on_miss``.

    >>> import jax.numpy as jnp, shapewatch
    >>> @shapewatch.watched_jit
    ... def infer(x):
    ...     return x * 2
    >>> _ = infer(jnp.ones(2))  # warm-up
    >>> shapewatch.freeze()
    >>> try:
    ...     infer(jnp.ones(5))
    ... except shapewatch.RecompileError as err:
    ...     print(str(err).splitlines()[0])  # doctest: +ELLIPSIS
    [shapewatch] infer compiled inside shapewatch.freeze() (frozen at ...).
    >>> shapewatch.unfreeze()
    >>> infer(jnp.ones(5)).shape
    (5,)
    """
    global _frozen
    if on_miss not in ("raise", "warn"):
        raise ValueError(f"[shapewatch] freeze(on_miss={on_miss!r}) is not valid: use 'raise' or 'warn'.")
    where = sys._getframe(1)
    sec = Section(None, on_miss, f"shapewatch.freeze() (frozen at {where.f_code.co_filename}:{where.f_lineno})")
    with _lock:
        old, _frozen = _frozen, sec
    _open(sec, close=old)


def unfreeze() -> None:
    """Ends :func:`freeze` (does nothing if not frozen)."""
    global _frozen
    with _lock:
        sec, _frozen = _frozen, None
    _open(close=sec)


@contextlib.contextmanager
def expect_compiles(fn: Any, n: int, *, at_most: bool = False) -> Iterator[Section]:
    """Checks, in a test, that ``fn`` compiles exactly (or at most) ``n`` times in the block.

    Compiles in any thread count; inlined and ahead-of-time traces, and calls
    stopped by another guard, do not.

    Args:
      fn: a watched function.
      n: the number of compiles expected (an integer >= 0).
      at_most: accept fewer than ``n``.
    Yields:
      The open :class:`Section`; ``.misses`` lists the compiles so far.
    Raises:
      TypeError: if ``fn`` is not watched; ValueError: if ``n`` is not valid.
      RecompileError: at the end of the block when the count is off, listing what compiled.

    >>> import jax.numpy as jnp, shapewatch
    >>> @shapewatch.watched_jit
    ... def norm(x):
    ...     return x / x.sum()
    >>> with shapewatch.expect_compiles(norm, 2):
    ...     for size in (3, 3, 4):
    ...         _ = norm(jnp.ones(size))
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"[shapewatch] expect_compiles(n={n!r}): n must be an integer >= 0.")
    name = getattr(fn, "__name__", "?")
    with section(Section(hooks_of((fn,)), "collect", f"expect_compiles({name}, {n})")) as sec:
        yield sec
    if not settings.enabled:  # SHAPEWATCH=0: nothing is watched, so nothing can be checked
        return
    got = len(sec.misses)
    if got == n or (at_most and got < n):
        return
    lines = [f"[shapewatch] expected {'at most' if at_most else 'exactly'} {n} compile{'s' * (n != 1)} "
             f"of {name}, got {got}:"]
    lines += [f"  {i}. {m.signature.short() if m.signature is not None else '(same signature)'}: "
              f"{m.explanation} [{m.kind}] at {m.call_site or 'unknown'}" for i, m in enumerate(sec.misses, 1)
              ] or ["  (nothing compiled: every call hit the cache)"]
    raise RecompileError("\n".join(lines))
