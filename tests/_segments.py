"""Reading a batch with segments back into its examples (the multi-process workers share it)."""

from __future__ import annotations

import numpy as np


def read_segments(batch, examples, span):
    """The example ids of a batch with ``segment_ids`` (example ``i`` holds ``i * span + arange``),
    each read through its segment; how many are not whole or have positions wrong (padding must
    end each row); whether the batch is padding only."""
    ids, bad = [], 0
    tokens, seg, pos = np.asarray(batch.data), np.asarray(batch.segment_ids), np.asarray(batch.positions)
    for r in range(seg.shape[0]):
        for k in range(1, int(seg[r].max(initial=0)) + 1):
            where = seg[r] == k
            got = tokens[r][where]
            i = int(got[0]) // span
            ids.append(i)
            bad += int(not np.array_equal(got, examples[i]) or not np.array_equal(pos[r][where], np.arange(len(got))))
        used = int((seg[r] > 0).sum())
        bad += int(bool((seg[r][used:] != 0).any()) or bool((tokens[r][used:] != 0).any()))  # padding ends a row
    return ids, bad, not (seg > 0).any()
