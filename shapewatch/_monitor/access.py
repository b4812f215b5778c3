"""Access to the records of one function (``misses``) and clearing them all (``reset``)."""

from __future__ import annotations

from typing import Any

from shapewatch._monitor.jit import hook_of
from shapewatch._monitor.records import FunctionRecord, Miss
from shapewatch._monitor.registry import FunctionState, registry


def state_of(fn: Any) -> FunctionState | None:
    """The live records of a watched function, or None if it has not missed since the last reset.

    Raises:
      TypeError: if ``fn`` is not watched (while shapewatch is on: with ``SHAPEWATCH=0``
        nothing is watched and every function has no records).
    """
    hook = hook_of(fn)
    return None if hook is None else registry.state_of(hook)


def function_record(fn: Any) -> FunctionRecord | None:
    """The snapshot of one watched function's records, or None if it never missed."""
    state = state_of(fn)
    with registry.lock:
        return None if state is None else state.snapshot()


def misses(fn: Any) -> list[Miss]:
    """The recorded misses of a watched function, oldest first.

    Args:
      fn: a function made by :func:`shapewatch.watched_jit`.

    Returns:
      A list of :class:`shapewatch.Miss` (copies: later misses do not change it).

    Raises:
      TypeError: if ``fn`` is not watched (with ``SHAPEWATCH=0``: an empty list).
    """
    record = function_record(fn)
    return [] if record is None else list(record.misses)


def reset() -> None:
    """Clears every record (watched functions keep working and recording)."""
    registry.reset()
