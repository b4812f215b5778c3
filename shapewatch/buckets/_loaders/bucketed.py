"""``bucketed`` and its iterator ``Bucketed``: pad each batch of a stream along its
variable axis to its bucket.

``bucketed`` wraps an iterable of ready batches and pads each batch's variable
axis to its bucket, learning the boundaries from the first batches unless given.
It yields :class:`~shapewatch.buckets.Batch` tuples carrying the padded data, the
validity mask, the valid lengths and the bucket used. Reading one input batch is
``_loaders.bucketed_batches``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .._checks import (
    check_callable,
    check_cells,
    check_fill,
    check_int,
    check_multiple_of,
    fail_type,
    is_array,
    is_int,
    is_jax,
)
from .._distributed.bucketed_lockstep import BucketedLockstep
from .._distributed.lockstep import join
from .._distributed.schedulers import LocalScheduler, TakesSteps, Taking, last
from .._online.auto_planner import AutoPlanner, report_of
from .._pad import pad_batch
from .._plan.buckets import Buckets
from .._plan.length_observer import LengthObserver
from .._plan.prior import load_prior
from .._plan.propose import propose
from .batch import Batch
from .bucket_state import Resumable
from .bucketed_batches import Held, read_batch
from .extended import ExtendedTally
from .loader_checks import (
    check_buckets,
    check_max_buckets,
    check_max_shapes,
    check_types,
)
from .policies import AutoPlan, FixedPlan, LearnedPlan, planning_keywords, resolve_plan
from .reading import Skipping, _Raw, counted, hold_next, parse_last, source_iter  # noqa: F401 - _Raw: states pickled before name it here

__all__ = ["Bucketed", "bucketed"]


def bucketed(
    batches: Iterable[Any],
    *,
    axis: int = 1,
    length_of: Callable[[Any], Any] | None = None,
    plan: FixedPlan | LearnedPlan | AutoPlan | None = None,
    buckets: Buckets | Iterable[int] | None = None,
    max_buckets: int | str = "auto",
    multiple_of: int = 1,
    warmup: int = 8,
    pad_value: Any = 0,
    return_mask: bool = True,
    max_shapes: int | None = None,
    compile_records: Callable[[], Any] | None = None,
    clock: Callable[[], float] | None = None,
    prior: Any = None,
    across_processes: bool = True,
) -> Bucketed:
    """Pad each batch of a stream along ``axis`` up to its bucket.

    Args:
        batches: any iterable of batches: numpy/JAX arrays, dicts, tuples, any pytree
            (every array leaf having ``axis`` must agree on its length), or a ``list``
            of ragged 1-D (or N-D, same trailing shape) sequences, stacked into
            ``(rows, bucket, ...)``.
        axis: the variable axis.
        length_of: optional ``batch -> valid lengths`` (an int or one per row, shape
            ``padded.shape[:axis]``) when batches are already padded to their own
            maximum; default: every row is valid up to the batch's size on ``axis``.
        plan: how the buckets are planned, as one object (the keywords below, kept for a release,
            say the same): :class:`FixedPlan` (``buckets=``), :class:`LearnedPlan` with an int
            (``max_buckets=``; planned from the ``warmup`` batches), :class:`AutoPlan` (the online
            planner: ``max_shapes``, ``prior``, ``compile_records``, ``clock``); None: the keywords
            (by default the online planner). Not with any of those keywords; ``LearnedPlan("auto")``
            is refused (``bucketed`` takes no costs given by hand).
        buckets: a :class:`Buckets` plan (``overflow="truncate"`` cuts longer batches,
            their lengths too, counted in ``.truncated``) or boundaries (then
            ``overflow="extend"``). None: learn them from the first ``warmup`` batches
            (held, then yielded in order) with :func:`propose` and ``overflow="extend"``.
            A bad batch, or an error from ``batches``, raises once from ``next()`` (also
            during the warm-up) and loses nothing held: call ``next()`` again to go on.
        max_buckets, multiple_of: passed to :func:`propose` when learning; ``"auto"`` (the
            default) plans online from measured costs, as :func:`group_by_length` does
            (``max_shapes``, ``compile_records``, ``clock`` as there).
        prior: a saved :meth:`report` (of either loader), a ``LengthObserver`` (or either's
            dict, or a JSON file's path): plan from its lengths too (and, online, start
            from its measured costs rather than measuring them again).
        warmup: batches observed before the boundaries are frozen.
        pad_value: fill value.
        return_mask: compute the validity mask (else ``Batch.mask`` is None).
        across_processes: in a ``jax.distributed`` job of several processes (initialised
            before the loader is made), keep every process in step: the same plan, and at
            every step the same bucket and rows on every process (batches matched by size
            within each process's next ``warmup`` batches); a process that ran out yields
            batches of padding only (``rows == 0``). ``False``: each process on its own.

    Returns:
        An iterator of :class:`Batch`; its ``plan`` is the plan in use, ``shapes`` the
        padded lengths yielded, ``overflowed`` how many batches went above the plan.

    Example:
        >>> import numpy as np
        >>> stream = (np.ones((2, n)) for n in (3, 5, 9, 4))
        >>> [b.bucket for b in bucketed(stream, buckets=(4, 8, 16))]
        [4, 8, 16, 4]
        >>> stream = (np.ones((2, n)) for n in (3, 5, 9, 4))
        >>> [b.bucket for b in bucketed(stream, plan=FixedPlan((4, 8, 16)))]
        [4, 8, 16, 4]
    """
    check_types(buckets=buckets, max_buckets=max_buckets, multiple_of=multiple_of, numbers={}, clock=clock,
                prior=prior, flags={"return_mask": return_mask, "across_processes": across_processes})
    # either spelling becomes the objects (what a mode would ignore refused), then the loader's arguments
    policy, _ = resolve_plan("bucketed", plan=plan, costs=None, multiple_of=multiple_of, takes_costs=False,
                             keywords={"buckets": buckets, "max_buckets": max_buckets, "prior": prior,
                                       "max_shapes": max_shapes, "compile_records": compile_records,
                                       "clock": clock})
    planning = planning_keywords(policy, None)
    return Bucketed(
        batches,
        axis=axis,
        length_of=length_of,
        buckets=planning["buckets"],
        max_buckets=planning["max_buckets"],
        multiple_of=multiple_of,
        warmup=warmup,
        pad_value=pad_value,
        return_mask=return_mask,
        max_shapes=planning["max_shapes"],
        compile_records=planning["compile_records"],
        clock=planning["clock"],
        prior=planning["prior"],
        across_processes=across_processes,
    )


class Bucketed(Resumable, TakesSteps):
    """The iterator returned by :func:`bucketed`.

    Attributes:
        plan: the :class:`Buckets` in use (None until the warm-up batches were seen).
        seen: batches yielded so far.
        truncated: batches cut to the largest bucket by a plan with ``overflow="truncate"``.
        shapes: ``Counter`` of padded lengths yielded -> times.
        extended: ``Counter`` of extended lengths (above the plan's largest boundary,
            ``overflow="extend"``) -> batches padded to them, under the plan in use (a new plan
            starts a new count); the plan itself records nothing.

    A bad batch (or an error from the source) raises once, also during the warm-up,
    and loses nothing held: call ``next()`` again to go on.
    """

    def __init__(
        self,
        batches: Iterable[Any],
        *,
        axis: int,
        length_of: Callable[[Any], Any] | None,
        buckets: Any,
        max_buckets: int | str,
        multiple_of: int,
        warmup: int,
        pad_value: Any,
        return_mask: bool,
        max_shapes: int | None = None,
        compile_records: Callable[[], Any] | None = None,
        clock: Callable[[], float] | None = None,
        prior: Any = None,
        across_processes: bool = True,
    ) -> None:
        if not is_int(axis):
            raise fail_type(f"axis must be an int; got {type(axis).__name__} {axis!r}")
        check_callable("length_of", length_of, optional=True)
        check_max_buckets(max_buckets, allow_auto=True)
        cap = check_max_shapes(max_shapes, compile_records)
        self._multiple_of = check_multiple_of(multiple_of)
        self._warmup = check_int("warmup", warmup, 0)
        self.plan: Buckets | None = check_buckets(buckets, self._multiple_of)
        check_cells(self.plan, None, None)  # a batch has a row at least
        self._axis = int(axis)
        self._length_of = length_of
        self._max_buckets = max_buckets
        self._online: AutoPlanner | None = None
        if max_buckets == "auto" and self.plan is None:
            self._online = AutoPlanner(
                name="bucketed", multiple_of=self._multiple_of, rows_for=lambda b: 1,
                max_shapes=cap, horizon=_len(batches), unit_size=max(self._warmup, 1),
                clock=clock, records=compile_records,
                prior=None if prior is None else load_prior(prior),
                held_over=False)  # its lockstep matches each round's batches whole: nothing held over
        self._prior = (load_prior(prior)[0] if prior is not None and self._online is None
                       and self.plan is None else None)
        self._observed = LengthObserver()  # every size read (the online planner keeps its own)
        #: the online planner's decisions (``max_buckets="auto"``), oldest first.
        self.decisions: list = [] if self._online is None else self._online.decisions
        self._pad_value = pad_value
        self._return_mask = bool(return_mask)
        self._it = source_iter(batches, "batches", "batches")
        self._held: list[Any] = []  # Held batches (the one taken last may be a _Raw), next last
        self._done = False
        self.seen = 0
        self.truncated = 0
        self.shapes: Counter = Counter()
        self._extended = ExtendedTally()  # the extended lengths padded to under the plan in use
        self._consumed = 0  # batches taken from the source (for load_state_dict)
        self._skipping = Skipping()  # what a load_state_dict read to skip it
        self._taking: Taking | None = None  # a batch built and not let go of (see __next__)
        session, self._history = join("bucketed", across_processes)
        #: the across-processes layer, chosen once: the planner's call sequence alone, or in step
        self._scheduler: LocalScheduler = LocalScheduler(self._online)
        if session is not None:
            self._scheduler = BucketedLockstep(session, self._online, size=_len(batches))
            self._template: Held | None = None  # a batch of this process, to shape batches of padding only

    @property
    def overflowed(self) -> int:
        """Batches padded to an extended length (above the largest boundary)."""
        return sum(self.extended.values())

    @property
    def extended(self) -> Counter:
        """Extended length -> batches padded to it under the plan in use (a copy; see the
        class's attributes)."""
        return self._extended.of(self.plan)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def _plan_for(self, sizes: list[int]) -> Buckets:
        """The plan from the warm-up sizes (of every process, when several are in step)."""
        if not sizes:  # empty stream: nothing to plan
            return Buckets((max(self._multiple_of, 1),), multiple_of=self._multiple_of, overflow="extend")
        online, steps = self._online, self._scheduler
        if online is not None:  # each once (a call again after an interrupt: the answer made)
            steps.once("warm-up seen", lambda: online.seen(sizes))
            plan = steps.once("first plan", lambda: online.plan(None), online.mark, online.rewind)
            assert plan is not None
            return plan
        lengths = LengthObserver(sizes)
        if self._prior is not None:
            lengths.merge(self._prior)
        return propose(lengths, int(self._max_buckets), multiple_of=self._multiple_of, overflow="extend")

    # Every batch read stays in ``_held`` until it is returned (a ``_Raw`` until it is read):
    # an exception of any kind (a KeyboardInterrupt too) at any line leaves it held, and the next
    # ``next()`` goes on; a bad batch (an ``Exception`` from reading or padding it) is left out.
    def _count_raw(self) -> None:
        """Count the batch taken last if it is still raw (see ``reading.counted``)."""
        self._consumed = counted(self._held, self._consumed)

    def _read_last(self) -> None:
        """Read (validate) the batch taken last if it is still raw; a bad one is left out (and raised)."""
        self._count_raw()
        parse_last(self._held, self._read_one)

    def _read_one(self, batch: Any) -> Held:
        """A batch from the source, read (and in a job, its padding checked)."""
        held = read_batch(batch, self._axis, self._length_of)
        if self._scheduler.across:
            self._check_pad_value(held)
        return held

    def _check_pad_value(self, held: Held) -> None:
        """Across processes: ``pad_value`` must fit every leaf of a batch when it is read. Whether
        it pads depends on the step's bucket and rows, agreed with the others later; a batch refused
        only then would be refused on this process alone, which would leave the others' steps."""
        if held.ragged:
            filled = [a for a in held.batch if a.size] or held.batch
            check_fill(self._pad_value, np.result_type(*filled), "pad_value")
            return
        from jax.tree_util import tree_leaves

        for leaf in tree_leaves(held.batch):
            if is_array(leaf):
                check_fill(self._pad_value, leaf.dtype, "pad_value")

    def _pull(self) -> bool:
        """Take the source's next batch into ``_held`` and read it; False at the end."""
        if not hold_next(self._held, self._it, self._consumed):
            self._done = True
            return False
        self._consumed += 1
        self._read_last()
        return True

    def _warm_up(self) -> None:
        """Hold the first ``warmup`` batches and plan from them; an error propagates once."""
        self._read_last()
        while len(self._held) < max(self._warmup, 1) and not self._done and self._pull():
            pass
        plan = self._plan_for([h.size for h in self._held])
        self.plan, self._held = plan, self._held[::-1]  # one move: pop() from the end yields them in order
        self._scheduler.done("warm-up seen", "first plan")

    def _next_alone(self) -> None:
        """One process: the next batch, padded and made ``self._taking`` (StopIteration at the end)."""
        steps = self._scheduler
        if self.plan is None:
            self._warm_up()
        self._read_last()
        # warm-up batches were observed when the plan was made; a batch pulled here is new to the
        # planner (asked once a batch: next() called again after an interrupt holds it, still new)
        fresh = steps.once("fresh", lambda: not self._held)
        if not self._held and not self._pull():
            raise StopIteration
        held = self._held[-1]
        if self._online is not None:
            self._replan(held, fresh)
        bucket = self._leave_out_on_error(self.plan.bucket_of, held.size)  # type: ignore[union-attr]
        out = steps.emit(bucket, self._leave_out_on_error, self._pad, held)  # the batch is still held
        self._taking = Taking(out, bucket, 1, rows=out.rows, truncated=int(held.size > out.bucket),
                              held=last(self._held), size=held.size)

    def _commit(self) -> None:
        """Commit the step of the batch built (``self._taking``) in every part that counts it,
        each once (see ``_distributed.schedulers.Taking``); ``__next__`` then lets go of the batch."""
        taking = self._taking
        assert taking is not None
        self._scheduler.take(taking)
        if taking.size is not None and self._online is None and "observed" not in taking.before:
            observed = self._observed.copy()
            observed.update(taking.size)
            old = self._observed
            self._observed = observed; taking.before["observed"] = old  # noqa: E702 - one line: once
        self._count(taking)

    def _take_back(self) -> None:
        """A batch half taken (an interrupt held it back) is taken back by every part that committed
        it: ``state_dict()`` saves the loader as it was before that step, whose batch comes next."""
        taking = self._taking
        if taking is not None:
            self._uncount(taking)
            if "observed" in taking.before:
                self._observed = taking.before["observed"]; del taking.before["observed"]  # noqa: E702
            self._scheduler.untake(taking)
            self._taking = None

    def _leave_out_on_error(self, read: Callable[..., Any], *args: Any) -> Any:
        """``read(*args)`` about the batch held last; where it raises (a bucket above a plan with
        overflow="error", a pad value its dtype cannot hold) the batch is left out, raised once."""
        try:
            return read(*args)
        except Exception:
            self._held.pop(); self._scheduler.ended()  # noqa: E702 - the batch and its decisions go together
            raise

    def _count(self, taking: Taking) -> None:
        """Count the batch of ``taking``, about to be yielded (once: in one line that records what it
        replaced in ``taking.before``; ``rows`` None: a batch with no rows)."""
        before = taking.before
        bucket, rows, history = taking.out.bucket, taking.rows, self._history
        assert self.plan is not None
        self._extended.note(self.plan, bucket, before)  # an extended length, under the plan in use
        if "count" in before:
            return
        n, cut = self.shapes[bucket], taking.truncated
        old = (self.seen, n, None if history is None else len(history), self.truncated)
        if history is None:
            self.seen += 1; self.truncated += cut; self.shapes[bucket] = n + 1; before["count"] = old  # noqa: E501, E702
        else:
            self.seen += 1; self.truncated += cut; self.shapes[bucket] = n + 1; history[old[2]:] = [(bucket,) if rows is None else (rows, bucket)]; before["count"] = old  # noqa: E501, E702

    def _uncount(self, taking: Taking) -> None:
        """Take back what :meth:`_count` committed of ``taking``."""
        old = taking.before.get("count")
        if old is not None:
            bucket = taking.out.bucket
            if old[2] is None:
                self.seen, self.truncated = old[0], old[3]; self.shapes[bucket] = old[1]; del taking.before["count"]  # noqa: E501, E702
            else:
                self.seen, self.truncated = old[0], old[3]; self.shapes[bucket] = old[1]; del self._history[old[2]:]; del taking.before["count"]  # noqa: E501, E702
            if not self.shapes[bucket]:
                del self.shapes[bucket]
        self._extended.unnote(taking.before)

    # -- in step across the processes of a job (the agreement: ``_distributed.bucketed_lockstep``)
    def _next_in_step(self) -> None:
        """The next step agreed with the other processes, made ``self._taking``: this process's
        batch matched to it, padded to the step's bucket and rows, or a batch of padding only (the
        batch leaves with the step agreed: held nowhere else)."""
        steps = self._scheduler
        assert isinstance(steps, BucketedLockstep)
        while not steps.schedule:
            self._round_in_step()
        bucket, rows, held = steps.schedule[0]
        out = steps.emit(bucket, self._pad_step, bucket, rows, held)
        self._taking = Taking(out, bucket, 0 if held is None else 1, rows=rows,
                              truncated=0 if held is None else int(held.size > out.bucket))

    def _round_in_step(self) -> None:
        """Read this shard's next ``warmup`` batches (at least one), agree the plan on every
        process's sizes, then match the batches across processes into the steps."""
        steps = self._scheduler
        assert isinstance(steps, BucketedLockstep)
        try:
            self._read_last()
            while len(self._held) < max(self._warmup, 1) and not self._done and self._pull():
                pass
        except Exception as exc:
            steps.fail(exc)
            raise
        held = self._held
        if held and self._template is None:
            self._template = held[0]
        sizes = [h.size for h in held]
        records = steps.publish(sizes, {"sizes": sizes, "rows": [_rows(h, self._axis) for h in held],
                                        "template": self._template is not None})
        if not any(r["sizes"] for r in records):
            raise StopIteration
        self._template = steps.share(records, "template", self._template, self._template_row)
        if self._online is not None:
            try:
                plan = steps.plan(records, self.plan, sizes)
            except ValueError:  # at the cap, on every process: the batches above the plan are left out
                top = self.plan.max_length  # type: ignore[union-attr]
                self._held = [h for h in self._held if h.size <= top]
                raise
            self.plan = plan or self.plan
        elif self.plan is None:
            self.plan = self._plan_for(steps.lengths(records))
        try:
            steps.match(records, self.plan, self._held)
        except ValueError:  # a plan with overflow="error", on every process alike (the same sizes):
            top = self.plan.max_length  # type: ignore[union-attr]
            keep = [h for h in self._held if h.size <= top]  # the batches above it are left out
            steps.kept(len(keep)); self._held = keep  # noqa: E702
            raise

    def _template_row(self) -> Held:
        """This process's template cut to a row, for a process that read no batch."""
        held = self._template
        assert held is not None
        if held.ragged:
            return Held(held.batch[:1], held.size, held.lengths[:1], True)
        if _rows(held, self._axis) is not None:
            from jax.tree_util import tree_map

            return Held(tree_map(lambda x: np.asarray(x)[:1], held.batch), held.size, held.lengths[:1], False)
        return held

    def _pad_step(self, bucket: int, rows: int | None, held: Held | None) -> Batch:
        """This process's batch padded to the step's bucket and rows (or padding only)."""
        padding = held is None
        if held is None:
            assert isinstance(self._scheduler, BucketedLockstep)
            self._scheduler.check_padding(self._template is not None, "bucketed", "batch", "batches")
            held = self._template
            assert held is not None
        out = self._pad(held, Buckets((bucket,), overflow="truncate"))
        data, mask, lengths = out.data, out.mask, out.lengths
        if padding:
            from jax.tree_util import tree_map

            data = tree_map(lambda x: np.full_like(np.asarray(x), self._pad_value), data)
            mask = None if mask is None else np.zeros_like(np.asarray(mask))
            lengths = np.zeros_like(lengths)
        have = out.rows
        if rows is not None and have is not None and (padding or have < rows):
            keep = 0 if padding else have
            data = _rows_to(data, keep, rows, self._pad_value)
            mask = None if mask is None else _rows_to(mask, keep, rows, False)
            lengths = _rows_to(lengths, keep, rows, 0)
        return Batch(data, mask, lengths, int(bucket), 0 if padding else out.rows)

    def report(self) -> dict[str, Any]:
        """What this run measured (sizes, compile seconds, step model, plan, decisions),
        JSON-ready: save it and pass it as ``prior=`` to start a later run on its plan."""
        return report_of(self._online, self._observed, self.plan, self.seen)

    def _replan(self, held: Held, fresh: bool) -> None:
        """The planner sees a new batch's length and plans, each once a batch (``LocalScheduler.once``:
        ``next()`` called again after an interrupt neither counts the length twice nor loses the
        plan made)."""
        online, steps, current = self._online, self._scheduler, self.plan
        assert online is not None and current is not None
        if fresh:
            steps.once("seen", lambda: online.seen([held.size]))
        try:
            plan = steps.once("replan", lambda: online.plan(current, force=held.size > current.max_length),
                              online.mark, online.rewind)
        except ValueError:  # at the cap: this batch is left out (raised once); next() goes on
            if self._held and self._held[-1] is held:
                self._held.pop(); steps.ended()  # noqa: E702 - the batch and its decisions go together
            online.forget([held.size])
            raise
        self.plan = plan or self.plan
        steps.acted("replan")

    def _pad(self, held: Held, to: Buckets | None = None) -> Batch:
        """``held`` padded to its bucket under the plan (or under ``to``: a step's one bucket agreed
        across processes); nothing counted (``_count`` counts a batch cut or extended, once)."""
        assert self.plan is not None
        plan = self.plan if to is None else to
        if held.ragged:
            return self._pad_ragged(held, plan)
        batch = held.batch
        bucket = plan.bucket_of(held.size)  # raises for overflow="error"
        if bucket > held.size:
            from jax.tree_util import tree_leaves

            for leaf in tree_leaves(batch):
                if is_array(leaf):
                    check_fill(self._pad_value, leaf.dtype, "pad_value")
        if self._return_mask:
            data, mask = plan.pad_tree(
                batch, axis=self._axis, value=self._pad_value, return_mask=True
            )
        else:
            data = plan.pad_tree(batch, axis=self._axis, value=self._pad_value)
            mask = None
        lengths = np.minimum(held.lengths, bucket)  # a truncating plan cuts them
        if self._length_of is not None and mask is not None:
            valid = np.arange(bucket) < lengths[..., None]
            mask = mask & (valid if isinstance(mask, np.ndarray) else _to_like(valid, mask))
        rows = int(lengths.shape[0]) if lengths.ndim else None
        return Batch(data, mask, lengths, int(bucket), rows)

    def _pad_ragged(self, held: Held, plan: Buckets) -> Batch:
        assert self.plan is not None
        arrs = held.batch
        bucket = int(plan.bucket_of(held.size))
        filled = [a for a in arrs if a.size] or arrs  # an empty row ([] is float64) sets no dtype
        dtype = np.result_type(*filled)
        check_fill(self._pad_value, dtype, "pad_value")
        out = np.full((len(arrs), bucket, *arrs[0].shape[1:]), self._pad_value, dtype=dtype)
        for i, a in enumerate(arrs):
            out[i, : min(a.shape[0], bucket)] = a[:bucket]
        lengths = np.minimum(held.lengths, bucket)
        mask = (np.arange(bucket) < lengths[:, None]) if self._return_mask else None
        return Batch(out, mask, lengths, bucket, len(arrs))


def _to_like(valid: np.ndarray, like: Any) -> Any:
    import jax.numpy as jnp

    return jnp.asarray(valid) if is_jax(like) else valid


def _len(batches: Any) -> int | None:
    try:
        return len(batches)
    except TypeError:
        return None


def _rows(held: Held, axis: int) -> int | None:
    """The rows of a batch held (None for a batch with no rows: ``axis`` 0, or one length)."""
    return None if axis == 0 or not held.lengths.ndim else int(held.lengths.shape[0])


def _rows_to(tree: Any, keep: int, rows: int, value: Any) -> Any:
    """Keep the first ``keep`` rows of every leaf and pad to ``rows`` with ``value``."""
    from jax.tree_util import tree_map

    cut = tree_map(lambda x: x[:keep], tree)
    if keep == 0:
        return tree_map(lambda x: np.full((rows, *x.shape[1:]), value, dtype=x.dtype), cut)
    return pad_batch(cut, rows, value)[0]
