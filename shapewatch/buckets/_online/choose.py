"""``StrategyChooser``: pack or bucket, from measured costs, for ``group_by_length(...,
strategy="auto")`` (private).

Packing puts whole examples in rows of one length R (the longest length seen, rounded up to
``multiple_of``): one shape and little padding, but every row costs a step at R. Bucketing
pads each example to its bucket: a few shapes and more padding, but a short row costs a short
step. Both are priced from what the loader's online planner (:class:`AutoPlanner`) measured
through asynchronous dispatch: its step model ``g(L) = a + beta*L + gamma*L^2``, the seconds of
one batch (``rows_for(L)`` rows) at length L, and its compile seconds, over the examples
still to come:

- bucketing: the best bucket plan under the step model (the planner's exact DP), its steps plus
  a compile for each shape not compiled yet;
- packing: as the loader packs, into rows of R and, for a longer example, R doubled until it
  holds it: per row length P, ``its tokens to come / (P x fill x rows_for(P))`` batches of
  ``g(P)`` each (half a batch more for the last, short one of a sized input), plus a compile for
  each P not compiled yet; ``fill`` is what first-fit-decreasing reaches on the lengths seen.

With nothing measured, the loader packs into rows of the longest length read (:meth:`start`):
the shape bucketing's first plan would have, so its first batches measure the same compile and
step, and each of them carries several examples where a bucketed one carries one a row.

A step measured at fewer than :data:`LENGTHS_TO_FIT` lengths cannot tell how its cost grows:
the chooser then prices bucketing under every step model that fits the points (from one point:
a fixed cost, one like L, like L^2, and like L^3, the steepest it weighs: attention whose L x L
scores outgrow a cache grows faster than L^2), each with its own best bucket plan. Packing's
steps are all at R, measured, so its price is the same under each. Where the models choose
differently, the chooser compares what packing could lose (the most bucketing saves under one of
them) with what measuring costs where packing is right (the compiles of a bucket plan that
measures the step at :data:`LENGTHS_TO_FIT` lengths, and its batches' steps beyond packing's):
when packing could lose more, it buckets with that plan (a ``wait``, recorded once) until the
step is measured at enough lengths (at most :data:`WAIT_AT_MOST` batches), then chooses on the
planner's fitted model; else it takes the strategy whose worst loss over the models is the least.

A length counts from its second measured step, at the lower of its steps (a stall on a busy host
lengthens one step, and a choice of packing made on it would never measure that length again): the
chooser puts its weighing off for that step, at most :data:`SETTLE_AT_MOST` batches a length.

A switch's compiles are in its price. The first choice takes the cheaper; a later switch must
save more than :data:`HYSTERESIS` of a compile (a whole compile within :data:`REPLAN_EVERY`
batches of the last choice). The costs are weighed again whenever the planner measures a new
length or a new compile, and every :data:`REPLAN_EVERY` batches.

The chooser changes no loader: :meth:`StrategyChooser.decide` says which strategy the next
batches take (bucketing: with :attr:`StrategyChooser.bucket_plan`), and the loader moves what it
holds (it owns the chooser).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import fail, is_int, round_up
from .._loaders.pack import first_fit_decreasing
from .auto_planner import HYSTERESIS, REPLAN_EVERY, AutoPlanner, Estimate
from .cost_model import LENGTHS_TO_FIT, STEPS_TO_SETTLE, Model, modelled_step_seconds
from .cost_model import fits_through as _fits
from .cost_model import model_seconds as _seconds

__all__ = ["CHOOSER_FORMAT", "Choice", "LENGTHS_TO_FIT", "SETTLE_AT_MOST", "StrategyChooser", "WAIT_AT_MOST"]

log = logging.getLogger("shapewatch")

#: The most batches the chooser waits on bucketing for those lengths to be measured.
WAIT_AT_MOST = 2 * REPLAN_EVERY
#: The most batches the chooser puts off weighing while a length is measured by one step only.
SETTLE_AT_MOST = REPLAN_EVERY // 4
#: Lengths first-fit-decreasing packs to estimate how full packed rows are.
FILL_SAMPLE = 4096
CHOOSER_FORMAT = "shapewatch.chooser-state/1"
STRATEGIES = ("bucket", "pack")


@dataclass(frozen=True)
class Choice:
    """One decision of ``strategy="auto"`` between packing and bucketing (in ``loader.decisions``,
    with the online planner's :class:`Decision` s, in order)."""

    batch: int
    action: str  # start | choose | switch | wait
    strategy: str  # bucket | pack: the strategy of the batches that follow
    boundaries: tuple[int, ...]  # bucketing's plan, or packing's row length
    bucket_s: float | None  # bucketing's seconds to come (steps and new compiles); None at the start, or with no plan within max_shapes
    pack_s: float | None  # packing's seconds to come (steps and new compiles); None at the start
    row_length: int  # packing's row length
    fill: float | None  # how full packed rows are estimated to be; None at the start
    compile_s: float | None  # None at the start
    remaining: float
    reason: str
    measured: str = ""

    def __str__(self) -> str:
        tail = f" (steps: {self.measured})" if self.measured else ""
        return f"batch {self.batch}: {self.action} {self.strategy} {list(self.boundaries)}: {self.reason}{tail}"


@dataclass(frozen=True)
class _Priced:
    """Both strategies priced under one step model."""

    want: str  # the cheaper
    bucket: Estimate  # bucketing's best plan and seconds under the model
    pack_s: float
    pack_new: int
    fill: float
    model: str  # the model in words
    pack_rows: tuple[int, ...] = ()  # packing's row lengths (the row, and those of longer examples)
    floor: bool = False  # bucketing's seconds are a floor under every plan (no DP run: packing costs less)


class StrategyChooser:
    """Weighs packing against bucketing for one loader (see the module docstring).

    Attributes:
        planner: the loader's online planner (the costs, and where the decisions go).
        last: the latest :class:`Choice` of ``choose`` or ``switch`` (None before the first).
        bucket_plan: the boundaries bucketing takes when :meth:`decide` says ``"bucket"``.
    """

    def __init__(self, planner: AutoPlanner, row_of: Callable[[int, int], int]) -> None:
        """``row_of(length, row_length)``: the row the loader packs an example of ``length`` into,
        with rows of ``row_length`` (a longer example's: the row doubled until it holds it)."""
        self.planner = planner
        self._row_of = row_of
        self.last: Choice | None = None
        self.bucket_plan: tuple[int, ...] | None = None
        self._signature: tuple[Any, ...] | None = None  # what the costs were when last weighed
        self._weighed_at = 0  # the planner's batch count then
        self._waiting_since: int | None = None  # the batch the wait on bucketing began
        # weighing put off for a length's second step: each length measured by one step -> the batch
        # it was first put off for; and the batch the earliest of those puts off ends (None: not put off)
        self._unsettled: dict[int, int] = {}
        self._settle_due: int | None = None
        self._pooled: dict[tuple[int, int], list[tuple[int, float, float, float, float]]] = {}  # see _pools

    # -- starting
    def blind(self) -> bool:
        """Whether nothing prices either strategy yet (no step measured, no saved report's)."""
        return self.last is None and self.planner.costs.step_model() is None

    def start(self, row_length: int) -> None:
        """Record the blind start: packing into rows of ``row_length``, the longest length read."""
        planner = self.planner
        choice = Choice(planner.batches, "start", "pack", (row_length,), None, None, row_length, None, None,
                        planner.remaining(),
                        f"no costs measured yet: packing into rows of the longest length read ({row_length}), "
                        "the shape bucketing would start on; its first batches measure a compile and a step",
                        planner.decided_on())
        planner.decisions.append(choice)
        log.info("[shapewatch] %s: %s", planner.name, choice)

    def forced_pack(self, row_length: int, why: str) -> None:
        """Record a switch to packing that nothing priced (bucketing cannot go on: ``why``)."""
        planner = self.planner
        self.last = Choice(planner.batches, "switch", "pack", (row_length,), None, None, row_length, None, None,
                           planner.remaining(), why, planner.decided_on())
        self._signature, self._weighed_at, self._waiting_since = self._costs(), planner.batches, None
        self._settle_due = None
        planner.decisions.append(self.last)
        log.info("[shapewatch] %s: %s", planner.name, self.last)

    # -- deciding
    def mark(self) -> tuple[Any, ...]:
        """What :meth:`decide` (or :meth:`start`) changes besides its answer (the last choice, the
        plan bucketing would take, the costs weighed and when, the wait, the decisions made), for
        :meth:`rewind`."""
        return (self.last, self.bucket_plan, self._signature, self._weighed_at, self._waiting_since,
                dict(self._unsettled), self._settle_due, len(self.planner.decisions))

    def rewind(self, mark: tuple[Any, ...]) -> None:
        """Back to ``mark`` (:meth:`mark`): a weighing an interrupt cut short is made again from
        where it began (called again, it changes nothing more)."""
        (self.last, self.bucket_plan, self._signature, self._weighed_at, self._waiting_since, unsettled,
         self._settle_due, made) = mark
        self._unsettled = dict(unsettled)
        del self.planner.decisions[made:]

    def decide(self, current: str, row_length: int | None) -> tuple[str, int | None]:
        """``(strategy, row length)`` for the next batches: ``current`` (packing: at
        ``row_length``) unless the measured costs say the other is cheaper (bucketing: with
        :attr:`bucket_plan`). Records each choice, switch and wait in the planner's decisions."""
        planner = self.planner
        if not self._due():
            return current, row_length
        estimate = self._measured()
        if estimate is None or estimate.remaining <= 0:  # no costs measured yet (the first batches
            return current, row_length  # measure them), or nothing left to choose for
        self._signature, self._weighed_at = self._costs(), planner.batches
        if self._put_off():  # a length measured by one step: weighed again with its second
            return current, row_length
        top = int(round_up(max(int(self._lengths()[0].max(initial=1)), 1), planner.multiple_of))
        # packing goes on in its rows (a longer example: in the row doubled); a switch packs into rows of the top
        pack_at = row_length if current == "pack" and row_length is not None else top
        priced = self._priced(estimate, pack_at)
        if not priced:
            return current, row_length
        wants = {name: p.want for name, p in priced.items()}
        measured = len(planner.costs.step_points()[0])
        note = ""
        if len(set(wants.values())) > 1:  # fewer than 3 lengths measured, and the fits disagree
            if self.last is None and self._wait(priced, pack_at, current, estimate):
                return "bucket", None
            want, note = _least_regret(priced)
        else:
            want = next(iter(wants.values()))
            if len(priced) > 1:
                note = f"; every step model that fits the {measured} length(s) measured ({', '.join(priced)}) chooses {want}"
        self._waiting_since = None
        name = next(name for name, w in wants.items() if w == want)
        chosen = priced[name]
        if len(priced) > 1:
            note = f" (priced with {name}){note}"
        saving = abs(chosen.pack_s - chosen.bucket.seconds)
        if self.last is not None and (want == current or saving <= self._threshold(chosen.bucket.compile_s)):
            return current, row_length
        self.bucket_plan = chosen.bucket.boundaries  # taken on a switch (bucketing already: its own plan goes on)
        action = "choose" if self.last is None else "switch"
        why = self._reason(want, chosen, pack_at, saving) + note
        bounds = (pack_at,) if want == "pack" else chosen.bucket.boundaries
        self.last = self._record(action, want, bounds, chosen, pack_at, why)
        return want, (pack_at if want == "pack" else None)

    def settling(self) -> bool:
        """Whether the weighing is put off for a length's second step (see :meth:`_put_off`)."""
        return self._settle_due is not None and self.planner.batches < self._settle_due

    def _put_off(self) -> bool:
        """Whether to put off weighing while a length is measured by one step only (a stall on a
        busy host lengthens one step, and a choice of packing made on it would not measure that
        length again): until its second step (the meter measures it), at most
        :data:`SETTLE_AT_MOST` batches after weighing was first put off for it."""
        costs, batches = self.planner.costs, self.planner.batches
        x, counts = costs.step_points()[0], costs.step_counts()
        self._unsettled = {int(v): self._unsettled.get(int(v), batches) for v, n in zip(x, counts, strict=True)
                           if n < STEPS_TO_SETTLE}
        ends = [since + SETTLE_AT_MOST for since in self._unsettled.values() if batches < since + SETTLE_AT_MOST]
        self._settle_due = min(ends) if ends else None
        return self._settle_due is not None

    def _measured(self) -> Estimate | None:
        """The compile seconds and examples to come (None until a compile and a step are measured),
        with bucketing's plan under the planner's fitted model where the chooser prices with it (3
        lengths measured, or a prior's model; else each fitted model has its own plan, see
        :meth:`_priced`, and this one's is left empty: no DP spent on it)."""
        planner = self.planner
        if not self._fitted() or planner._only_prior():
            return planner.estimate()
        compile_s = planner.costs.compile_seconds()
        if compile_s is None:
            return None
        return Estimate((), 0.0, 0, float(compile_s), planner.remaining(), (0.0, 0.0, 0.0))

    def _priced(self, estimate: Estimate, pack_at: int) -> dict[str, _Priced]:
        """Both strategies under each step model that fits the lengths measured (see
        :func:`_fits`), or under the planner's fitted model (3 lengths or more, or a prior's)."""
        models = self._fitted()
        if not models:
            pack_s, pack_new, fill, rows = self._pack_seconds(pack_at, estimate, None)
            a, beta, gamma = estimate.step_model
            return {"the step model": _Priced("pack" if pack_s < estimate.seconds else "bucket", estimate, pack_s,
                                              pack_new, fill, _words(((0, a), (1, beta), (2, gamma))), rows)}
        priced = {}
        for name, model in models.items():
            pack_s, pack_new, fill, rows = self._pack_seconds(pack_at, estimate, model)
            floor = self._floor(model, estimate)
            if floor is not None and floor.seconds >= pack_s:  # no bucket plan can cost less: no DP
                priced[name] = _Priced("pack", floor, pack_s, pack_new, fill, _words(model), rows, floor=True)
                continue
            other = self._estimate(model, estimate)
            priced[name] = _Priced("pack" if pack_s < other.seconds else "bucket", other, pack_s, pack_new, fill,
                                   _words(model), rows)
        return priced

    def _floor(self, model: Model, measured: Estimate) -> Estimate | None:
        """A floor under every bucket plan's seconds to come under ``model``: each example padded
        to the shortest compiled shape that holds it (a plan of compiled shapes only), or a compile
        and each example at its own length (a plan with a new shape); None with nothing to come."""
        planner = self.planner
        values, probs = planner._distribution()
        weights = probs * measured.remaining
        if not (weights > 0).any():
            return None
        rows = np.array([planner.rows_for(int(v)) for v in values], float)
        own = float(np.dot(weights, _seconds(model, values) / rows))
        shapes = tuple(sorted(planner.compiled))
        on_compiled = planner.on_compiled(values, weights, self._per_unit(model))
        compiled = np.inf if on_compiled is None else on_compiled[1]
        new = measured.compile_s + own < compiled
        return Estimate(() if new else tuple(int(b) for b in shapes), min(compiled, measured.compile_s + own),
                        int(new), measured.compile_s, measured.remaining, _quadratic(model))

    def _estimate(self, model: Model, measured: Estimate, cap: int | None = None) -> Estimate:
        """Bucketing's best plan (at most ``cap`` shapes) and its seconds to come under ``model``
        (the planner's exact DP, as :meth:`AutoPlanner.estimate` with a model of its own)."""
        planner = self.planner
        values, probs = planner._distribution()
        limit = planner.max_shapes - (0 if planner.reserve_used else 1)
        bounds, seconds, new = planner.best_to_come(values, probs * measured.remaining, self._per_unit(model),
                                                    measured.compile_s, limit if cap is None else min(cap, limit))
        return Estimate(tuple(int(b) for b in bounds), float(seconds), int(new), measured.compile_s,
                        measured.remaining, _quadratic(model))

    def _per_unit(self, model: Model) -> Callable[[np.ndarray], np.ndarray]:
        """Lengths -> ``model``'s seconds of a step per row at each."""
        rows_of = self.planner._rows_of
        return lambda lengths: _seconds(model, lengths) / rows_of(lengths)

    def _threshold(self, compile_s: float) -> float:
        """What a switch must save: :data:`HYSTERESIS` of a compile, or a whole compile within
        :data:`REPLAN_EVERY` batches of the last choice (no flapping as the first lengths come in)."""
        recent = self.last is not None and self.planner.batches - self.last.batch < REPLAN_EVERY
        return compile_s if recent else HYSTERESIS * compile_s

    def _fitted(self) -> dict[str, Model]:
        """Measured at fewer than :data:`LENGTHS_TO_FIT` lengths (and no prior's model): the step
        models that fit the points, by name (see :func:`_fits`); else none."""
        costs = self.planner.costs
        x, y = costs.step_points()
        if costs.prior_step is not None or x.size >= LENGTHS_TO_FIT or not x.size:
            return {}
        return _fits(x, y)

    def _wait(self, priced: dict[str, _Priced], pack_at: int, current: str, estimate: Estimate) -> bool:
        """Whether to bucket, not choosing yet, while bucketing measures the step at more lengths
        (at most :data:`WAIT_AT_MOST` batches; recorded once, with :attr:`bucket_plan` the plan to
        take): where what packing could lose, under the model that favours bucketing most, exceeds
        what measuring costs where packing is right. It measures one length more (the best plan of
        that model with one shape more than those measured: one compile), the planner re-planning
        only once its lengths are measured (:meth:`probing`)."""
        planner = self.planner
        x, _ = planner.costs.step_points()
        measured = len(x)
        if self._waiting_since is not None:  # waiting already: bucketing goes on with the planner's plan
            return planner.batches - self._waiting_since < WAIT_AT_MOST
        # the model under which bucketing saves the most, and a plan of a few shapes that measures more
        best = max(priced, key=lambda n: priced[n].pack_s - priced[n].bucket.seconds)
        at_stake = priced[best].pack_s - priced[best].bucket.seconds
        # the cheapest measurement that tells the models apart: one length more (one compile)
        known = planner.compiled | {int(v) for v in x}
        probe = self._estimate(self._fitted()[best], estimate, cap=len(known) + 1)
        fresh = [b for b in probe.boundaries if b not in known]
        if not fresh:
            return False
        cost = self._measuring_cost(probe, fresh, priced, pack_at)
        fits_text = "; ".join(f"{name}: {p.want}" for name, p in priced.items())
        if cost >= at_stake:
            return False
        self._waiting_since = planner.batches
        self.bucket_plan = probe.boundaries
        chosen = priced[best]
        chosen = _Priced(chosen.want, probe, chosen.pack_s, chosen.pack_new, chosen.fill, chosen.model,
                         chosen.pack_rows)
        self._record("wait", "bucket", probe.boundaries, chosen, pack_at,
                     f"the step is measured at {measured} length(s) ({', '.join(str(int(v)) for v in x)}), and the "
                     f"step models that fit choose differently ({fits_text}): packing into rows of {pack_at} could "
                     f"lose up to {at_stake:.3g} s (under {best}), more than measuring costs if packing is right "
                     f"({cost:.3g} s: {len(fresh)} compile(s) and bucketed steps); bucketing "
                     f"{list(probe.boundaries)} measures the step at more lengths before choosing (at most "
                     f"{WAIT_AT_MOST} batches)")
        return True

    def probing(self, plan: tuple[int, ...]) -> bool:
        """Whether bucketing ``plan`` is a wait's that has not measured each of its lengths yet, by
        two steps each (the planner's re-planning waits for them: a plan changed first would
        measure others, at more compiles)."""
        if self._waiting_since is None:
            return False
        x = self.planner.costs.step_points()[0]
        return not set(plan) <= {int(v) for v in x[self.planner.costs.step_counts() >= STEPS_TO_SETTLE]}

    def _measuring_cost(self, probe: Estimate, fresh: list[int], priced: dict[str, _Priced], pack_at: int) -> float:
        """Seconds that bucketing with ``probe`` until each of its ``fresh`` lengths is measured
        (a compile and two steps: three batches of the rarest) loses where packing is right: the
        compiles, and each bucketed batch's step beyond what its examples cost packed, under the
        model that favours packing most."""
        planner = self.planner
        values, probs = planner._distribution()
        idx = np.searchsorted(np.array(probe.boundaries), values, side="left")
        share = {b: float(probs[idx == i].sum()) for i, b in enumerate(probe.boundaries)}
        rarest = min(share.get(b, 0.0) for b in fresh)
        rows = planner.rows_for(pack_at)
        batches = min(float(WAIT_AT_MOST), (1 + STEPS_TO_SETTLE) * len(fresh) / max(rarest, 1e-9))
        worst = max(priced, key=lambda n: priced[n].bucket.seconds - priced[n].pack_s)
        model = self._fitted()[worst]
        step_r = float(_seconds(model, np.array([pack_at]))[0])
        lengths, counts = self._lengths()
        mean = float(np.dot(np.maximum(lengths, 1), counts) / max(counts.sum(), 1.0))
        per_packed = rows * pack_at * priced[worst].fill / max(mean, 1.0)  # examples a packed batch holds
        excess = 0.0
        for b, p in share.items():  # a bucketed batch at b, against its examples' share of packed steps
            excess += p * max(float(_seconds(model, np.array([b]))[0]) - step_r * planner.rows_for(b) / per_packed,
                              0.0)
        return len(fresh) * probe.compile_s + batches * excess

    def _due(self) -> bool:
        """Whether to weigh the costs again: before the first choice, on new measurements, or a
        while after the last weighing (waiting on bucketing: when it has waited long enough; put
        off for a length's second step: when that has waited long enough)."""
        since = self.planner.batches - self._weighed_at
        if self._settle_due is not None and self.planner.batches >= self._settle_due:
            return True
        if self._waiting_since is not None:
            return self._costs() != self._signature or self.planner.batches - self._waiting_since >= WAIT_AT_MOST
        return self.last is None or self._costs() != self._signature or since >= REPLAN_EVERY

    def due_in(self) -> int:
        """Batches until the weighing falls due (at least 1): :data:`REPLAN_EVERY` after the last,
        or (waiting on bucketing) :data:`WAIT_AT_MOST` after the wait began; put off for a length's
        second step: the next batch (in a job, the costs come with each round: a round a step, at
        most :data:`SETTLE_AT_MOST`)."""
        batches = self.planner.batches
        if self.settling():
            return 1
        if self._waiting_since is not None:
            return max(1, WAIT_AT_MOST - (batches - self._waiting_since))
        return max(1, REPLAN_EVERY - (batches - self._weighed_at))

    def _costs(self) -> tuple[Any, ...]:
        """What the weighing rests on: lengths measured and whether each is settled (its second
        step), lengths seen (a new shape's compile is measured a batch before its step: weighed
        once, with both)."""
        settled = tuple(int(n) for n in np.minimum(self.planner.costs.step_counts(), STEPS_TO_SETTLE))
        return (len(settled), int(self.planner.observer.lengths.max(initial=0)), settled)

    # -- pricing
    def _lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Lengths seen (with a prior's) and their counts."""
        obs = self.planner.observer.copy()
        if self.planner.prior_observer is not None:
            obs.merge(self.planner.prior_observer)
        return np.asarray(obs.lengths, np.int64), np.asarray(obs.counts, float)

    def _pools(self, row_length: int) -> list[tuple[int, float, float, float, float]]:
        """Packing into rows of ``row_length`` as the loader packs (``row_of``: a longer example
        into the row doubled until it holds it), from the lengths seen: per row length, ``(row,
        share of the examples, their mean length, how full first-fit-decreasing packs their rows,
        the mean of their squared lengths)`` (the fill from a sample of at most
        :data:`FILL_SAMPLE`, in their proportions)."""
        lengths, counts = self._lengths()
        key = (row_length, int(counts.sum()))
        if key not in self._pooled:
            lengths = np.maximum(lengths, 1)
            total = max(float(counts.sum()), 1.0)
            scale = min(1.0, FILL_SAMPLE / total)
            rows_of = np.array([self._row_of(int(n), row_length) for n in lengths], np.int64)
            pools = []
            for row in np.unique(rows_of):
                at = rows_of == row
                own, many = lengths[at], counts[at]
                reps = np.maximum(np.round(many * scale), many > 0).astype(np.int64)
                sample = np.minimum(np.repeat(own, reps), row)
                packed = first_fit_decreasing(sample.tolist(), int(row))
                held = max(float(many.sum()), 1.0)
                pools.append((int(row), float(many.sum()) / total, float(np.dot(own, many) / held),
                              float(sample.sum()) / (len(packed) * int(row)),
                              float(np.dot(own.astype(float) ** 2, many) / held)))
            self._pooled = {key: pools}
        return self._pooled[key]

    def _pack_seconds(self, row_length: int, estimate: Estimate,
                      model: Model | None) -> tuple[float, int, float, tuple[int, ...]]:
        """(seconds to come, new compiles, fill, row lengths) of packing into rows of
        ``row_length`` (a longer example's rows doubled, as the loader packs), its steps priced
        with ``model`` (None: the estimate's); ``fill``: of all the rows, by tokens."""
        planner = self.planner
        pools = self._pools(row_length)
        rows = np.array([pool[0] for pool in pools], np.int64)
        if model is None:
            steps = modelled_step_seconds(estimate.step_model, rows)
            assert steps is not None
        else:
            steps = _seconds(model, rows)
        seconds = tokens = room = 0.0
        spread = planner._spread()
        for (row, share, mean, fill, square), step in zip(pools, steps, strict=True):
            fill = max(fill, 1e-9)
            batches = estimate.remaining * share * mean / (row * fill * planner.rows_for(row))
            if planner.horizon is not None and estimate.remaining > 0:
                batches += 0.5  # the last batch of each row length is short
                if spread:  # a job: its fullest process's batches (each process's tokens of this row
                    # length vary over its examples to come; as bucketing's, see spread_of)
                    var = max(share * square - (share * mean) ** 2, 0.0)
                    batches += spread * np.sqrt(estimate.remaining * var) / (row * fill * planner.rows_for(row))
            seconds += batches * float(step)
            tokens, room = tokens + share * mean, room + share * mean / fill
        new = sum(int(row) not in planner.compiled for row in rows)
        return seconds + new * estimate.compile_s, new, tokens / room if room else 1.0, tuple(int(r) for r in rows)

    def _reason(self, want: str, priced: _Priced, row_length: int, saving: float) -> str:
        estimate = priced.bucket
        bucket = (f"bucketing {list(estimate.boundaries)} {estimate.seconds:.3g} s "
                  f"({estimate.new_compiles} new compile(s))")
        if estimate.seconds == float("inf"):
            bucket = (f"no bucketing plan within max_shapes={self.planner.max_shapes} (with the shapes compiled "
                      f"{sorted(self.planner.compiled)}, none holds the lengths to come)")
        elif priced.floor:
            bucket = (f"bucketing at least {estimate.seconds:.3g} s (any plan: a new shape's compile and every "
                      f"example at its own length, or the shapes compiled {sorted(self.planner.compiled)})")
        longer = [r for r in priced.pack_rows if r != row_length]
        also = f" (and of {', '.join(map(str, longer))} for longer examples)" if longer else ""
        pack = (f"packing into rows of {row_length}{also} {priced.pack_s:.3g} s ({priced.pack_new} new compile(s), "
                f"rows {priced.fill:.0%} full)")
        first, second = (pack, bucket) if want == "pack" else (bucket, pack)
        return (f"{first} vs {second} over {estimate.remaining:,.0f} examples to come: saves {_secs(saving)}; "
                f"compile {estimate.compile_s:.3g} s, step {priced.model} s a batch")

    def _record(self, action: str, strategy: str, bounds: tuple[int, ...], priced: _Priced, row_length: int,
                reason: str) -> Choice:
        planner = self.planner
        estimate = priced.bucket
        bucket_s = estimate.seconds if np.isfinite(estimate.seconds) else None  # None: no plan (reports are JSON)
        choice = Choice(planner.batches, action, strategy, tuple(bounds), bucket_s, priced.pack_s,
                        row_length, priced.fill, estimate.compile_s, estimate.remaining, reason, planner.decided_on())
        planner.decisions.append(choice)
        log.info("[shapewatch] %s: %s", planner.name, choice)
        return choice

    # -- explaining
    def explain(self, current: str, plan_text: str) -> str:
        """The strategy in use and why, then ``plan_text`` (the plan's own explanation)."""
        last = self.last
        if last is None:
            said = [d for d in self.planner.decisions if isinstance(d, Choice)]
            if said:  # the start (packing blind) or a wait (bucketing while it measures)
                why = f"no choice yet: since batch {said[-1].batch}: {said[-1].reason}"
            else:
                why = ("no choice yet: the first batches measure a compile and a step (at the longest length "
                       "read" + (", packed)" if current == "pack" else ")"))
        else:
            why = f"chosen at batch {last.batch}: {last.reason}"
        head = "packing" if current == "pack" else "bucketing"
        return f"strategy='auto': {head}; {why}\n{plan_text}"

    # -- resuming
    def state_dict(self, mark: tuple[Any, ...] | None = None) -> dict[str, Any]:
        """What the chooser needs to go on (its decisions are the planner's, saved with it); at
        ``mark`` (:meth:`mark`, its last field the count of decisions then) where given."""
        last, _, signature, weighed_at, waiting_since, unsettled, settle_due, _ = self.mark() if mark is None else mark
        return {"format": CHOOSER_FORMAT, "last": last, "signature": signature, "weighed_at": weighed_at,
                "waiting_since": waiting_since, "unsettled": dict(unsettled), "settle_due": settle_due}

    @staticmethod
    def check_state(state: Any, where: str) -> None:
        """Raise (``TypeError`` / ``ValueError``, naming ``where``) unless ``state`` is a chooser's."""
        if not isinstance(state, dict):
            raise TypeError(f"[shapewatch] load_state_dict: {where} is {type(state).__name__}, expected a "
                            f"dict ({CHOOSER_FORMAT!r}); fix: pass the dict that state_dict() returned, unchanged")
        keys = {"format", "last", "signature", "weighed_at", "waiting_since", "unsettled", "settle_due"}
        later = {"unsettled", "settle_due"}  # a state saved before they were kept has neither
        if (state.get("format") != CHOOSER_FORMAT or not keys - later <= set(state) <= keys
                or len(later & set(state)) == 1):
            raise fail(f"load_state_dict: {where} is not a {CHOOSER_FORMAT} state (format "
                       f"{state.get('format')!r}, keys {sorted(state)}); fix: pass the dict that state_dict() "
                       "returned, unchanged")
        checks = {"last": (state["last"] is None or isinstance(state["last"], Choice), "None or a Choice"),
                  "signature": (state["signature"] is None or isinstance(state["signature"], tuple),
                                "None or a tuple"),
                  "weighed_at": (_is_count(state["weighed_at"]), "an int >= 0"),
                  "waiting_since": (state["waiting_since"] is None or _is_count(state["waiting_since"]),
                                    "None or an int >= 0"),
                  "unsettled": (isinstance(state.get("unsettled", {}), dict)
                                and all(_is_count(k) and _is_count(v) for k, v in state.get("unsettled", {}).items()),
                                "a dict of ints >= 0 (length: batch)"),
                  "settle_due": (state.get("settle_due") is None or _is_count(state["settle_due"]),
                                 "None or an int >= 0")}
        for name, (ok, expected) in checks.items():
            if not ok:
                raise TypeError(f"[shapewatch] load_state_dict: {where}[{name!r}] is "
                                f"{type(state[name]).__name__} {state[name]!r:.60}, expected {expected}; fix: "
                                "pass the dict that state_dict() returned, unchanged")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (checked first with :meth:`check_state`)."""
        self.last, self._signature = state["last"], state["signature"]
        self._weighed_at, self._waiting_since = state["weighed_at"], state["waiting_since"]
        self._unsettled = dict(state.get("unsettled", {}))  # a state saved before they were kept: none
        self._settle_due = state.get("settle_due")


def _secs(seconds: float) -> str:
    """Seconds in words; infinite: bucketing has no plan within ``max_shapes``."""
    return f"{seconds:.3g} s" if np.isfinite(seconds) else "all (bucketing has no plan within max_shapes)"


def _is_count(value: Any) -> bool:
    return is_int(value) and value >= 0


def _quadratic(model: Model) -> tuple[float, float, float]:
    """``model``'s ``(a, beta, gamma)`` (an L^3 term left out: the Estimate's step model is quadratic)."""
    terms = dict(model)
    return (float(terms.get(0, 0.0)), float(terms.get(1, 0.0)), float(terms.get(2, 0.0)))


def _words(model: Model) -> str:
    """``model`` as ``a + b*L + c*L^2`` (and ``+ d*L^3`` where it has one)."""
    terms = dict(model)
    text = f"{terms.get(0, 0.0):.3g} + {terms.get(1, 0.0):.3g}*L + {terms.get(2, 0.0):.3g}*L^2"
    return text + (f" + {terms[3]:.3g}*L^3" if terms.get(3) else "")


def _least_regret(priced: dict[str, _Priced]) -> tuple[str, str]:
    """The strategy whose worst loss over the fitted models is the least (they choose differently
    and measuring more would cost more than it could save), and the words that say so."""
    loss = {}
    for strategy in STRATEGIES:
        loss[strategy] = max((p.bucket.seconds if strategy == "bucket" else p.pack_s)
                             - min(p.bucket.seconds, p.pack_s) for p in priced.values())
    want = min(STRATEGIES, key=lambda s: (loss[s], s != "bucket"))
    fits = ", ".join(f"{name}: {p.want}" for name, p in priced.items())
    other = "pack" if want == "bucket" else "bucket"
    return want, (f"; the step models that fit the lengths measured choose differently ({fits}): {want}, "
                  f"whose worst loss over them is {_secs(loss[want])} ({other}'s: {_secs(loss[other])})")
