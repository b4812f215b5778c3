"""Access to the records of one function (``misses``) and clearing them all (``reset``)."""

from __future__ import annotations

from typing import Any

from shapewatch._monitor.jit import watched_target
from shapewatch._monitor.records import FunctionRecord, Miss
from shapewatch._monitor.registry import code_key, registry


def function_record(fn: Any) -> FunctionRecord | None:
    """The snapshot of one watched function's records, or None if it never missed."""
    key = code_key(watched_target(fn))[0]
    with registry.lock:
        state = registry.functions.get(key)
        return None if state is None else state.snapshot()


def misses(fn: Any) -> list[Miss]:
    """The recorded misses of a watched function, oldest first.

    Args:
      fn: a function made by :func:`shapewatch.watched_jit`.

    Returns:
      A list of :class:`shapewatch.Miss` (copies: later misses do not change it).

    Raises:
      TypeError: if ``fn`` is not watched.
    """
    record = function_record(fn)
    return [] if record is None else list(record.misses)


def reset() -> None:
    """Clears every record (watched functions keep working and recording)."""
    registry.reset()
