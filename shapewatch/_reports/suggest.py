"""``suggest_buckets``: a bucket plan from the lengths that a watched function traced."""

from __future__ import annotations

from typing import Any

from shapewatch._monitor.access import misses
from shapewatch.buckets import propose


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
