"""Guards: recompile budgets, no-recompile sections, ``freeze`` and ``expect_compiles``.

All of them act in one observer of the registry, which runs after every
committed miss, in the thread that traced. Only compiles count: inlined and
ahead-of-time traces never do, and cache hits never reach the observer.

A guard can *stop* a compile only for a miss committed by the trace hook
(kinds ``compile`` and ``transform``): raising :class:`RecompileError` there
ends the trace, so JAX builds no executable and the function keeps working for
the signatures it already compiled. Such a rejected miss is taken back out of
the records, so it does not count as a compile and retrying the same signature
raises again. A ``no_retrace`` compile is noticed while JAX lowers, where an
exception would break JAX itself: guards warn about it instead.

Sections (``no_recompiles``, ``freeze``, ``expect_compiles``) are process-wide:
a section guards the functions it names (or all), whichever thread calls them,
for as long as it is open.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from shapewatch._config import settings
from shapewatch._errors import RecompileError, RecompileWarning
from shapewatch._records import COMPILING_KINDS, Miss
from shapewatch._registry import FunctionState, code_key, registry

logger = logging.getLogger("shapewatch")

#: Kinds committed by the trace hook that build an executable: a guard can stop these.
STOPPABLE_KINDS = ("compile", "transform")
_ALL_KINDS = None


class Section:
    """An open guard: which functions it covers, what it does, what it saw.

    Attributes:
      label: how messages name the section, e.g. ``shapewatch.no_recompiles(step)``.
      action: ``"raise"``, ``"warn"`` or ``"collect"`` (only record).
      misses: the misses of covered functions seen while the section was open
        (compiles only, unless the section collects every kind).
      violations: the misses the section raised or warned about.
    """

    def __init__(self, keys: frozenset[str] | None, action: str, label: str, *, allowance: int = 0,
                 allow_first: bool = False, every_kind: bool = False) -> None:
        self.keys = keys
        self.action = action
        self.label = label
        self.allowance = allowance
        self.allow_first = allow_first
        self.every_kind = every_kind
        self.first_seen: set[str] = set()
        self.misses: list[Miss] = []
        self.violations: list[Miss] = []

    def covers(self, state: FunctionState) -> bool:
        return self.keys is None or state.key in self.keys

    def admits(self, state: FunctionState) -> bool:
        """Whether this compile is allowed (called under the guards' lock)."""
        if self.action == "collect":
            return True
        if self.allow_first and state.key not in self.first_seen:
            self.first_seen.add(state.key)
            return True
        if self.allowance > 0:
            self.allowance -= 1
            return True
        return False


_lock = threading.Lock()
_sections: tuple[Section, ...] = ()  # copy-on-write: the observer reads it without the lock
_frozen: Section | None = None


def open_section(section: Section) -> Section:
    global _sections
    with _lock:
        _sections = (*_sections, section)
    return section


def close_section(section: Section) -> None:
    global _sections
    with _lock:
        _sections = tuple(s for s in _sections if s is not section)


@contextlib.contextmanager
def section(sec: Section) -> Iterator[Section]:
    """Opens ``sec`` for the duration of the block (used by the pytest plugin too)."""
    open_section(sec)
    try:
        yield sec
    finally:
        close_section(sec)


def keys_of(fns: tuple[Any, ...]) -> frozenset[str]:
    from shapewatch._jit import watched_target

    return frozenset(code_key(watched_target(fn))[0] for fn in fns)


def caller(depth: int = 2) -> str:
    frame = sys._getframe(depth)
    while frame.f_back is not None and frame.f_code.co_filename.endswith(("contextlib.py", __file__)):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


# ---------------------------------------------------------------- messages


def aggregated_cause(state: FunctionState) -> tuple[str, str]:
    """(cause, fix) over all the function's misses, or empty strings."""
    from shapewatch._analysis import causes

    with registry.lock:
        misses = list(state.misses)
    found = causes(misses)
    if not found:
        return "", ""
    return "; ".join(c.text for c in found[:2]), found[0].fix


def describe(headline: str, state: FunctionState, miss: Miss, note: str = "") -> str:
    """The message of a guard: ``[shapewatch] headline`` then the details, one per line."""
    this = miss.explanation
    if miss.signature is not None:
        this += f"  (signature: {miss.signature.short()})"
    lines = [f"[shapewatch] {headline}",
             f"  function:  {state.function} (defined at {state.location})",
             f"  call site: {miss.call_site or 'unknown'}",
             f"  this miss: {this}"]
    try:
        cause, fix = aggregated_cause(state)
    except Exception:
        from shapewatch._jit import internal_failure

        internal_failure("explaining a guarded miss")
        cause, fix = "", ""
    if cause:
        lines.append(f"  cause:     {cause}")
    if fix:
        lines.append(f"  fix:       {fix}")
    if note:
        lines.append(f"  {note}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the observer


def _budget_action(state: FunctionState, miss: Miss) -> tuple[str, str] | None:
    budget = state.max_recompiles if state.max_recompiles is not None else settings.max_recompiles
    if budget is None or state.compiles <= budget + 1:
        return None
    action = state.on_excess or settings.on_excess
    if action == "warn":
        if state.warned:
            return None
        state.warned = True
    headline = (f"{state.function} compiled {state.compiles} times, over its budget of {budget + 1} "
                f"(max_recompiles={budget}; the first compile is free).")
    note = {"raise": "This compile was stopped: the signatures compiled before still work.",
            "warn": "This warning is given once per function."}.get(action, "")
    return action, describe(headline, state, miss, note)


def _decide(state: FunctionState, miss: Miss) -> list[tuple[str, str, Section | None]]:
    """The actions the guards take for one miss: (action, message, section)."""
    actions: list[tuple[str, str, Section | None]] = []
    compiling = miss.kind in COMPILING_KINDS
    with _lock:
        for sec in _sections:
            if not sec.covers(state) or not (compiling or sec.every_kind):
                continue
            sec.misses.append(miss)
            if compiling and not sec.admits(state):
                sec.violations.append(miss)
                headline = f"{state.function} compiled inside {sec.label}."
                actions.append((sec.action, describe(headline, state, miss), sec))
    if compiling:
        budget = _budget_action(state, miss)
        if budget is not None:
            actions.append((budget[0], budget[1], None))
    return actions


def reject(state: FunctionState, miss: Miss) -> None:
    """Takes a stopped miss back out of the records: no executable was built."""
    with registry.lock:
        try:
            state.misses.remove(miss)
        except ValueError:
            pass
        if state.kinds[miss.kind] > 0:
            state.kinds[miss.kind] -= 1
        sig = miss.signature
        if sig is not None and sig in state.signature_set and all(m.signature != sig for m in state.misses):
            state.signature_set.discard(sig)
            with contextlib.suppress(ValueError):
                state.signatures.remove(sig)
    with _lock:
        for sec in _sections:
            if miss in sec.misses:
                sec.misses.remove(miss)


def _warn(message: str, miss: Miss) -> None:
    filename, _, line = (miss.call_site or "").rpartition(":")
    if filename and line.isdigit():
        warnings.warn_explicit(message, RecompileWarning, filename, int(line))
    else:
        warnings.warn(message, RecompileWarning, stacklevel=4)


def _observe(state: FunctionState, miss: Miss) -> None:
    if not _sections and state.max_recompiles is None and settings.max_recompiles is None:
        return  # the common case: no guard at all
    try:
        error = _act(state, miss, _decide(state, miss))
    except Exception:
        from shapewatch._jit import internal_failure

        internal_failure("checking guards")
        return
    if error is not None:
        raise error


def _act(state: FunctionState, miss: Miss, actions: list[tuple[str, str, Section | None]]) -> RecompileError | None:
    stoppable = miss.kind in STOPPABLE_KINDS
    error: RecompileError | None = None
    for action, message, _sec in actions:
        if action == "raise" and stoppable:
            error = error or RecompileError(message)
        elif action in ("raise", "warn"):
            if action == "raise":
                message += "\n  (JAX compiled this without a retrace, while lowering, where shapewatch cannot stop it.)"
            try:
                _warn(message, miss)
            except Warning as w:  # the warnings filter turned it into an error
                if not stoppable:
                    logger.warning("%s", message)
                    continue
                error = error or RecompileError(message)
                error.__cause__ = w
        elif action == "log":
            logger.warning("%s", message)
    if error is not None:
        reject(state, miss)
    return error


registry.observers.append(_observe)


# ---------------------------------------------------------------- the public guards


@contextlib.contextmanager
def no_recompiles(*fns: Any) -> Iterator[Section]:
    """Raises :class:`RecompileError` at the first compile inside the block.

    The section guards the functions named (none: every watched function),
    whichever thread calls them, for the duration of the block: a compile in
    another thread raises in that thread. Cache hits, inlined traces (a
    watched function called inside another jit) and unwatched code never fire
    it. The stopped call builds no executable; the signatures compiled before
    keep working. Sections nest.

    Args:
      *fns: the watched functions to guard; none: all of them.

    Yields:
      The open :class:`Section`; ``.violations`` lists the misses it stopped.

    Raises:
      TypeError: if one of ``fns`` was not made by :func:`shapewatch.watched_jit`.
      RecompileError: from the call that would compile, with the full explanation.

    >>> import jax.numpy as jnp, shapewatch
    >>> @shapewatch.watched_jit
    ... def step(x):
    ...     return x + 1
    >>> _ = step(jnp.ones(3))  # warm-up: compiles
    >>> with shapewatch.no_recompiles(step):  # doctest: +ELLIPSIS
    ...     _ = step(jnp.ones(3))  # a cache hit: fine
    ...     _ = step(jnp.ones(4))  # a new shape: stopped
    Traceback (most recent call last):
    shapewatch.RecompileError: [shapewatch] step compiled inside shapewatch.no_recompiles(step).
    ...
    """
    keys = keys_of(fns) if fns else None
    names = ", ".join(getattr(f, "__name__", "?") for f in fns)
    with section(Section(keys, "raise", f"shapewatch.no_recompiles({names})")) as sec:
        yield sec


def freeze(on_miss: str = "raise") -> None:
    """After warm-up, makes every further compile of any watched function an error.

    Process-wide, in every thread, until :func:`unfreeze`; calling it again
    replaces the earlier freeze. Like :func:`no_recompiles`, it ignores cache
    hits, inlined traces and unwatched code.

    Args:
      on_miss: ``"raise"`` (:class:`RecompileError`; no executable is built) or
        ``"warn"`` (a :class:`RecompileWarning` for each compile).

    Raises:
      ValueError: for another ``on_miss``.

    >>> import jax.numpy as jnp, shapewatch
    >>> @shapewatch.watched_jit
    ... def infer(x):
    ...     return x * 2
    >>> _ = infer(jnp.ones(2))  # warm-up
    >>> shapewatch.freeze()
    >>> infer(jnp.ones(5))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    shapewatch.RecompileError: [shapewatch] infer compiled inside shapewatch.freeze() ...
    ...
    >>> shapewatch.unfreeze()
    >>> infer(jnp.ones(5)).shape
    (5,)
    """
    global _frozen
    if on_miss not in ("raise", "warn"):
        raise ValueError(f"[shapewatch] freeze(on_miss={on_miss!r}) is not valid: use 'raise' or 'warn'.")
    sec = Section(None, on_miss, f"shapewatch.freeze() (frozen at {caller()})")
    unfreeze()
    with _lock:
        _frozen = sec
    open_section(sec)


def unfreeze() -> None:
    """Ends :func:`freeze` (does nothing if not frozen)."""
    global _frozen
    with _lock:
        sec, _frozen = _frozen, None
    if sec is not None:
        close_section(sec)


@contextlib.contextmanager
def expect_compiles(fn: Any, n: int, *, at_most: bool = False) -> Iterator[Section]:
    """Checks, for tests, that ``fn`` compiles exactly (or at most) ``n`` times in the block.

    Compiles count, traces do not: inlined and ahead-of-time traces and calls
    stopped by another guard are left out. Compiles in any thread count.

    Args:
      fn: a watched function.
      n: the number of compiles expected (an integer >= 0).
      at_most: accept fewer than ``n``.

    Yields:
      The open :class:`Section`; ``.misses`` lists the compiles so far.

    Raises:
      TypeError: if ``fn`` is not watched.
      ValueError: if ``n`` is not an integer >= 0.
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
    keys = keys_of((fn,))
    name = getattr(fn, "__name__", "?")
    with section(Section(keys, "collect", f"expect_compiles({name}, {n})")) as sec:
        yield sec
    got = len(sec.misses)
    if got == n or (at_most and got < n):
        return
    expected = f"at most {n}" if at_most else f"exactly {n}"
    lines = [f"[shapewatch] expected {expected} compile{'s' * (n != 1)} of {name}, got {got}:"]
    for i, m in enumerate(sec.misses, 1):
        short = m.signature.short() if m.signature is not None else "(same signature)"
        lines.append(f"  {i}. {short}: {m.explanation} [{m.kind}] at {m.call_site or 'unknown'}")
    if not sec.misses:
        lines.append("  (nothing compiled: every call hit the cache)")
    raise RecompileError("\n".join(lines))
