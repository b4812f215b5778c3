"""``group_by_length`` across the processes of a ``jax.distributed`` job: :class:`GroupByLengthLockstep`,
the scheduler a bucketing ``GroupByLength`` owns in a job of several processes.

Each round (see ``_distributed.lockstep``): every process fills its buffer (until it holds
``buffer_size`` examples or its shard ends) and publishes the lengths it read; all
derive the same plan from everyone's lengths (the online re-planner from the same
inputs: process 0's measured costs); every process queues what it read under that
plan and publishes how many full batches (and partial ones) it holds per bucket. The
schedule is then every full batch that all processes hold, in one seeded order. When
no bucket has a full batch on every process, one step pads: the bucket with the most
real rows across processes, where each process yields a full batch, its partial batch
of that bucket (padded rows), or a batch of padding only (an all-False mask). So every
process yields the same shapes, the same number of times, and each of its own examples
exactly once.

The loader reads, queues and builds its own examples; this object holds the agreement (the
session, the steps agreed and not taken, their order, the batches yielded per bucket).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._online.auto_planner import REPLAN_EVERY
from .lockstep import Session
from .schedulers import Lockstep, Taking, decode, encode

__all__ = ["GroupByLengthLockstep", "LONGEST_PERIOD"]

#: The most steps between the online planner's periodic re-plans in a job: the period doubles from
#: ``REPLAN_EVERY`` each time a periodic re-plan keeps the plan (each round waits for the slowest
#: process), and is ``REPLAN_EVERY`` again when a plan changes.
LONGEST_PERIOD = 8 * REPLAN_EVERY


class GroupByLengthLockstep(Lockstep):
    """The steps of one bucketing ``group_by_length`` loader, agreed with the other processes.

    Attributes:
        yields: bucket -> batches yielded (a bucket's first two batches measure a compile and a
            step: the online planner sees them before the steps go on).
        schedule: the buckets of the steps agreed and not taken yet, next first.
        period: the most steps between the planner's periodic re-plans: ``REPLAN_EVERY``, doubled
            (up to :data:`LONGEST_PERIOD`) after each periodic re-plan that keeps the plan, and
            ``REPLAN_EVERY`` again after a new plan. Each round ends where every process waits
            for the slowest: a settled plan needs fewer of them.
    """

    def __init__(self, session: Session, planner: Any, *, seed: int, size: int | None, shuffle: bool,
                 rows_for: Callable[[int], int]) -> None:
        super().__init__(session, planner, size=size, order=np.random.default_rng([seed, 1]))
        self.yields: dict[int, int] = {}
        self.period = REPLAN_EVERY
        self.last: int | None = None  # the bucket of the last step taken, in flight (None after a round)
        self._changes = 0  # the planner's changes of plan or strategy at the last round (see _period)
        self._shuffle = shuffle
        self._rows_for = rows_for

    def agree_steps(self, records: list[dict[str, Any]], full: dict[str, int], partial: dict[str, int],
                    done: bool, empty: bool, spec: Any, until: int | None = None) -> Any:
        """Publish what this process holds once its examples are queued: ``full`` batches ready and
        examples in ``partial`` ones per bucket (JSON keys), whether its shard is ``done`` (and ``empty``:
        done, nothing held); set
        :attr:`schedule` to the steps every process takes next (raise StopIteration when every
        process is done and holds nothing). ``records``: the round's records of :meth:`publish`.
        Returns the examples' structure: ``spec``, or (a process that read no example yet) the one
        the lowest process holding one sends, to pad its batches. ``until``: steps until the loader's
        own next periodic decision where the planner does not re-plan (``strategy="auto"`` packing,
        or bucketing while it measures more lengths: the chooser's next weighing), the same on
        every process; None: the planner's periodic re-plan (:attr:`period`)."""
        rec: dict[str, Any] = {"full": full, "partial": partial, "done": done, "empty": empty}
        holders = [p for p, r in enumerate(records) if r["spec"]]
        if spec is not None and len(holders) < len(records) and self.me == holders[0]:
            rec["structure"] = encode(spec)  # a process with an empty shard pads with it
        counts = self._exchange("steps", rec)
        if spec is None:
            sent = [r["structure"] for r in counts if r.get("structure")]
            if sent:
                spec = decode(sent[0])
        period, changes = self._period()
        steps = self._steps(counts, period, until)
        # one line: the steps, the period and the round closed together; the
        # last step's time was charged when this next() began (``request``): none is in flight
        self.schedule, self.period, self._changes, self.last, self._round = steps, period, changes, None, {}  # noqa: E702
        return spec

    def _period(self) -> tuple[int, int]:
        """(the period after this round's planning, the planner's changes of plan or strategy so
        far): ``REPLAN_EVERY`` where the plan or the strategy changed since the last round, doubled
        where this round's periodic re-plan kept the plan, else as it was."""
        if self.planner is None:
            return self.period, 0
        changes = self.planner.changes()
        if changes != self._changes:
            return REPLAN_EVERY, changes
        done = self._round
        if done.get("periodic") and "plan" in done and done["plan"] is None:
            return min(2 * self.period, LONGEST_PERIOD), changes
        return self.period, changes

    def _steps(self, records: list[dict[str, Any]], period: int, until: int | None = None) -> list[int]:
        """The steps until the next round: the same on every process."""
        if all(r["empty"] for r in records):
            raise StopIteration
        rows_for = self._rows_for
        buckets = sorted({int(b) for r in records for key in ("full", "partial") for b in r[key]})
        if all(r["done"] for r in records):  # nothing more to read anywhere: every step left, at once
            need = {b: max(r["full"].get(str(b), 0) - (-r["partial"].get(str(b), 0) // rows_for(b))
                           for r in records) for b in buckets}
        else:  # the full batches every process holds (one that holds nothing more pads any bucket)
            need = {b: min(r["full"].get(str(b), 0) for r in records if not r["empty"]) for b in buckets}
        steps = [b for b in buckets for _ in range(need[b])]
        if steps:
            if self._shuffle:
                steps = [steps[i] for i in self.permutation(len(steps))]
            if self.planner is not None:
                steps = steps[: self._window(steps, period, until)]
            return steps

        def real_rows(b: int) -> int:
            rows = rows_for(b)
            return sum(rows if r["full"].get(str(b)) else min(r["partial"].get(str(b), 0), rows)
                       for r in records)

        return [max(buckets, key=lambda b: (real_rows(b), -b))]

    def _window(self, steps: list[int], period: int, until: int | None = None) -> int:
        """How many steps before the online planner must see the measurements again: up to and
        including a bucket's second batch (its first measured a compile, its second measures a
        step: one round sees both), ending before another bucket's first batch while one's step is
        still to be measured (the planner weighs each new shape's compile before the next one's),
        and at most until the periodic re-plan, ``period`` steps after the last (``until``: the
        loader's own periodic decision instead, see :meth:`agree_steps`)."""
        seen = dict(self.yields)
        limit = self.planner.steps_to_replan(period) if until is None else max(1, until)
        opened = False  # a bucket's first batch is in this window, its second not yet
        for i, b in enumerate(steps[:limit]):
            n = seen.get(b, 0)
            if n == 1:
                return i + 1
            if n == 0:
                if opened:
                    return i
                opened = True
            seen[b] = n + 1
        return min(limit, len(steps))

    def took(self, taking: Taking) -> None:
        """The step agreed first leaves the schedule, counted in :attr:`yields` (one line, as
        ``Lockstep.took``'s)."""
        before = taking.before
        if "step" not in before:
            bucket = self.schedule[0]
            old = (bucket, self.used, self.session.steps, self.yields, self.last)
            yields = {**self.yields, bucket: self.yields.get(bucket, 0) + 1}
            self.yields, self.last = yields, bucket; del self.schedule[0]; self.used += taking.units; self.session.steps += 1; before["step"] = old  # noqa: E501, E702

    def untook(self, taking: Taking) -> None:
        old = taking.before.get("step")
        if old is not None:
            self.schedule[:0] = old[:1]; self.used, self.session.steps, self.yields, self.last = old[1:]; del taking.before["step"]  # noqa: E501, E702

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"yields": self.yields, "period": self.period, "last": self.last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.period = state.get("period", REPLAN_EVERY)  # a state saved before the period: every 32 steps
        self._changes = 0 if self.planner is None else self.planner.changes()  # the planner is loaded first
        # the batches yielded per bucket tell the rounds where the planner has measured a compile and
        # a step (a bucket's first two). A bucket whose step the planner holds measured keeps its
        # count: the rounds end where the run saved would have ended them (the same batches after
        # the resume); one whose step was not measured yet (the batch in flight at the save is not
        # timed) counts one batch (its compile was measured: its next batch measures the step and
        # ends a round, as in the run saved), or none where its one batch was the last step, in
        # flight at the save (measured anew: a compile, then a step; so too every such bucket of a
        # state saved before the last step was kept). From the agreed costs and the steps taken
        # (the planner is loaded first): the same on every process.
        measured = set()
        if self.planner is not None:
            measured = {int(v) for v in self.planner.costs.step_points()[0]}
        last = self.last = state.get("last")
        yields = {}
        for b, n in ((int(b), int(n)) for b, n in state["yields"].items()):
            if b in measured:
                yields[b] = n
            elif last is not None and n >= 1 and not (n == 1 and b == last):  # its compile measured
                yields[b] = 1
        self.yields = yields

    def v1_fields(self) -> dict[str, Any]:
        return super().v1_fields() | {"_yields": {}}
