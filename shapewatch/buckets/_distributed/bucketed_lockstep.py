"""``bucketed`` across the processes of a ``jax.distributed`` job: :class:`BucketedLockstep`, the
scheduler a ``Bucketed`` owns in a job of several processes.

Each round (see ``_distributed.lockstep``) every process reads its next ``warmup`` batches (at
least one) and publishes their sizes and rows; all derive the same plan from
everyone's sizes (online: from process 0's measured costs). The batches are then
matched across processes by size: each process's batches sorted by size, the
largest with the largest, a process with fewer batches getting batches of padding
only at the smallest ranks. A step's bucket is the largest of its batches' buckets
and its rows the most rows (padded rows have length 0 and an all-False mask); the
steps of a round go in one seeded order, the same on every process.

The loader reads and pads its own batches; this object holds the agreement (the session, the
steps agreed and not taken, each with this process's batch matched to it, and their order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .lockstep import Session
from .schedulers import Lockstep

__all__ = ["BucketedLockstep"]


class BucketedLockstep(Lockstep):
    """The steps of one ``bucketed`` loader, agreed with the other processes.

    Attributes:
        schedule: the steps agreed and not taken yet, next first: ``(bucket, rows or None, this
            process's batch or None)``, None for a batch of padding only.
    """

    def __init__(self, session: Session, planner: Any, *, size: int | None) -> None:
        super().__init__(session, planner, size=size, order=np.random.default_rng([0, 2]))

    def match(self, records: list[dict[str, Any]], plan: Any, held: list[Any]) -> None:
        """Set :attr:`schedule` to the round's steps: the batches of every process (``held``: this
        process's, as published) matched by size, in one seeded order; ``held`` is emptied (its
        batches are the schedule's) in the same line, and the round is closed."""
        steps = max(len(r["sizes"]) for r in records)
        buckets = [0] * steps
        rows: list[int | None] = [None] * steps
        mine: list[Any] = [None] * steps
        for p, rec in enumerate(records):
            order = np.argsort(rec["sizes"], kind="stable")
            first = steps - len(order)  # fewer batches: padding only at the smallest ranks
            for rank, i in enumerate(order):
                at = first + rank
                buckets[at] = max(buckets[at], int(plan.bucket_of(int(rec["sizes"][i]))))
                if rec["rows"][i] is not None:
                    rows[at] = max(rows[at] or 0, rec["rows"][i])
                if p == self.me:
                    mine[at] = held[i]
        out = list(zip(buckets, rows, mine, strict=True))
        schedule = [out[i] for i in self.permutation(steps)]
        # one line: the steps agreed, the round closed, the batches moved out of ``held`` (the
        # loader's own list: a call at the end of the line, no signal check before it)
        self.schedule, self._round, self.sent = schedule, {}, 0; held.clear()  # noqa: E702
