"""``AutoPlanner``: the automatic re-planning behind ``max_buckets="auto"`` with no numbers (private).

It starts on a conservative plan (one bucket: the longest length of the first buffer,
which every later plan keeps), measures what the consumer spends on each batch
(:class:`~shapewatch.buckets._online.cost_model.CostModel`), and re-plans with the exact planner
when the saving it predicts over the remaining horizon exceeds the compiles the change
adds. It never plans more than ``max_shapes`` distinct shapes, one of them held back
for a longer example than the plan covers.

Also here: the loaders' ``report()`` (:func:`report_of`), their rows per bucket
(:func:`rows_rule`), and the plan ``propose`` starts from on a saved report (:func:`start_plan`).
"""

from __future__ import annotations

import functools
import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from .._checks import PREFIX, round_up
from .._distributed.lockstep import AgreedCosts
from .._plan.buckets import Buckets
from .._plan.length_observer import LengthObserver
from .cost_model import (
    LENGTHS_TO_FIT,
    CostModel,
    fits_through,
    model_seconds,
    modelled_step_seconds,
)
from .dp_within_cap import cheapest_within, held_variance, uneven
from .step_meter import StepMeter, _user_stacklevel

__all__ = ["AutoPlanner", "DEFAULT_MAX_SHAPES", "Decision", "Estimate", "report_of", "rows_rule", "spread_of",
           "start_plan"]

log = logging.getLogger("shapewatch")

#: The cap on distinct shapes when neither ``max_shapes`` nor a linked step's budget gives one.
DEFAULT_MAX_SHAPES = 16
#: Re-plan at least this often (in batches) while lengths keep arriving.
REPLAN_EVERY = 32
#: A change must save more than this fraction of a compile, net of its compiles (no flapping).
HYSTERESIS = 0.05
#: What a job's processes read so far under the plan in use: its boundaries, each of its buckets'
#: ``kappa`` (the last: the lengths above its top) and ``lam``; see ``AutoPlanner._held_under``.
Held = tuple[np.ndarray, np.ndarray, float]


@functools.lru_cache(maxsize=64)
def spread_of(processes: int) -> float:
    """The expected most of ``processes`` independent standard normal draws (0 for one process).

    In a job the processes step together (``_distributed.group_by_length_lockstep``): a bucket
    takes as many steps as the process with the most of its examples needs, the others padding.
    Each process's count of a bucket holding ``S`` of its ``T`` examples to come varies as a
    binomial's (standard deviation ``sqrt(S (1 - S / T))``), so the job's steps of that bucket
    exceed one process's by about this many standard deviations of the count, in batches of its
    rows (4 processes: 1.03).
    """
    if processes <= 1:
        return 0.0
    x = np.linspace(-10.0, 10.0, 4001)
    below = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    density = processes * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * below ** (processes - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))


@dataclass(frozen=True)
class Decision:
    """One decision of the online planner (``loader.decisions``)."""

    batch: int
    action: str  # start | replan | keep | extend
    boundaries: tuple[int, ...]
    new_compiles: int
    saving_s: float
    compile_s: float | None
    remaining: float
    reason: str
    measured: str = ""  # what the step costs it used were measured by (a blind start says so)

    def __str__(self) -> str:
        tail = f" (steps: {self.measured})" if self.measured else ""
        return f"batch {self.batch}: {self.action} {list(self.boundaries)}: {self.reason}{tail}"


@dataclass(frozen=True)
class Estimate:
    """What :meth:`AutoPlanner.estimate` found: the best bucket plan and its seconds."""

    boundaries: tuple[int, ...]
    seconds: float  # its steps over the remaining horizon, plus its new compiles
    new_compiles: int
    compile_s: float
    remaining: float  # units (examples) still to come
    step_model: tuple[float, float, float]  # (a, beta, gamma): a batch at length L costs a + beta*L + gamma*L^2


class ChargeMark(NamedTuple):
    """What :meth:`AutoPlanner.request` changes, as a charge began (its planner's fields, its
    costs' :meth:`~CostModel.mark`, its meter's :meth:`~StepMeter.mark`), and when an interrupt
    cut the charge short (None: not cut)."""

    pending: tuple[int, bool, float, bool, float | None] | None
    dirty: bool
    idle: bool
    waited: tuple[int, bool] | None
    costs: dict[str, Any]
    meter: tuple[Any, ...]
    cut_at: float | None = None


class ShapesUsedUp(ValueError):
    """A longer example than the plan holds, with every shape ``max_shapes`` allows used."""


class AutoPlanner:
    """Plans, measures and re-plans for one loader (see the module docstring)."""

    #: Fields a saved state may hold as None whatever this planner holds: the source's length
    #: (None: a stream) and the batch or wait in flight at the save.
    MAY_BE_NONE = frozenset({"horizon", "_pending", "_waited"})
    #: Attributes a saved state does not hold: the costs and the meter (saved apart, and not at all),
    #: a charge an interrupt cut short (the state holds what it changed as it began).
    #: The processes of a job, too (each round's :meth:`agree` sets them anew), and ``held_over``
    #: (the loader's, given at construction).
    UNSAVED = frozenset({"costs", "meter", "_charge_from", "processes", "held_over"})

    def __init__(self, *, name: str, multiple_of: int, rows_for: Callable[[int], int],
                 max_shapes: int, horizon: int | None, unit_size: int,
                 clock: Callable[[], float] | None, records: Callable[[], Any] | None,
                 prior: tuple[LengthObserver, dict[str, Any]] | None,
                 sizing: dict[str, Any] | None = None, held_over: bool = True) -> None:
        self.name = name
        self.sizing = sizing or {}  # batch_size / token_budget, for the report
        self.multiple_of = multiple_of
        self.rows_for = rows_for
        self.max_shapes = max_shapes
        self.horizon = horizon  # units (examples or batches) in all, None for a stream
        self.processes = 1  # in a job: its processes, stepping together (set by each round's agree)
        # in a job, what a process read beyond the others is held over to the end (group_by_length's
        # lockstep); False: each round's batches are matched whole (bucketed's): see _held_under
        self.held_over = held_over
        self.unit_size = unit_size  # a buffer's worth of units: the least a stream is assumed to go on
        self.clock = clock if clock is not None else time.perf_counter
        self.timed_by_events = clock is None  # a given clock times compiles too (its own units)
        self.costs = CostModel(records)
        self.meter = StepMeter(name, self.clock)  # sees the step through asynchronous dispatch
        self.meter.records = records is not None
        self.observer = LengthObserver()
        self.prior_observer: LengthObserver | None = None
        self.prior_unmeasured: str | None = None  # why the prior's own run could not measure
        if prior is not None:
            self.prior_observer = prior[0]
            self.costs.prior_compile = prior[1].get("compile_seconds")
            model = prior[1].get("step_model")
            self.costs.prior_step = None if model is None else tuple(float(v) for v in model)
            self.prior_unmeasured = prior[1].get("unmeasured")
            if self.prior_unmeasured is not None:
                warnings.warn(
                    f"[shapewatch] {name}: prior= is a report whose steps were not measured "
                    f"({self.prior_unmeasured}); its costs are a blind estimate: save the report of "
                    "a run whose loop waits on each step (or reads batches on the loop's thread)",
                    stacklevel=_user_stacklevel())
        self.decisions: list[Decision] = []
        self.compiled: set[int] = set()  # buckets yielded so far (one shape each)
        self.reserve_used = False
        self.used = 0  # units yielded
        self.batches = 0
        # (bucket, new?, yield time, measured?, this thread's compile seconds at the yield)
        self._pending: tuple[int, bool, float, bool, float | None] | None = None
        self._dirty = False
        self._since = 0
        self.idle = False  # the last request waited for the device (a measured step)
        self._cover = 0.0  # seconds of steps still to go before a new shape's compile
        self.covers = 0  # batches moved ahead of a new shape's compile
        self._waited: tuple[int, bool] | None = None  # the wait made by wait_before, for yielded
        self._charge_from: ChargeMark | None = None  # a charge begun and not finished (request)

    # -- measuring
    def request(self) -> None:
        """The consumer asks for the next batch: charge the time since the last yield.

        A measured batch (see ``_online.step_meter``) is charged after waiting for the device, so
        that its time is its step's however the loop waits; another is charged only where
        the time between batches is the step (no JAX arrays, or the wait could not be made).
        The meter's warning (once) is given here, before the loader takes a batch, so that a
        warning made an error loses nothing.

        Charged once: an interrupt inside (a Ctrl-C while it waits for the device) leaves the charge
        to the next request, made again from where it began (:meth:`_charge_mark`), the time
        from the interrupt to that request (the user's pause) left out of the step; the meter's
        warnings come before and after it, never inside.
        """
        try:
            self.meter.announce()  # a failure found when the last batch was yielded
            cut = self._charge_from
            if cut is not None:
                self._charge_rewind(cut)
            else:
                self._charge_from = self._charge_mark()
            self._charge()
            self._charge_from = None  # made: in the try, so that an interrupt before it leaves out its pause too
        except BaseException:
            cut = self._charge_from
            if cut is None:  # cut before its mark was kept: nothing changed
                cut = self._charge_mark()
            if cut.cut_at is None:  # the next request leaves out the pause from here
                self._charge_from = cut._replace(cut_at=self.clock())  # (a pause not yet left out: from then)
            raise
        self.meter.announce()  # a failure found just now (this batch is charged already)

    def _charge_mark(self) -> ChargeMark:
        """What :meth:`_charge` changes, as it began."""
        return ChargeMark(self._pending, self._dirty, self.idle, self._waited, self.costs.mark(), self.meter.mark())

    def _charge_rewind(self, mark: ChargeMark) -> None:
        """Back to ``mark`` (:meth:`_charge_mark`), the batch's clock moved on by the pause since the
        interrupt, first: the mark keeps the moved clock (an interrupt after leaves out its own pause)."""
        if mark.pending is not None and mark.cut_at is not None:
            bucket, new, t0, measured, compile_mark = mark.pending
            pending = (bucket, new, t0 + max(self.clock() - mark.cut_at, 0.0), measured, compile_mark)
            mark = mark._replace(pending=pending, cut_at=None)
            self._charge_from = mark
        self.costs.rewind(mark.costs)
        self.meter.rewind(mark.meter)
        self._pending, self._dirty, self.idle, self._waited, self._charge_from = (
            mark.pending, mark.dirty, mark.idle, mark.waited, mark)

    def charge_cut(self) -> ChargeMark | None:
        """The mark of a charge an interrupt cut short (:meth:`request`), else None: a state saved
        then holds the costs as the charge found them."""
        return self._charge_from

    def charged(self) -> None:
        """Drop a charge an interrupt cut short (a state was loaded: it holds what was charged)."""
        self._charge_from = None

    def _charge(self) -> None:
        """:meth:`request`'s work, once the charge is marked."""
        self.idle, self._waited = False, None
        if self.meter.unmeasured is not None and self.costs.by_events:
            self.costs.forget_event_compiles()  # read on the wrong thread: ~0 s, not a compile
            self._dirty, self._pending = True, None  # the batch in flight: the queue's time too
        if self._pending is None:
            return
        bucket, new, t0, measured, mark = self._pending
        self._pending = None
        if new and mark is not None:  # not waited for: JAX's events timed its compile
            self.costs.observe_compile(bucket, bucket, self.meter.compiled_since(mark))
            self._dirty = True
            return
        if measured:
            self.idle = self.meter.sync()
        elif self.meter.jax_seen and self.meter.unmeasured is None:
            return  # its time is the dispatch's, not the step's
        seconds = self.clock() - t0
        if mark is not None:  # the step compiled again (a weak type, a new static value...)
            compiled = self.meter.compiled_since(mark, count=False)
            # a window with a compile in it is not a step: JAX's events time the compile's
            # stages, not all of its host work (more of it on older jax), so the next batch of
            # this shape is measured instead; only a step that compiles on every call is
            # charged what is left once the events' seconds are taken off
            if compiled > 0.0 and self.meter.again(bucket):
                return
            seconds -= compiled
        self.costs.observe(bucket, bucket, max(seconds, 0.0), new)
        self.meter.resumed = False  # a step measured here: the meter's own words from now on
        self._dirty = self._dirty or new or len(self.costs.steps.get(bucket, ())) == 1

    def covers_compile(self, bucket: int) -> bool:
        """Whether a ready batch of a compiled shape should go out, not measured, before this
        batch of ``bucket``: ``bucket`` is new and the device is idle (a measured step was
        just waited for), so its compile would run with nothing on the device, where a fixed
        plan's new shape compiles while the device runs the steps dispatched before it. Batches
        of compiled shapes go first until their modelled steps add up to a compile (they
        hold examples of those shapes: they go out anyway). Only where JAX's events time
        compiles, and where the device runs beside the host (not JAX on the CPU with one core
        for the process: there the steps would only slow the compile; see
        ``StepMeter.beside``); the loader calls :meth:`covered` for each batch it moves."""
        if bucket in self.compiled or not self.timed_by_events or not self.meter.beside():
            self._cover = 0.0
            return False
        if self.idle:
            self._cover = self.costs.compile_seconds() or 0.0
        return self._cover > 0

    def covered(self, bucket: int | None) -> None:
        """A batch of ``bucket`` went before a new shape's compile (None: none was ready)."""
        self.covers += bucket is not None
        steps = None if bucket is None else self.costs.step_seconds(np.array([bucket]))
        self._cover = 0.0 if steps is None else self._cover - float(steps[0])

    def _measures(self, bucket: int, measure: bool) -> tuple[bool, bool]:
        """(new, measured) for the next batch of ``bucket`` (changes nothing)."""
        # a shape whose first batch was never charged (a loader restored from a state saved with
        # that batch in flight) is charged as a first: it has no step without one
        new = bucket not in self.compiled or bucket not in self.costs.first
        if self.blind():
            return new, False  # nothing timed plans: no wait for the device
        return new, (measure and self.meter.wants(bucket, count=False)) or new

    def blind(self) -> bool:
        """Whether the steps run where this loader cannot time them (behind a queue)."""
        return self.meter.unmeasured is not None and self.meter.jax_seen

    def wait_before(self, bucket: int, measure: bool = True) -> None:
        """Make the wait for the device that :meth:`yielded` would make, before the loader builds
        the batch: an interrupt (Ctrl-C) there leaves the loader as it was."""
        new, measured = self._measures(bucket, measure)
        if measured and not (new and self.timed_by_events and self.meter.compile_mark() is not None):
            self.meter.sync()
            self._waited = (bucket, measure)

    def yielded(self, bucket: int, units: int, measure: bool = True, before: dict[str, Any] | None = None) -> None:
        """A batch of ``bucket`` goes out; ``measure=False``: not measured (see covers_compile).
        The loaders call it before they let go of the batch: the wait for the device comes
        first and changes nothing, so an interrupt there (Ctrl-C) leaves the batch held.

        ``before``: the step's journal (``_distributed.schedulers.Taking.before``): the counts change in one
        line that records what they were in it (the meter's in its own), and not at all where it
        holds them already: an interrupt leaves them before or after the batch, never twice.
        """
        before = {} if before is None else before
        if "planner" in before:
            return
        # as the first call found them: called again after an interrupt, the meter may have counted
        # this batch already (``wants``), and the batch is measured as it would have been
        new, measured = before.setdefault("measures", self._measures(bucket, measure))
        # a new shape compiles on the host at dispatch: JAX's compile events time it, with no
        # wait (the compile overlaps the device's finishing earlier steps, as without shapewatch)
        mark = self.meter.compile_mark() if measured and self.timed_by_events else None
        waited = self._waited
        if waited == (bucket, measure):
            waited = None  # wait_before made the wait, before the batch was built
        elif measured and not (new and mark is not None):
            self.meter.sync()  # the device idle: the clock starts on this batch's step alone
        if measure:
            self.meter.wants(bucket, before=before)  # counted once the batch goes out
        old = (self._waited, self.compiled, self.used, self.batches, self._since, self._pending)
        counts = (waited, self.compiled | {bucket}, self.used + units, self.batches + 1, self._since + 1,
                  (bucket, new, self.clock(), measured, mark))
        # one line, no call: an interrupt lands before or after all of it
        self._waited, self.compiled, self.used, self.batches, self._since, self._pending = counts; before["planner"] = old  # noqa: E501, E702

    def unyielded(self, before: dict[str, Any]) -> None:
        """Take back what :meth:`yielded` committed to ``before`` (a batch an interrupt held back)."""
        old = before.get("planner")
        if old is not None:
            self._waited, self.compiled, self.used, self.batches, self._since, self._pending = old; del before["planner"]  # noqa: E501, E702
        self.meter.unwant(before)
        before.pop("measures", None)

    # -- in step across processes (``_distributed.schedulers.Lockstep``): the same inputs on every process
    def shared(self) -> dict[str, Any]:
        """What process 0 publishes for the other processes' planners: its measured costs and
        whether it would re-plan."""
        return {"costs": {**self.costs.measured(), "how": self.measured()}, "dirty": bool(self._dirty)}

    def agree(self, lengths: list[int], lead: dict[str, Any] | None, horizon: float | None,
              used: float, before: dict[str, Any] | None = None, processes: int = 1) -> None:
        """Take a round's inputs, the same on every process: every process's new ``lengths``,
        process 0's :meth:`shared` (``lead``), the job's horizon and progress per process, and
        its ``processes`` (each bucket's steps priced as the job takes them: :func:`spread_of`).
        ``before``: the round's journal (``_distributed.schedulers.Lockstep``): the lengths are observed once
        (in one line that notes it there), so a call again after an interrupt changes nothing."""
        before = {} if before is None else before
        if "agree" in before:
            return
        observer = self.observer
        if lengths:
            observer = observer.copy()
            observer.update(lengths)
        if lead is not None:
            self.costs.agree(lead["costs"])
            self._dirty = lead["dirty"]
        self.horizon, self.processes = horizon, processes
        self.used = used  # a mean over processes: may be a float
        self.observer = observer; before["agree"] = True  # noqa: E702

    def steps_to_replan(self, period: int = REPLAN_EVERY) -> int:
        """Batches until the periodic re-plan is due, ``period`` batches after the last (at least 1)."""
        return max(1, period - self._since)

    def mark(self) -> tuple[bool, int, bool, int]:
        """What :meth:`plan` changes besides the plan it returns (whether a re-plan is due, batches
        since the last, whether the reserve shape is used, decisions made), for :meth:`rewind`."""
        return self._dirty, self._since, self.reserve_used, len(self.decisions)

    def rewind(self, mark: tuple[bool, int, bool, int]) -> None:
        """Back to ``mark`` (:meth:`mark`): a :meth:`plan` an interrupt cut short is made again from
        where it began (called again, it changes nothing more)."""
        self._dirty, self._since, self.reserve_used = mark[:3]; del self.decisions[mark[3]:]  # noqa: E702

    def changes(self) -> int:
        """How many of :attr:`decisions` changed the plan or (``strategy="auto"``) the strategy."""
        return sum(d.action in ("start", "replan", "extend", "switch") for d in self.decisions)

    def periodic(self) -> bool:
        """Whether :meth:`plan` (not forced) would re-plan now only because the periodic re-plan is
        due: no measurement or longer example asks for one."""
        return self._since >= REPLAN_EVERY and not self._dirty

    def seen(self, lengths: list[int]) -> None:
        if lengths:
            self.observer.update(lengths)

    def forget(self, lengths: list[int]) -> None:
        """Take back lengths of examples left out (at the cap), so that later plans do not
        try to cover them again (and raise again for an example that is gone)."""
        self.observer = self.forgotten(lengths)

    def forgotten(self, lengths: list[int]) -> LengthObserver:
        """The observer with ``lengths`` taken back (:meth:`forget`'s, not yet assigned)."""
        obs = self.observer
        if not lengths:
            return obs
        gone = LengthObserver(lengths)
        counts = obs.counts.copy()
        at = np.searchsorted(obs.lengths, gone.lengths)
        counts[at] -= gone.counts
        return LengthObserver.from_dict({"lengths": obs.lengths.tolist(), "counts": np.maximum(counts, 0).tolist()})

    # -- planning
    def remaining(self) -> float:
        """Units still to come: ``len()`` of the input, else (a stream) as many as seen so far."""
        seen = self.observer.total
        if self.horizon is not None:
            return float(max(self.horizon - self.used, 0))
        return float(max(seen + max(seen, self.unit_size) - self.used, 0))

    def _distribution(self) -> tuple[np.ndarray, np.ndarray]:
        obs = self.observer.copy()
        if self.prior_observer is not None:
            obs.merge(self.prior_observer)
        values = round_up(np.maximum(obs.lengths, 1), self.multiple_of)
        counts = obs.counts.astype(float)
        uniq, inv = np.unique(values, return_inverse=True)
        summed = np.zeros(uniq.size)
        np.add.at(summed, inv.reshape(-1), counts)
        return uniq.astype(np.int64), summed / summed.sum()

    def _cost(self, bounds: np.ndarray, values: np.ndarray, weights: np.ndarray,
              per_unit: np.ndarray, compile_s: float, held: Held | None = None) -> tuple[float, int]:
        """(seconds over the remaining horizon, new compiles) of padding to ``bounds`` (the lengths
        of no weight left out: a compiled shape among ``values`` may lie above the plan's top);
        ``held``: what a job's processes read so far under the plan in use (:meth:`_held_under`)."""
        some = weights > 0
        idx = np.searchsorted(bounds, values[some], side="left")
        pos = np.searchsorted(values, bounds, side="left")
        per = per_unit[np.minimum(pos, values.size - 1)]
        steps = float(np.dot(per[idx], weights[some]))
        used_idx = np.unique(idx)
        if self.horizon is not None:  # each bucket's last batch is partial: half a batch on average
            rows = np.array([self.rows_for(int(b)) for b in bounds[used_idx]], float)
            steps += 0.5 * float(np.dot(per[used_idx], rows))
            spread = self._spread()
            if spread:  # a job: each bucket's steps are its fullest process's (spread_of)
                count = np.bincount(idx, weights=weights[some], minlength=bounds.size)[used_idx]
                var = 0.0 if held is None else held_variance(_masses(held, idx, values[some], weights[some],
                                                                     bounds.size)[used_idx], held[1], held[2])
                steps += float(np.sum(uneven(spread, per[used_idx], count, float(weights[some].sum()), var)))
        used = set(bounds[used_idx].tolist())
        new = len(used - self.compiled)
        return steps + new * compile_s, new

    def _plan_cost(self, bounds: np.ndarray, values: np.ndarray, weights: np.ndarray, per_unit: np.ndarray,
                   per_unit_of: Callable[[np.ndarray], np.ndarray], compile_s: float,
                   held: Held | None = None) -> tuple[float, int]:
        """:meth:`_cost` with each boundary priced at its own length (``per_unit_of``), also one that
        is none of ``values`` (a headroom top, packing's row), as :meth:`_best` prices its plans."""
        return self._cost(bounds, *_weightless(values, weights, per_unit, bounds, per_unit_of), compile_s, held)

    def _held_under(self, current: Buckets | None, values: np.ndarray, probs: np.ndarray) -> Held | None:
        """In a job, what its processes read so far, held under ``current`` (the plan in use): its
        boundaries and each bucket's ``kappa`` (the last: the lengths above its top), for pricing
        a re-plan; None in one process, before any step, with no plan in use, or where the job
        carries nothing over from round to round (``held_over`` False: ``bucketed``'s lockstep
        matches each round's batches whole).

        ``group_by_length``'s lockstep takes only the full batches every process holds, so what a
        process read beyond the others stays held until the end, where the job takes each
        bucket's fullest process's steps. Each process's counts of the plan in use's buckets over
        the ``u`` examples it read are a multinomial's (shares ``p_B``), and a plan's group
        holding weight ``M_B`` of bucket ``B``'s (of ``R`` to come, ``p_B R`` of them ``B``'s)
        holds ``M_B / (p_B R)`` of ``B``'s count: its variance is ``sum_B kappa_B M_B^2 - lam S^2``,
        ``kappa_B = u / (p_B R^2)``, ``lam = u / R^2``, ``S = sum_B M_B`` (a bucket kept:
        ``u p_B (1 - p_B)``; all of them merged: 0, each process holding what it read). Counted
        with the binomial spread of the examples to come (:func:`uneven`), a plan's steps to come
        are the job's within a fifth of a step a bucket in a simulation of the lockstep's rule (2
        and 4 processes, plans kept, split or merged at half and at 90% of the run); the examples
        to come alone counted up to 2.9 steps too few (4 buckets kept, at 90%)."""
        remaining = self.remaining()
        if (current is None or not self.held_over or not self._spread() or self.used <= 0
                or remaining <= 0):
            return None
        bounds = np.array(current.boundaries, np.int64)
        share = np.bincount(np.searchsorted(bounds, values, side="left"), weights=probs, minlength=bounds.size + 1)
        kappa = np.where(share > 0, self.used / np.where(share > 0, share, 1.0), 0.0) / remaining ** 2
        return bounds, kappa, self.used / remaining ** 2

    def plan(self, current: Buckets | None, force: bool = False) -> Buckets | None:
        """A new plan when it pays (or is forced by a longer example), else None."""
        if current is not None and not force and not (
            self._dirty or self._since >= REPLAN_EVERY
        ):
            return None
        self._dirty, self._since = False, 0
        if not self.observer.total and self.prior_observer is None:
            return None
        values, probs = self._distribution()
        top = int(values[-1])
        step_s = self._step_seconds(values)
        compile_s = self.costs.compile_seconds()
        if self._only_prior():
            compile_s = self.costs.prior_compile
        remaining = self.remaining()
        if current is None and (step_s is None or compile_s is None):
            return self._start(values, probs, remaining)
        if step_s is None or compile_s is None:
            # not measured yet: only cover a longer example, with headroom (nothing to weigh
            # its padding against, and the first batches are where the longest grows fastest)
            if current is not None and top > current.max_length:
                return self._extend(current, top, compile_s, remaining, headroom=True)
            return None
        rows = self._rows_of(values)
        per_unit = step_s / rows
        weights = probs * remaining
        cap = self.max_shapes - (0 if self.reserve_used or force else 1)
        if current is None and cap < 1:  # max_shapes=1: no shape to keep back for a longer example
            cap = self.max_shapes
        per_unit_of = lambda at: self._step_seconds(at) / self._rows_of(at)  # noqa: E731
        cap, one_more = self._one_length_more(cap)
        held = self._held_under(current, values, probs)
        best = self._best(values, weights, per_unit, compile_s, cap, top, per_unit_of, held)
        if best is None and current is None:  # nothing to come (a source of length 0): any plan will do
            return self._decide(self._buckets(np.array([top])), "start", 1, 0.0, compile_s, remaining,
                                "nothing left to come: one bucket at the longest length")
        if best is None:  # nothing left to come: the longer example's own length, no headroom
            if current is not None and top > current.max_length:
                return self._extend(current, top, compile_s, remaining, headroom=False)
            return None
        bounds, total, new = best
        if current is None:
            return self._decide(self._buckets(bounds), "start", new, 0.0, compile_s, remaining,
                                f"from measured costs{one_more}")
        cur = np.array(current.boundaries, np.int64)
        covers = top <= current.max_length
        cur_total = self._plan_cost(cur, values, weights, per_unit, per_unit_of, compile_s, held)[0] if covers else np.inf
        saving = cur_total - total
        if covers and self.costs.prior_step is not None and tuple(bounds.tolist()) != current.boundaries:
            # started from a saved report's measured costs: that plan was made for the whole
            # run and is kept (only a longer example extends it); a big saving is logged
            if saving > compile_s:
                self._decide(current, "keep", new, saving, compile_s, remaining,
                             f"{[int(b) for b in bounds]} would save {saving:.3g} s net of its {new} "
                             "compile(s); kept: the plan from the saved report holds for the run")
            return None
        if covers:
            explored = self._explore(current, bounds, values, weights, rows, compile_s, cap, top, held)
            if explored is not None:
                return explored
        if tuple(bounds.tolist()) == current.boundaries or (covers and saving <= HYSTERESIS * compile_s):
            if covers and tuple(bounds.tolist()) != current.boundaries:
                self._decide(current, "keep", new, saving, compile_s, remaining,
                             f"{[int(b) for b in bounds]} would save {saving:.3g} s net of its {new} "
                             "compile(s): not enough")
            return None
        if not covers:
            room = int(round_up(2 * current.max_length, self.multiple_of))
            why = ""
            if bounds[-1] < room and int(bounds[-1]) not in self.compiled:  # a compiled top holds it: no compile
                bounds, why = self._headroom(bounds, room, values, weights, per_unit, compile_s, remaining)
                new = len(set(bounds.tolist()) - self.compiled)
            self.reserve_used = self.reserve_used or len(self.compiled | set(bounds.tolist())) >= self.max_shapes
            return self._decide(self._buckets(bounds), "extend", new, 0.0, compile_s, remaining,
                                f"a longer example ({top}) needs a new top bucket; the best plan "
                                f"with it adds {new} compile(s) x {compile_s:.3g} s{why}{one_more}")
        return self._decide(self._buckets(bounds), "replan", new, saving, compile_s, remaining,
                            f"saves {saving:.3g} s of steps net of {new} compile(s) x {compile_s:.3g} s{one_more}")

    def _one_length_more(self, cap: int) -> tuple[int, str]:
        """``cap`` for a plan in a job whose step is measured at one length only (and no saved
        run's model gives its shape): one shape more than those compiled, no more (a longer
        example's new top is that one); with the words a decision adds. Else ``cap``, no words.

        From one length the step is modelled proportional to it, an optimistic bound for splitting
        where the step has a fixed part, and in a job it has one: every step waits for the
        collective across processes, and a job's compiles cost more (the processes share the
        cores). Proportional pricing there took three to five buckets at once where two to four
        were cheapest; one shape more measures the step at a second length, where the fitted
        model holds the fixed part and decides the rest."""
        if self.processes <= 1 or self.costs.prior_step is not None:
            return cap, ""
        if self.costs.step_points()[0].size != 1 or cap <= len(self.compiled) + 1:
            return cap, ""
        return len(self.compiled) + 1, (
            " (in a job the step measured at one length prices a split as if it had no fixed part, the "
            "collective's wait among it: one shape more until a second length is measured)")

    def _explore(self, current: Buckets, bounds: np.ndarray, values: np.ndarray, weights: np.ndarray,
                 rows: np.ndarray, compile_s: float, cap: int, top: int, held: Held | None = None) -> Buckets | None:
        """A plan that measures the step at one more length, where the measured lengths are too few
        to tell how the step grows between them and no plan would measure another; else None.

        With the step measured at fewer than :data:`LENGTHS_TO_FIT` lengths, the fitted model
        (``a + beta*L + gamma*L^2``, fewest terms on a near tie) is one guess among the models
        through the points: between two lengths far apart, a step whose L x L scores outgrow a
        cache grows like L^3 where the fit says L^2, so a boundary there saves more than it
        predicts. While the plan in use and the fitted model's best plan hold measured lengths
        only, nothing more would ever be measured: the fitted model would decide the whole run.
        So the plans that the models through the points (those of ``strategy="auto"``'s chooser:
        from one point a fixed cost, L, L^2, L^3; from two, each pair of those terms with no
        negative term) each find best are priced under every one of them, and the plan whose
        worst loss (against the best plan under that model) is least is taken when it measures a
        new length and its worst loss is less than the fitted plan's by more than
        :data:`HYSTERESIS` of a compile. Its compile buys the third length: the fitted model then
        decides on three (a compiled shape costs nothing to keep)."""
        x, y = self.costs.step_points()  # in step across processes: process 0's, agreed
        measured = {int(v) for v in x}
        stay = tuple(int(b) for b in bounds)
        if (not 0 < x.size < LENGTHS_TO_FIT or self.costs.prior_step is not None
                or not set(current.boundaries) <= measured or not set(stay) <= measured):
            return None
        fits = fits_through(x, y)
        if not fits:
            return None
        per = {name: model_seconds(model, values) / rows for name, model in fits.items()}
        per_of = {name: (lambda at, model=model: model_seconds(model, at) / self._rows_of(at))
                  for name, model in fits.items()}
        plans = {stay, tuple(current.boundaries)}
        for name in fits:
            best = self._best(values, weights, per[name], compile_s, cap, top, per_of[name], held)
            if best is not None:
                plans.add(tuple(int(b) for b in best[0]))
        cost = {plan: {name: self._plan_cost(np.array(plan, np.int64), values, weights, per[name], per_of[name],
                                             compile_s, held)[0] for name in fits} for plan in plans}
        least = {name: min(c[name] for c in cost.values()) for name in fits}
        regret = {plan: max(cost[plan][n] - least[n] for n in fits) for plan in plans}
        pick = min(plans, key=lambda p: (regret[p], len(set(p) - self.compiled), p))
        if set(pick) <= measured or regret[stay] - regret[pick] <= HYSTERESIS * compile_s:
            return None
        new = len(set(pick) - self.compiled)
        worst = max(fits, key=lambda n: cost[stay][n] - least[n])
        pts = ", ".join(f"{int(a)}: {b:.3g} s" for a, b in zip(x, y, strict=True))
        return self._decide(
            self._buckets(np.array(pick, np.int64)), "replan", new, regret[stay] - regret[pick], compile_s,
            self.remaining(),
            f"the step is measured at {x.size} length(s) ({pts}), too few to tell how it grows between "
            f"them, and {list(stay)} measures no other; over the step models through them "
            f"({', '.join(fits)}) its worst loss is {regret[stay]:.3g} s (under {worst}), {list(pick)}'s "
            f"{regret[pick]:.3g} s with {new} compile(s) x {compile_s:.3g} s, and it measures the step at more lengths")

    def estimate(self, model: tuple[float, float, float] | None = None) -> Estimate | None:
        """The bucket plan :meth:`plan` would choose now, with no current plan to keep, and what
        it costs over the remaining horizon (its steps, plus a compile per shape not compiled
        yet), deciding and recording nothing: for a caller that weighs bucketing against another
        strategy. ``model``: a step model ``(a, beta, gamma)`` to price the steps with instead of
        the measured one. None until a compile and a step were measured (or a prior gave them)."""
        if not self.observer.total and self.prior_observer is None:
            return None
        values, probs = self._distribution()
        step_s = self._step_seconds(values) if model is None else modelled_step_seconds(model, values)
        compile_s = self.costs.prior_compile if self._only_prior() else self.costs.compile_seconds()
        if step_s is None or compile_s is None:
            return None
        remaining = self.remaining()
        cap = self.max_shapes - (0 if self.reserve_used else 1)

        def per_unit_of(lengths: np.ndarray) -> np.ndarray:
            steps = self._step_seconds(lengths) if model is None else modelled_step_seconds(model, lengths)
            return np.asarray(steps) / self._rows_of(lengths)

        best = self.best_to_come(values, probs * remaining, per_unit_of, compile_s, cap)
        if model is None:
            model = self.costs.prior_step if self._only_prior() else self.costs.step_model()
        assert model is not None
        bounds, seconds, new = best
        return Estimate(tuple(int(b) for b in bounds), float(seconds), int(new), float(compile_s),
                        remaining, tuple(float(v) for v in model))

    def adopt(self, boundaries: tuple[int, ...], reason: str) -> Buckets:
        """``boundaries`` (from :meth:`estimate`) as the plan, recorded as a ``start`` decision with
        ``reason``: for a caller that chose bucketing over another strategy."""
        new = len(set(boundaries) - self.compiled)
        return self._decide(self._buckets(np.array(boundaries)), "start", new, 0.0, self.costs.compile_seconds(),
                            self.remaining(), reason)

    def _start(self, values: np.ndarray, probs: np.ndarray, remaining: float) -> Buckets:
        """The plan before any cost is known: one bucket at the longest length.

        Its first two batches measure a compile and a step; the next plan adds a boundary
        only where the measured step, modelled proportional to the length (a bound no
        worse than the truth for a step with a fixed part), saves more than its compile; in a
        job, one shape at a time until a second length is measured (:meth:`_one_length_more`).
        """
        return self._decide(self._buckets(np.array([int(values[-1])])), "start", 0, 0.0, None,
                            remaining, "no costs measured yet: one bucket at the longest length")

    def _best(self, values: np.ndarray, weights: np.ndarray, per_unit: np.ndarray, compile_s: float, cap: int,
              top: int, per_unit_of: Callable[[np.ndarray], np.ndarray] | None = None, held: Held | None = None,
              ) -> tuple[np.ndarray, float, int] | None:
        """The cheapest plan within the cap (the shapes compiled and its new ones, ``cap`` at
        most), its seconds and new compiles: an exact DP with a per-boundary cost (a compile
        unless already compiled, plus a partial last batch), whose compiled boundaries take
        nothing from the cap. With ``per_unit_of`` (lengths -> seconds a unit), the compiled shapes
        that are none of the lengths to come (packing's rows, a headroom top) are candidates too:
        those between them, and the least above the longest as the top (a plan with each top is
        solved, the cheaper kept). None with nothing left to come, or no plan within the cap.
        ``held``: what a job's processes read so far under the plan in use (:meth:`_held_under`)."""
        keep = weights > 0
        if not keep.any():  # nothing left to come
            return None
        v, w, c = values[keep], weights[keep], per_unit[keep]
        above = [b for b in self.compiled if b > v[-1]]
        options = [(v, w, c)]
        if per_unit_of is not None:  # the compiled shapes that are none of the lengths, weightless
            options = [_weightless(v, w, c, [b for b in self.compiled if v[0] < b < v[-1]], per_unit_of)]
            if above:  # the least compiled shape above the longest: a top that costs no compile
                options.append(_weightless(*options[0], [min(above)], per_unit_of))
        best = None
        for v, w, c in options:
            free = np.array([int(b) in self.compiled for b in v], bool)
            extra = np.where(free, 0.0, compile_s)
            if self.horizon is not None:
                extra += 0.5 * c * self._rows_of(v)
            at = None if held is None else (np.searchsorted(held[0], v, side="left"), held[1], held[2])
            chosen = cheapest_within(c, w, extra, free, cap - len(self.compiled), self._spread(), at)
            if chosen is None:
                continue
            bounds = v[chosen]
            bounds = bounds[np.unique(np.searchsorted(bounds, v[w > 0], side="left"))]  # those holding some
            total, new = self._cost(bounds, v, w, c, compile_s, held)
            if best is None or total < best[1] - 1e-12:
                best = (bounds, total, new)
        return best

    def _spread(self) -> float:
        """Standard deviations of a bucket's count by which its steps in a job exceed one
        process's (:func:`spread_of`; 0 in one process, and with no horizon, which only a stream in
        one process has (a job's rounds estimate one): no end to price)."""
        return spread_of(self.processes) if self.horizon is not None else 0.0

    def _rows_of(self, lengths: np.ndarray) -> np.ndarray:
        """Rows of a batch at each of ``lengths``."""
        return np.array([self.rows_for(int(b)) for b in lengths], float)

    def best_to_come(self, values: np.ndarray, weights: np.ndarray, per_unit_of: Callable[[np.ndarray], np.ndarray],
                     compile_s: float, cap: int) -> tuple[np.ndarray, float, int]:
        """:meth:`_best` for a caller that prices bucketing (``per_unit_of``: lengths -> seconds a
        unit). With nothing left to come, the top alone at 0 s. Where no plan of the lengths seen
        fits within ``cap`` (the shapes compiled use ``max_shapes`` up): the shapes compiled, when
        they hold the longest length (each length padded to the shortest that holds it, no new
        compile), else no boundaries at infinite seconds (bucketing cannot take what is to come)."""
        best = self._best(values, weights, per_unit_of(values), compile_s, cap, int(values[-1]), per_unit_of)
        if best is not None:
            return best
        if not (weights > 0).any():
            return values[-1:], 0.0, 0
        compiled = self.on_compiled(values, weights, per_unit_of)
        if compiled is None:
            return np.zeros(0, np.int64), float("inf"), 0
        used, seconds = compiled
        if self.horizon is not None:  # each bucket's last batch is partial, as _cost counts it
            seconds += 0.5 * float(np.dot(per_unit_of(used), [self.rows_for(int(b)) for b in used]))
            spread = self._spread()
            if spread:  # and in a job, its fullest process's steps (as _cost counts them)
                shapes = np.array(sorted(self.compiled), np.int64)
                at = shapes[np.searchsorted(shapes, values, side="left")]
                held = np.array([float(weights[(at == b) & (weights > 0)].sum()) for b in used])
                seconds += float(np.sum(uneven(spread, per_unit_of(used), held, float(weights[weights > 0].sum()))))
        return used, seconds, 0

    def on_compiled(self, values: np.ndarray, weights: np.ndarray,
                    per_unit_of: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, float] | None:
        """The shapes compiled as a plan (each length padded to the shortest that holds it): the
        shapes it uses and its steps' seconds; None when none holds the longest length."""
        shapes = np.array(sorted(self.compiled), np.int64)
        if not (shapes.size and shapes[-1] >= values[-1]):
            return None
        at = shapes[np.searchsorted(shapes, values, side="left")]
        return np.unique(at[weights > 0]), float(np.dot(weights, per_unit_of(at)))

    def _step_seconds(self, lengths: np.ndarray) -> np.ndarray | None:
        """Modelled seconds of one batch at each length, from the costs this planner plans on."""
        if self._only_prior():
            return modelled_step_seconds(self.costs.prior_step, lengths)
        return self.costs.step_seconds(lengths)

    def _only_prior(self) -> bool:
        """The steps run where this loader cannot see them (behind a queue): what it timed is
        the queue's, so only a saved report's costs (prior=) plan; else the plan is kept and
        only extended for a longer example (several processes plan from process 0's agreed
        costs: the same inputs everywhere)."""
        return self.blind() and not isinstance(self.costs, AgreedCosts)

    def _headroom(self, bounds: np.ndarray, room: int, values: np.ndarray, weights: np.ndarray,
                  per_unit: np.ndarray, compile_s: float, remaining: float) -> tuple[np.ndarray, str]:
        """The new top bucket for a longer example: its own length, or ``room`` (twice the old
        top) when the padding that headroom adds to the rest of the run costs less than the
        compile it may save (always ``room`` when it is the last shape ``max_shapes`` allows).
        The chance that a still longer example comes is taken as
        ``R / (n + R)`` (n units seen, R to come: that the longest of all is among those to
        come, a bound for any order-free stream); headroom's own risk is taken as none."""
        if len(self.compiled | set(bounds.tolist())) >= self.max_shapes:
            return (np.append(bounds[:-1], room),
                    f"; headroom to {room}: the last shape max_shapes={self.max_shapes} allows "
                    "(a longer example after it would be refused)")
        seen = float(self.observer.total)
        chance = remaining / (seen + remaining) if seen + remaining > 0 else 0.0
        risk = chance * compile_s
        band = values > bounds[-2] if bounds.size > 1 else np.ones(values.size, bool)
        room_step = self._step_seconds(np.array([room]))
        if room_step is None:
            return bounds, ""
        extra = float(np.dot(weights[band], room_step[0] / self.rows_for(room) - per_unit[band]))
        if extra < risk:
            return (np.append(bounds[:-1], room),
                    f"; headroom to {room}: its padding ({extra:.3g} s) costs less than "
                    f"the chance ({chance:.2f}) of one more compile for a longer example still")
        return bounds, (f"; no headroom: padding to {room} would cost {extra:.3g} s, more than "
                        f"the chance ({chance:.2f}) of one more compile for a longer example still")

    def _extend(self, current: Buckets, top: int, compile_s: float | None,
                remaining: float, headroom: bool) -> Buckets | None:
        longest = top
        if headroom:
            top = max(top, int(round_up(2 * current.max_length, self.multiple_of)))
        bounds = tuple(b for b in current.boundaries if b < top) + (top,)
        if len(self.compiled | set(bounds)) > self.max_shapes:
            raise ShapesUsedUp(
                f"{PREFIX} {self.name}: an example of length {longest} is longer than every bucket and all "
                f"max_shapes={self.max_shapes} shapes are used; raise max_shapes or cut it"
            )
        self.reserve_used = True
        return self._decide(self._buckets(np.array(bounds)), "extend", 1, 0.0, compile_s,
                            remaining, f"a longer example ({top}) needs a new top bucket")

    def _buckets(self, bounds: np.ndarray) -> Buckets:
        return Buckets(tuple(int(b) for b in bounds), strategy="auto",
                       multiple_of=self.multiple_of, overflow="extend")

    def _decide(self, plan: Buckets, action: str, new: int, saving: float,
                compile_s: float | None, remaining: float, reason: str) -> Buckets:
        d = Decision(self.batches, action, plan.boundaries, new, float(saving), compile_s,
                     remaining, reason, self.decided_on())
        self.decisions.append(d)
        log.info("[shapewatch] %s: %s", self.name, d)
        return replace(plan, stats=self.stats())  # a plan is immutable: its stats come with it

    def measured(self) -> str:
        """What the step costs used so far were measured by, in words."""
        if not any(self.costs.steps.values()):
            if self.costs.prior_step is not None:
                if self.prior_unmeasured is not None:
                    return ("a saved report's step model, not measured in its own run "
                            f"({self.prior_unmeasured}): a blind estimate")
                return "a saved report's step model"
            return "none measured yet (a blind start)"
        how = self.meter.how()
        return how if self.meter.unmeasured is not None else "measured by " + how

    def decided_on(self) -> str:
        """What measured the costs a decision is made on, in words: :meth:`measured`, or in step
        across processes process 0's words agreed at the round (the costs are process 0's, and
        every process records the same decision)."""
        agreed = self.costs.how() if isinstance(self.costs, AgreedCosts) else None
        return self.measured() if agreed is None else agreed

    def stats(self) -> dict[str, Any]:
        return {"online": {"decisions": self.decisions, "max_shapes": self.max_shapes,
                           **self.costs.to_dict(), "remaining": self.remaining(),
                           "measured": self.decided_on()}}

    def report(self, plan: Buckets | None) -> dict[str, Any]:
        """A JSON-ready record of this run, to start a later run on (``prior=``)."""
        model, compile_s = self.costs.step_model(), self.costs.compile_seconds()
        if self.blind():  # what this run timed is a queue's: only a prior's costs go on
            model, compile_s = self.costs.prior_step, self.costs.prior_compile
        return _report(self.observer, plan, self.batches, compile_seconds=compile_s,
                       step_model=None if model is None else list(model), units=self.horizon,
                       sizing=self.sizing, decisions=self.decisions,
                       measured={**self.meter.to_dict(), "how": self.measured()})


def _report(lengths: LengthObserver, plan: Buckets | None, batches: int, *,
            compile_seconds: float | None = None, step_model: list[float] | None = None,
            units: int | None = None, sizing: dict[str, Any] | None = None,
            decisions: Sequence[Decision] = (),
            measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``report()`` of a loader (``"buckets-report"``), which ``prior=`` reads back."""
    return {
        "shapewatch": "buckets-report",
        "lengths": lengths.to_dict(),
        "compile_seconds": compile_seconds,
        "step_model": step_model,
        "batches": batches,
        "units": units,
        "sizing": sizing,
        "plan": None if plan is None else plan.to_dict(),
        "decisions": [d.__dict__ | {"boundaries": list(d.boundaries)} for d in decisions],
        "measured": measured,  # how the step costs were measured (None: no costs measured)
    }


def _masses(held: Held, idx: np.ndarray, values: np.ndarray, weights: np.ndarray, groups: int) -> np.ndarray:
    """``[group, bucket]``: the weight of ``values`` in each of ``groups`` (``idx``: each value's)
    among each bucket of the plan in use (``held``'s boundaries; the last: above its top)."""
    mass = np.zeros((groups, held[1].size))
    np.add.at(mass, (idx, np.searchsorted(held[0], values, side="left")), weights)
    return mass


def _weightless(values: np.ndarray, weights: np.ndarray, per_unit: np.ndarray, lengths: Sequence[int] | np.ndarray,
                per_unit_of: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``values`` with those of ``lengths`` that are none of them, of no weight, priced by
    ``per_unit_of``, in order (with ``weights`` and ``per_unit``)."""
    extra = np.setdiff1d(np.asarray(lengths, np.int64), values)
    if not extra.size:
        return values, weights, per_unit
    order = np.argsort(np.concatenate((values, extra)), kind="stable")
    return (np.concatenate((values, extra))[order], np.concatenate((weights, np.zeros(extra.size)))[order],
            np.concatenate((per_unit, np.asarray(per_unit_of(extra), float)))[order])


def report_of(online: AutoPlanner | None, observed: LengthObserver, plan: Buckets | None,
              batches: int) -> dict[str, Any]:
    """A loader's ``report()``: the online planner's, or (a fixed or learned plan) the lengths
    read and the plan, with no costs measured."""
    return online.report(plan) if online is not None else _report(observed, plan, batches)


def rows_rule(batch_size: int | None, token_budget: int | None) -> Callable[[int], int]:
    """Rows of a batch padded to ``bucket``: ``batch_size``, or ``token_budget // bucket``
    (at least 1, at most ``batch_size`` when both are given); 1 for whole batches."""
    def rows_for(bucket: int) -> int:
        if token_budget is None:
            return batch_size or 1
        rows = max(1, token_budget // max(bucket, 1))
        return rows if batch_size is None else min(rows, batch_size)
    return rows_for


def start_plan(observer: LengthObserver, costs: dict[str, Any], multiple_of: int,
               max_shapes: int = DEFAULT_MAX_SHAPES) -> Buckets | None:
    """The plan a loader given this saved report as ``prior=`` starts on (before it reads
    anything more), or None when the report measured no step model."""
    if not costs.get("step_model") or costs.get("compile_seconds") is None:
        return None
    sizing = costs.get("sizing") or {}
    planner = AutoPlanner(
        name="propose", multiple_of=multiple_of,
        rows_for=rows_rule(sizing.get("batch_size"), sizing.get("token_budget")),
        max_shapes=max_shapes, horizon=costs.get("units") or observer.total,
        unit_size=observer.total, clock=None, records=None, prior=(observer, costs))
    return planner.plan(None)
