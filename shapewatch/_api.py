"""Access to the records: ``misses``, ``report``, ``reset``."""

from __future__ import annotations

from typing import Any

from shapewatch._jit import watched_target
from shapewatch._records import FunctionRecord, Miss
from shapewatch._registry import code_key, registry


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


def suggest_buckets(fn: Any, leaf: str, axis: int, **propose_kwargs: Any) -> Any:
    """Proposes buckets from the lengths that a watched function actually traced.

    Args:
      fn: a watched function.
      leaf: the argument path as shapewatch prints it, e.g. ``"batch['tokens']"``.
      axis: the axis of that leaf whose length varied.
      **propose_kwargs: passed to :func:`shapewatch.buckets.propose`
        (``max_buckets``, ``multiple_of``, ``cost``, ...).

    Returns:
      A :class:`shapewatch.buckets.Buckets`.

    Raises:
      ValueError: if the function never traced that leaf with that axis,
        naming the leaves it did trace.
    """
    from shapewatch.buckets import propose

    lengths, seen = [], set()
    for m in misses(fn):
        for a in m.signature.arrays if m.signature is not None else ():
            seen.add(a.path)
            if a.path == leaf and axis < len(a.shape):
                lengths.append(a.shape[axis])
    if not lengths:
        raise ValueError(f"[shapewatch] suggest_buckets: {leaf!r} axis {axis} was never traced by this "
                         f"function; its array leaves are: {', '.join(sorted(seen)) or 'none recorded'}.")
    return propose(lengths, **propose_kwargs)
