"""``ChooseByLength``: the iterator of ``group_by_length(..., strategy="auto")`` (private).

It is the online bucketing loader (:class:`GroupByLength` with ``max_buckets="auto"``) that
owns a :class:`StrategyChooser`: at each ``next()``, after the planner has charged the last
batch, the chooser says whether the next batches are bucketed or packed, and on a switch the
loader moves every example it holds (queued or in a ready batch) to the other strategy's
holding, in one assignment. Either way every batch is built as rows of examples
(:func:`build_packed`): a bucketed batch is a packed one with one example per row, so every
batch carries ``segment_ids`` and ``positions``, and the planner measures both strategies'
batches alike (a shape is its length: the same step model, the same compiled shapes; packing's
row length is bucketing's first bucket, so the first batches measure both).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from .._checks import fail
from .._distributed.group_by_length_lockstep import GroupByLengthLockstep
from .._distributed.schedulers import Taking, last
from .._online.choose import StrategyChooser
from .._plan.buckets import Buckets
from .._plan.explain import explain
from .batch import Batch
from .choose_state import load_auto_state, save_auto_state
from .group_by_length import GroupByLength
from .group_by_length_examples import Item
from .loader_checks import check_types
from .pack import build_packed, packed, row_of

__all__ = ["ChooseByLength", "choose_by_length"]


def choose_by_length(examples: Iterable[Any], *, row_length: Any, buckets: Any, max_buckets: Any,
                     compile_seconds: Any, steps: Any, step_seconds: Any, **options: Any) -> ChooseByLength:
    """``group_by_length(..., strategy="auto")``: the options' types checked, those it would ignore
    refused by name, then the loader."""
    numbers = {"compile_seconds": compile_seconds, "steps": steps, "step_seconds": step_seconds}
    check_types(buckets=buckets, max_buckets=max_buckets, multiple_of=options["multiple_of"], numbers=numbers,
                clock=options["clock"], prior=options["prior"], flags={})
    planned = isinstance(max_buckets, str) and max_buckets == "auto"  # its default: the online planner
    ignored = {"row_length": row_length, "buckets": buckets, "max_buckets": None if planned else max_buckets,
               **numbers}
    given = [f"{name}={value!r}" for name, value in ignored.items() if value is not None]
    if given:
        one = len(given) == 1
        raise fail(f"group_by_length(strategy='auto') chooses the row length and the buckets from measured "
                   f"costs: {', '.join(given)} would be ignored; fix: leave {'it' if one else 'them'} out, or "
                   "pass strategy='pack' (row_length=) or strategy='bucket' (buckets=, max_buckets=, "
                   "compile_seconds=, steps=, step_seconds=)")
    return ChooseByLength(examples, **options)


class ChooseByLength(GroupByLength):
    """The iterator returned by ``group_by_length(..., strategy="auto")``: packs or buckets,
    whichever the measured step and compile costs say is cheaper (see ``_online.choose``).

    As the other loaders: an error (from the source, or a bad example) propagates once and
    loses nothing already read, and an interrupt anywhere in ``next()`` loses nothing either:
    every example read stays in the loader until the line that returns its batch, and a switch
    moves them all in one assignment. ``state_dict()`` is its own (``"shapewatch.auto-state/3"``).

    Attributes:
        strategy: ``"bucket"`` or ``"pack"``: what the next batches do.
        plan: bucketing's :class:`Buckets`, or packing's row length as a one-boundary one.
        decisions: the planner's and the chooser's decisions, in order (a :class:`Choice` is
            the chooser's: ``choose``, ``switch`` or ``wait``, with both strategies' seconds).
        dropped, truncated, max_buffered, shapes, batches: as :class:`GroupByLength`'s.
    """

    def __init__(self, examples: Iterable[Any], *, batch_size: int | None, token_budget: int | None,
                 length_of: Callable[[Any], Any], shuffle: bool, seed: int, buffer_size: int,
                 remainder: str, pad_value: Any, multiple_of: int, max_shapes: int | None,
                 compile_records: Callable[[], Any] | None, clock: Callable[[], float] | None,
                 prior: Any, across_processes: bool) -> None:
        super().__init__(
            examples, batch_size=batch_size, token_budget=token_budget, buckets=None, max_buckets="auto",
            length_of=length_of, shuffle=shuffle, seed=seed, buffer_size=buffer_size, remainder=remainder,
            pad_value=pad_value, multiple_of=multiple_of, max_shapes=max_shapes,
            compile_records=compile_records, clock=clock, prior=prior, across_processes=across_processes,
            compile_seconds=None, steps=None, step_seconds=None)
        assert self._online is not None
        self._open: dict[int, list[Item]] = {}  # packing: row length -> examples, in no ready batch yet
        self._chooser = StrategyChooser(self._online, self._row_of)
        # nothing measured: the first batches pack (see _start); a saved report's costs: bucketing's plan
        self.strategy = "pack" if self._chooser.blind() else "bucket"

    # -- holding: bucketing's queues and (bucket, examples, kind) batches, or packing's pools and
    # (row length, rows, kind) batches; ``strategy`` says which, changed in the same assignment
    @property
    def _held(self) -> int:
        if self.strategy == "bucket":
            return super()._held
        return (len(self._staged) + sum(len(q) for q in self._open.values())
                + sum(len(row) for _, rows, _ in self._ready for row in rows))

    def _take(self, example: Any) -> Item:
        """Parse one example; refuse one that could not be packed (packing may come at any batch)."""
        item = super()._take(example)
        assert self._spec is not None
        fixed = [path for path, seq in zip(self._spec.paths, self._spec.seq) if not seq]
        if fixed:
            raise fail(
                f"strategy='auto' may pack: leaf {fixed[0]} of an example has no leading axis of the "
                f"example's length {item[1]}, so it cannot share a row with other examples; the example was "
                "left out and the others are kept (call next() to go on; give every leaf the length axis, "
                "or use strategy='bucket')")
        if item[1] == 0:
            raise fail(
                "an example has length 0: strategy='auto' may pack, and packed it would hold no position "
                "of a row; it was left out and the others are kept (call next() to go on, or leave empty "
                "examples out)")
        return item

    def _observe(self) -> None:
        if self.strategy == "bucket":
            super()._observe()
            return
        new = [n for _, n in self._staged[self._noted:]]
        if new:  # packing: a longer example gets longer rows (the row length doubled until they hold it)
            self._seen(new)

    def _pool_of(self, length: int) -> int:
        assert self.plan is not None
        return self._row_of(length, self.plan.max_length)

    def _row_of(self, length: int, row_length: int) -> int:
        """The row an example of ``length`` packs into with rows of ``row_length`` (doubled for a longer one)."""
        return row_of(length, row_length, "extend", self._multiple_of, doubling=True, budget=self._budget)

    def _fill(self) -> None:
        if self.plan is None and self.strategy == "pack":
            self._start()
            return
        self._read()
        self._observe()  # bucketing at its cap for a longer example packs from here (see _at_cap)
        if self.strategy == "bucket":
            self._queue_staged()
        else:
            self._pack()

    def _start(self) -> None:
        """Nothing measured yet: pack into rows of the longest length read (the planner's first
        plan, one bucket at it: the same shape, so its first batches measure the same compile and
        step, and each of them carries several examples a row where bucketing's carries one)."""
        online = self._online
        assert online is not None
        self._read()
        self._observe()
        if not online.observer.total:  # an empty input: any row length will do
            online.seen([1])
        # the planner's start (one bucket at the longest length) and the chooser's, each made once (a
        # call again after an interrupt takes them, or makes them again from where they began)
        steps, chooser = self._scheduler, self._chooser
        top = steps.once("first plan", lambda: online.plan(None), online.mark, online.rewind).max_length
        steps.once("start", lambda: chooser.start(top), chooser.mark, chooser.rewind)
        self.plan, self.strategy = Buckets((top,), multiple_of=self._multiple_of, overflow="extend"), "pack"
        steps.done("first plan", "start")
        self._pack()

    def _pack(self) -> None:
        """Pack what is staged with what is held (packing's batcher), in one move (in step, none
        held is left whose length went out: see ``_enqueue``)."""
        rng, steps = self._draws(), self._scheduler
        held, ready = packed(self._open, self._ready, self._staged, pool_of=self._pool_of,
                             rows_for=self._rows_for, done=self._done, rng=rng if self._shuffle else None)
        self._staged, self._noted, self._open, self._ready, self._rng, steps.sent = [], 0, held, ready, rng, 0

    # -- choosing
    def _choose(self) -> None:
        """Ask the chooser; on a switch, hold every example the other strategy's way (one move)."""
        if self.plan is None:  # nothing read yet
            return
        row_length = self.plan.max_length if self.strategy == "pack" else None
        chooser = self._chooser
        # weighed once (in step, once a round; a call again after an interrupt: the answer made, or
        # the weighing made again from where it began), with the decisions recorded by then
        steps = self._scheduler
        choice = steps.once(
            "choice", lambda: (*chooser.decide(self.strategy, row_length), len(chooser.planner.decisions)),
            chooser.mark, chooser.rewind)
        if choice is None:  # on one process: acted on already at this batch (``LocalScheduler.acted``)
            return
        strategy, length, made = choice
        if strategy == self.strategy:
            steps.acted("choice")
            return
        if strategy == "pack":
            assert length is not None
            self._to_pack(length)
            steps.acted("choice")
            return
        assert self._online is not None and self._chooser.bucket_plan is not None
        del self._online.decisions[made:]  # a switch an interrupt cut short after its plan was recorded
        plan = self._online.adopt(self._chooser.bucket_plan, "the plan strategy='auto' switched to")
        held = [it for _, rows, _ in self._ready[::-1] for row in rows for it in row]
        held += [it for _, pool in sorted(self._open.items()) for it in pool]
        rng = self._draws()
        queues, ready = self._queued(held, False, plan, {}, [], rng)
        self.plan, self.strategy, self._open, self._queues, self._ready, self._rng = (
            plan, "bucket", {}, queues, ready, rng)
        steps.acted("choice")

    def _to_pack(self, length: int) -> None:
        """Pack from here into rows of ``length``: every example held, the bucketing way, moves to
        packing's pools (one move)."""
        plan = Buckets((length,), multiple_of=self._multiple_of, overflow="extend")
        held = [it for _, items, _ in self._ready[::-1] for it in items]
        held += [it for _, q in sorted(self._queues.items()) for it in q]
        pools: dict[int, list[Item]] = {}
        for item in held:
            pools.setdefault(self._row_of(item[1], length), []).append(item)
        self.plan, self.strategy, self._queues, self._open, self._ready = plan, "pack", {}, pools, []

    def _at_cap(self) -> bool:
        """Bucketing cannot take a longer example (every shape ``max_shapes`` allows is used):
        pack from here, into rows of the plan's top doubled for longer examples, so that no example
        is left out (in a job of several processes, left out as bucketing does: not agreed)."""
        if self.strategy != "bucket" or self._scheduler.across or self.plan is None:
            return False
        top = self.plan.max_length
        longest = max(n for _, n in self._staged)
        self._to_pack(top)  # first: an interrupt before it leaves the loader bucketing, and nothing recorded
        self._chooser.forced_pack(top, f"bucketing has no shape left within max_shapes={self._online.max_shapes} "
                                       f"for a longer example ({longest}): packing into rows of {top}, doubled for "
                                       "longer examples, keeps every example")
        return True

    def _next_batch(self) -> None:
        """The next batch, built and made ``self._taking`` (StopIteration at the end); the
        bucketing loader's ``__next__`` commits it and lets go of it."""
        steps = self._scheduler  # the planner's call sequence (``_distributed.schedulers``), in step or not
        steps.request()
        if steps.across:
            self._next_in_step()
            return
        self._choose()
        if self.strategy == "bucket" and self.plan is not None and not self._chooser.probing(self.plan.boundaries):
            self._replan()
        while True:
            while not self._ready:
                if self._done and not self._held:
                    raise StopIteration
                self._fill()
            measure = True
            if self.strategy == "bucket":  # packing's batches are of one shape: nothing to cover
                # one assignment: an interrupt lands before or after a batch's move ahead of a compile
                self._ready, measure = steps.cover(self._ready)
            length, group, kind = self._ready[-1]
            rows = [[item] for item in group] if self.strategy == "bucket" else group
            units = sum(map(len, rows))
            per = self._rows_for(length)
            if kind == "end" and self._remainder == "drop" and len(rows) < per:
                # one line, no call after the count: an interrupt lands before or after both
                self.dropped += units; del self._ready[-1]  # noqa: E702
                continue
            n_rows = len(rows) if kind != "full" and self._remainder == "keep" else max(per, len(rows))
            out, truncated = steps.emit(length, self._build_rows, length, rows, n_rows, measure=measure)
            self._taking = Taking(out, length, units, measure=measure, rows=n_rows, truncated=truncated,
                                  held=last(self._ready))
            return

    # -- in step across the processes of a job (the agreement: ``_distributed.group_by_length_lockstep``)
    def _next_in_step(self) -> None:
        """The next step agreed with the other processes, built and made ``self._taking``: this
        process's batch of the step's length under the strategy in use (every process's is the
        same: chosen at a round, from the same inputs), or one of padding only."""
        steps = self._scheduler
        assert isinstance(steps, GroupByLengthLockstep)
        while not steps.schedule:
            self._round_in_step()
        length = steps.schedule[0]
        if self.strategy == "bucket":
            items, held = self._in_step_items(length)
            rows = [[item] for item in items]
        else:
            at = max((i for i, entry in enumerate(self._ready) if entry[0] == length), default=None)
            rows = [] if at is None else self._ready[at][1]
            held = None if at is None else (self._ready, slice(at, at + 1))
        if not rows:
            steps.check_padding(self._spec is not None, "group_by_length(strategy='auto')", "example", "examples")
        n_rows = max(self._rows_for(length), len(rows))
        out, truncated = steps.emit(length, self._build_rows, length, rows, n_rows)
        self._taking = Taking(out, length, sum(map(len, rows)), rows=n_rows, truncated=truncated, held=held)

    def _round_in_step(self) -> None:
        """Read this shard's next buffer; agree every process's lengths and process 0's costs; the
        strategy (and bucketing's plan) chosen from them, the same on every process; hold what
        was read under it; then agree the steps on the batches each process holds (packing's: its
        full batches, and at the end its partial ones, by rows)."""
        steps = self._scheduler
        assert isinstance(steps, GroupByLengthLockstep)
        lengths, records = self._read_and_publish()
        # the first round (asked once: a call again after an interrupt finds the plan it set)
        if steps.once("first", lambda: self.plan is None):  # the planner's first plan, from every process's lengths
            plan = steps.plan(records, None, lengths)
            if self.strategy == "pack":  # nothing measured: pack into rows of the longest length read
                top = plan.max_length
                steps.once("start", lambda: self._chooser.start(top), self._chooser.mark, self._chooser.rewind)
                self.plan = Buckets((top,), multiple_of=self._multiple_of, overflow="extend")
            else:  # a saved report's costs: bucketing on the plan they give, as on one process
                self.plan = plan
        else:
            steps.agree(records)
            self._choose()
            if self.strategy == "bucket" and not self._chooser.probing(self.plan.boundaries):
                try:
                    plan = steps.replan(records, self.plan, lengths)
                except ValueError:  # at the cap, on every process: the longer examples are left out
                    top = self.plan.max_length
                    self._staged = [it for it in self._staged if it[1] <= top]
                    raise
                if plan is not None:
                    self._requeue(plan)
        if self.strategy == "bucket":
            rng = self._draws()
            self._enqueue(self._shuffled(self._staged, rng), rng)
        else:
            self._pack()
        if self._done and self._remainder == "drop":
            self._drop_short()
        full, partial = self._holding()
        # packing (or bucketing while it measures more lengths) does not re-plan: the rounds come at
        # the chooser's weighing; bucketing otherwise: at the planner's periodic re-plan, or sooner
        # while the chooser waits for a length's second step
        replanning = self.strategy == "bucket" and not self._chooser.probing(self.plan.boundaries)
        self._spec = steps.agree_steps(records, full, partial, self._done, self._done and not self._held, self._spec,
                                       until=None if replanning and not self._chooser.settling()
                                       else self._chooser.due_in())

    def _examples_in(self, entry: tuple[int, list[Any], str]) -> int:
        """Examples in a batch made ready: bucketing's one a row, packing's rows of several."""
        return len(entry[1]) if self.strategy == "bucket" else sum(map(len, entry[1]))

    def _build_rows(self, length: int, rows: list[list[Item]], n_rows: int) -> tuple[Batch, int]:
        assert self._spec is not None
        data, segment_ids, positions, lengths, truncated = build_packed(
            self._spec, rows, n_rows, length, self._pad_value)
        return Batch(data, segment_ids > 0, lengths, int(length), len(rows), segment_ids, positions), truncated

    # -- reporting and resuming
    def explain(self) -> str:
        """The strategy in use and why (both strategies' seconds to come, the measured compile and
        step model they were priced with), then the plan and every decision so far."""
        online = self._online
        assert online is not None
        if self.plan is None:
            return self._chooser.explain(self.strategy, "no plan yet: nothing read")
        plan, extended = self.plan, self.extended
        # the costs as they are now, on a copy: the plan in use is immutable
        lines = explain(replace(plan, stats=online.stats()), extended).split("\n")
        if self.strategy == "pack":  # the plan is the row length: say so, not "1 bucket"
            rows = f"; rows of extended lengths so far: {sorted(extended)}" if extended else ""
            lines[0] = lines[0].replace("1 bucket (", f"packed rows of {plan.max_length} (", 1)
            lines[1] = f"row length {plan.max_length} (overflow='extend'){rows}"
        return self._chooser.explain(self.strategy, "\n".join(lines))

    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands (picklable, ``"shapewatch.auto-state/3"``): pass it to
        :meth:`load_state_dict` of a new loader made with the same arguments over the same
        source from its start to go on with exactly the batches that were left."""
        self._take_back()
        return save_auto_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (see :meth:`state_dict`); call it before the first batch. The
        whole state is checked before anything changes (``TypeError`` for a field of the wrong
        type, ``ValueError`` for another format, version, loader or arguments)."""
        load_auto_state(self, state)
        self._taking = None
