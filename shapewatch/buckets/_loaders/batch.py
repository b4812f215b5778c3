"""The :class:`Batch` that both loaders yield: padded data, mask, valid lengths, bucket,
and the segments of each row (``segment_ids``, ``positions``).

:func:`~shapewatch.buckets.bucketed` and :func:`~shapewatch.buckets.group_by_length`
both yield :class:`Batch` tuples. A batch made by bucketing has one segment per row;
``group_by_length(..., strategy="pack")`` puts several examples in one row, each its own
segment. A step that honours ``segment_ids`` serves both.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._checks import is_int

__all__ = ["Batch", "one_segment"]


class Batch(NamedTuple):
    """One padded batch.

    Attributes:
        data: the padded batch (same structure as the input: array, dict, tuple, ...).
        mask: bool array, True at valid positions: shape ``(rows, bucket)`` for
            ``group_by_length`` and ``padded.shape[:axis + 1]`` for ``bucketed``;
            None with ``return_mask=False``.
        lengths: int64 array of valid lengths, ``mask.shape[:-1]``; 0 for padded rows
            (packed: the real positions of each row, all its examples together).
        bucket: the padded length of the variable axis (packed: the row length).
        rows: the number of real rows (the first ``rows`` rows; the others are padding
            added by ``remainder="pad"``), or None where the batch has no row axis.
            0 for a batch of padding only: in a job of several processes, a process whose
            shard ran out yields these (mask all False, lengths 0) so that every process
            takes the same number of steps. A loss should weigh by the mask and guard the
            division (``sum(loss * mask) / maximum(sum(mask), 1)``, with the sums taken
            over the global batch), so such a batch adds nothing to the gradient.
        segment_ids: int32 array, ``lengths.shape + (bucket,)`` (``(rows, bucket)`` for
            ``group_by_length``): 0 at padding, ``k`` at the positions of the row's
            ``k``-th example (1-based). Bucketing: one segment per row (1 where its data
            is). Attention that honours it masks with
            ``segment_ids[..., :, None] == segment_ids[..., None, :]`` (and
            ``segment_ids > 0``).
        positions: int32 array, the shape of ``segment_ids``: ``0, 1, ...`` within each
            example, 0 at padding.

    A batch made with the first five fields (as ``Batch(data, mask, lengths, bucket,
    rows)``) gets the one-segment ``segment_ids`` and ``positions`` of its ``lengths``.
    Its printed form leaves out ``segment_ids`` and ``positions`` while they are the ones
    its ``lengths`` give (one segment per row: nothing the mask does not show).
    """

    data: Any
    mask: Any
    lengths: np.ndarray
    bucket: int
    rows: int | None = None
    segment_ids: np.ndarray | None = None
    positions: np.ndarray | None = None

    def __repr__(self) -> str:
        shown = [f"data={self.data!r}", f"mask={self.mask!r}", f"lengths={self.lengths!r}",
                 f"bucket={self.bucket!r}", f"rows={self.rows!r}"]
        if not _is_one_segment(self):
            shown += [f"segment_ids={self.segment_ids!r}", f"positions={self.positions!r}"]
        return f"Batch({', '.join(shown)})"


def one_segment(lengths: Any, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """``(segment_ids, positions)`` of rows holding one example each, of ``lengths``, padded
    to ``bucket``: 1 and ``0 .. length - 1`` where the data is, 0 in the padding."""
    lengths = np.asarray(lengths)
    where = np.arange(int(bucket), dtype=np.int32)
    inside = where < lengths[..., None]
    return inside.astype(np.int32), np.where(inside, where, 0).astype(np.int32)


def _is_one_segment(batch: Batch) -> bool:
    """True when the batch's segments are the one-per-row ones its lengths give."""
    try:
        ids, pos = one_segment(batch.lengths, batch.bucket)
        return bool(np.array_equal(np.asarray(batch.segment_ids), ids)
                    and np.array_equal(np.asarray(batch.positions), pos))
    except Exception:  # noqa: BLE001 - a batch made by hand with fields of other kinds
        return False


_make_tuple = Batch.__new__


def _new(cls: type, data: Any, mask: Any, lengths: Any, bucket: int, rows: int | None = None,
         segment_ids: Any = None, positions: Any = None) -> Batch:
    """A :class:`Batch`; without ``segment_ids`` and ``positions``, the one-segment ones (where
    ``lengths`` and ``bucket`` are a batch's: ``jax.tree_util.tree_map`` may fill a Batch with
    other things)."""
    if (segment_ids is None or positions is None) and lengths is not None and is_int(bucket):
        ids, pos = one_segment(lengths, bucket)
        segment_ids = ids if segment_ids is None else segment_ids
        positions = pos if positions is None else positions
    return _make_tuple(cls, data, mask, lengths, bucket, rows, segment_ids, positions)


# typing.NamedTuple refuses a __new__ in the class body; set after it, every way a Batch is made
# (by hand, by the loaders, by pickle and copy, by jax.tree_util's unflatten) goes through it
_new.__qualname__ = "Batch.__new__"
Batch.__new__ = _new  # type: ignore[method-assign, assignment]
