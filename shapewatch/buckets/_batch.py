"""The :class:`Batch` that both loaders yield: padded data, mask, valid lengths, bucket.

:func:`~shapewatch.buckets.bucketed` and :func:`~shapewatch.buckets.group_by_length`
both yield :class:`Batch` tuples.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Batch"]


class Batch(NamedTuple):
    """One padded batch.

    Attributes:
        data: the padded batch (same structure as the input: array, dict, tuple, ...).
        mask: bool array, True at valid positions: shape ``(rows, bucket)`` for
            ``group_by_length`` and ``padded.shape[:axis + 1]`` for ``bucketed``;
            None with ``return_mask=False``.
        lengths: int64 array of valid lengths, ``mask.shape[:-1]``; 0 for padded rows.
        bucket: the padded length of the variable axis.
        rows: the number of real rows (the first ``rows`` rows; the others are padding
            added by ``remainder="pad"``), or None where the batch has no row axis.
            0 for a batch of padding only: in a job of several processes, a process whose
            shard ran out yields these (mask all False, lengths 0) so that every process
            takes the same number of steps. A loss should weigh by the mask and guard the
            division (``sum(loss * mask) / maximum(sum(mask), 1)``, with the sums taken
            over the global batch), so such a batch adds nothing to the gradient.
    """

    data: Any
    mask: Any
    lengths: np.ndarray
    bucket: int
    rows: int | None = None
