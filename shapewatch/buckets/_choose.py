"""``StrategyChooser``: pack or bucket, from measured costs, for ``group_by_length(...,
strategy="auto")`` (private).

Packing puts whole examples in rows of one length R (the longest length seen, rounded up to
``multiple_of``): one shape and little padding, but every row costs a step at R. Bucketing
pads each example to its bucket: a few shapes and more padding, but a short row costs a short
step. Both are priced from what the loader's online planner (:class:`AutoPlanner`) measured
through asynchronous dispatch: its step model ``g(L) = a + beta*L + gamma*L^2``, the seconds of
one batch (``rows_for(L)`` rows) at length L, and its compile seconds, over the examples
still to come:

- bucketing: the plan the planner would choose now (its exact DP), its steps plus a compile for
  each shape not compiled yet (:meth:`AutoPlanner.estimate`);
- packing: ``tokens to come / (R x fill x rows_for(R))`` batches of ``g(R)`` each (half a batch
  more for the last, short one of a sized input), plus a compile when R is not compiled yet;
  ``fill`` is what first-fit-decreasing reaches on the lengths seen.

A switch's compiles are in its price. The first choice takes the cheaper; a later switch must
save more than :data:`HYSTERESIS` of a compile (a whole compile within :data:`REPLAN_EVERY`
batches of the last choice). A step measured at one or two lengths cannot tell a cost that grows
like L^2 (attention) from one with a fixed part: where the models that fit those points (a fixed
cost, like L, like L^2, or pairs of those terms) choose differently, the chooser waits on
bucketing before its first choice while bucketing's plan would measure more lengths (at most
:data:`WAIT_AT_MOST` batches, recorded once as a ``wait``), then takes the strategy whose worst
loss over those models is the least. The costs are weighed again whenever the planner measures a
new length or a new compile, and every :data:`REPLAN_EVERY` batches.

The chooser changes no loader: :meth:`StrategyChooser.decide` says which strategy the next
batches take, and the loader moves what it holds (it owns the chooser).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._auto_planner import HYSTERESIS, REPLAN_EVERY, AutoPlanner, Estimate
from ._checks import fail, is_int, round_up
from ._cost_model import modelled_step_seconds
from ._pack import first_fit_decreasing

__all__ = ["CHOOSER_FORMAT", "Choice", "LENGTHS_TO_FIT", "StrategyChooser", "WAIT_AT_MOST"]

log = logging.getLogger("shapewatch")

#: Measured lengths the step model needs before it can tell L^2 from a fixed part plus L.
LENGTHS_TO_FIT = 3
#: The most batches the chooser waits on bucketing for those lengths to be measured.
WAIT_AT_MOST = 2 * REPLAN_EVERY
#: Lengths first-fit-decreasing packs to estimate how full packed rows are.
FILL_SAMPLE = 4096
CHOOSER_FORMAT = "shapewatch.chooser-state/1"
STRATEGIES = ("bucket", "pack")


@dataclass(frozen=True)
class Choice:
    """One decision of ``strategy="auto"`` between packing and bucketing (in ``loader.decisions``,
    with the online planner's :class:`Decision` s, in order)."""

    batch: int
    action: str  # choose | switch | wait
    strategy: str  # bucket | pack: the strategy of the batches that follow
    boundaries: tuple[int, ...]  # bucketing's plan, or packing's row length
    bucket_s: float  # bucketing's seconds to come (steps and new compiles)
    pack_s: float | None  # packing's seconds to come (steps and new compiles); None in a wait
    row_length: int  # packing's row length
    fill: float | None  # how full packed rows are estimated to be; None in a wait
    compile_s: float
    remaining: float
    reason: str
    measured: str = ""

    def __str__(self) -> str:
        tail = f" (steps: {self.measured})" if self.measured else ""
        return f"batch {self.batch}: {self.action} {self.strategy} {list(self.boundaries)}: {self.reason}{tail}"


class StrategyChooser:
    """Weighs packing against bucketing for one loader (see the module docstring).

    Attributes:
        planner: the loader's online planner (the costs, and where the decisions go).
        last: the latest :class:`Choice` of ``choose`` or ``switch`` (None before the first).
    """

    def __init__(self, planner: AutoPlanner) -> None:
        self.planner = planner
        self.last: Choice | None = None
        self._signature: tuple[Any, ...] | None = None  # what the costs were when last weighed
        self._weighed_at = 0  # the planner's batch count then
        self._waiting_since: int | None = None  # the batch the wait on bucketing began
        self._fills: dict[tuple[int, int], float] = {}  # (row length, lengths seen) -> fill

    # -- deciding
    def decide(self, current: str, row_length: int | None) -> tuple[str, int | None]:
        """``(strategy, row length)`` for the next batches: ``current`` (packing: at
        ``row_length``) unless the measured costs say the other is cheaper. Records each
        choice, switch and wait in the planner's decisions."""
        planner = self.planner
        if not self._due():
            return current, row_length
        estimate = planner.estimate()
        if estimate is None or estimate.remaining <= 0:  # no costs measured yet (bucketing's first
            return current, row_length  # batches measure them), or nothing left to choose for
        self._signature, self._weighed_at = self._costs(), planner.batches
        top = int(round_up(max(int(self._lengths()[0].max(initial=1)), 1), planner.multiple_of))
        pack_at = row_length if current == "pack" and row_length is not None and row_length >= top else top
        models = self._fitted() or {"the step model": None}
        priced = {}  # model's name -> (strategy it chooses, bucketing's estimate, packing's seconds, new, fill)
        for name, model in models.items():
            other = estimate if model is None else planner.estimate(model)
            if other is not None:
                pack_s, pack_new, fill = self._pack_seconds(pack_at, other)
                priced[name] = ("pack" if pack_s < other.seconds else "bucket", other, pack_s, pack_new, fill)
        wants = {name: p[0] for name, p in priced.items()}
        if not wants:
            return current, row_length
        note = ""
        if len(set(wants.values())) > 1:  # one or two lengths measured, and the fits disagree
            if self.last is None and current == "bucket" and self._wait(estimate, pack_at, wants):
                return current, row_length
            want, note = _least_regret(priced)
        else:
            want = next(iter(wants.values()))
            if len(priced) > 1:
                note = (f"; every step model that fits the {len(planner.costs.step_points()[0])} length(s) "
                        f"measured ({', '.join(priced)}) chooses {want}")
        self._waiting_since = None
        name = next(name for name, w in wants.items() if w == want)
        _, chosen, pack_s, pack_new, fill = priced[name]
        if len(priced) > 1:
            note = f" (priced with {name}){note}"
        saving = abs(pack_s - chosen.seconds)
        if self.last is not None and (want == current or saving <= self._threshold(chosen.compile_s)):
            return current, row_length
        action = "choose" if self.last is None else "switch"
        why = self._reason(want, chosen, pack_at, pack_s, pack_new, fill, saving) + note
        bounds = (pack_at,) if want == "pack" else chosen.boundaries
        self.last = self._record(action, want, bounds, chosen, pack_s, pack_at, fill, why)
        return want, (pack_at if want == "pack" else None)

    def _threshold(self, compile_s: float) -> float:
        """What a switch must save: :data:`HYSTERESIS` of a compile, or a whole compile within
        :data:`REPLAN_EVERY` batches of the last choice (no flapping as the first lengths come in)."""
        recent = self.last is not None and self.planner.batches - self.last.batch < REPLAN_EVERY
        return compile_s if recent else HYSTERESIS * compile_s

    def _fitted(self) -> dict[str, tuple[float, float, float]]:
        """Measured at fewer than :data:`LENGTHS_TO_FIT` lengths (and no prior's model): the step
        models that fit the points, by name (see :func:`_fits`); else none."""
        costs = self.planner.costs
        x, y = costs.step_points()
        if costs.prior_step is not None or x.size >= LENGTHS_TO_FIT or not x.size:
            return {}
        return _fits(x, y)

    def _wait(self, estimate: Estimate, pack_at: int, wants: dict[str, str]) -> bool:
        """Whether to stay on bucketing, not choosing yet, while its plan measures the step at more
        lengths (at most :data:`WAIT_AT_MOST` batches); the wait is recorded once."""
        planner = self.planner
        measured = len(planner.costs.step_points()[0])
        if len(estimate.boundaries) <= measured:  # bucketing measures no more lengths
            return False
        if self._waiting_since is not None:
            return planner.batches - self._waiting_since < WAIT_AT_MOST
        self._waiting_since = planner.batches
        fits = "; ".join(f"{name}: {w}" for name, w in wants.items())
        self._record("wait", "bucket", estimate.boundaries, estimate, None, pack_at, None,
                     f"the step is measured at {measured} length(s), and the step models that fit them choose "
                     f"differently ({fits}); bucketing's plan {list(estimate.boundaries)} measures it at more "
                     f"lengths first (at most {WAIT_AT_MOST} batches)")
        return True

    def _due(self) -> bool:
        """Whether to weigh the costs again: before the first choice, on new measurements, or a
        while after the last weighing (waiting on bucketing: when it has waited long enough)."""
        since = self.planner.batches - self._weighed_at
        if self._waiting_since is not None:
            return self._costs() != self._signature or self.planner.batches - self._waiting_since >= WAIT_AT_MOST
        return self.last is None or self._costs() != self._signature or since >= REPLAN_EVERY

    def _costs(self) -> tuple[Any, ...]:
        """What the weighing rests on: lengths measured, compiles measured, lengths seen."""
        costs = self.planner.costs
        return (len(costs.step_points()[0]), len(costs.compiles) + len(costs.first),
                int(self.planner.observer.lengths.max(initial=0)))

    # -- pricing
    def _lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Lengths seen (with a prior's) and their counts."""
        obs = self.planner.observer.copy()
        if self.planner.prior_observer is not None:
            obs.merge(self.planner.prior_observer)
        return np.asarray(obs.lengths, np.int64), np.asarray(obs.counts, float)

    def _fill(self, row_length: int) -> float:
        """How full rows of ``row_length`` are when first-fit-decreasing packs the lengths seen
        (a sample of at most :data:`FILL_SAMPLE`, in their proportions)."""
        lengths, counts = self._lengths()
        key = (row_length, int(counts.sum()))
        if key not in self._fills:
            scale = min(1.0, FILL_SAMPLE / max(counts.sum(), 1.0))
            reps = np.maximum(np.round(counts * scale), counts > 0).astype(np.int64)
            sample = np.minimum(np.repeat(np.maximum(lengths, 1), reps), row_length)
            rows = first_fit_decreasing(sample.tolist(), row_length) if sample.size else [[]]
            self._fills = {key: float(sample.sum()) / (len(rows) * row_length) if sample.size else 1.0}
        return self._fills[key]

    def _pack_seconds(self, row_length: int, estimate: Estimate) -> tuple[float, int, float]:
        """(seconds to come, new compiles, fill) of packing into rows of ``row_length``."""
        planner = self.planner
        lengths, counts = self._lengths()
        mean = float(np.dot(np.maximum(lengths, 1), counts) / max(counts.sum(), 1.0))
        fill = max(self._fill(row_length), 1e-9)
        batches = estimate.remaining * mean / (row_length * fill * planner.rows_for(row_length))
        if planner.horizon is not None and estimate.remaining > 0:
            batches += 0.5  # the last batch is short
        step = modelled_step_seconds(estimate.step_model, np.array([row_length]))
        assert step is not None
        new = int(row_length not in planner.compiled)
        return batches * float(step[0]) + new * estimate.compile_s, new, fill

    def _reason(self, want: str, estimate: Estimate, row_length: int, pack_s: float, pack_new: int,
                fill: float, saving: float) -> str:
        a, beta, gamma = estimate.step_model
        bucket = (f"bucketing {list(estimate.boundaries)} {estimate.seconds:.3g} s "
                  f"({estimate.new_compiles} new compile(s))")
        pack = f"packing into rows of {row_length} {pack_s:.3g} s ({pack_new} new compile(s), rows {fill:.0%} full)"
        first, second = (pack, bucket) if want == "pack" else (bucket, pack)
        return (f"{first} vs {second} over {estimate.remaining:,.0f} examples to come: saves {saving:.3g} s; "
                f"compile {estimate.compile_s:.3g} s, step {a:.3g} + {beta:.3g}*L + {gamma:.3g}*L^2 s a batch")

    def _record(self, action: str, strategy: str, bounds: tuple[int, ...], estimate: Estimate,
                pack_s: float | None, row_length: int, fill: float | None, reason: str) -> Choice:
        planner = self.planner
        choice = Choice(planner.batches, action, strategy, tuple(bounds), estimate.seconds, pack_s,
                        row_length, fill, estimate.compile_s, estimate.remaining, reason, planner.measured())
        planner.decisions.append(choice)
        log.info("[shapewatch] %s: %s", planner.name, choice)
        return choice

    # -- explaining
    def explain(self, current: str, plan_text: str) -> str:
        """The strategy in use and why, then ``plan_text`` (the plan's own explanation)."""
        last = self.last
        if last is None:
            why = ("no choice yet: bucketing's first batches measure a compile and a step (at the longest "
                   "length, the row length packing would use)")
        else:
            why = f"chosen at batch {last.batch}: {last.reason}"
        head = "packing" if current == "pack" else "bucketing"
        return f"strategy='auto': {head}; {why}\n{plan_text}"

    # -- resuming
    def state_dict(self) -> dict[str, Any]:
        """What the chooser needs to go on (its decisions are the planner's, saved with it)."""
        return {"format": CHOOSER_FORMAT, "last": self.last, "signature": self._signature,
                "weighed_at": self._weighed_at, "waiting_since": self._waiting_since}

    @staticmethod
    def check_state(state: Any, where: str) -> None:
        """Raise (``TypeError`` / ``ValueError``, naming ``where``) unless ``state`` is a chooser's."""
        if not isinstance(state, dict):
            raise TypeError(f"[shapewatch] load_state_dict: {where} is {type(state).__name__}, expected a "
                            f"dict ({CHOOSER_FORMAT!r}); fix: pass the dict that state_dict() returned, unchanged")
        keys = {"format", "last", "signature", "weighed_at", "waiting_since"}
        if state.get("format") != CHOOSER_FORMAT or set(state) != keys:
            raise fail(f"load_state_dict: {where} is not a {CHOOSER_FORMAT} state (format "
                       f"{state.get('format')!r}, keys {sorted(state)}); fix: pass the dict that state_dict() "
                       "returned, unchanged")
        checks = {"last": (state["last"] is None or isinstance(state["last"], Choice), "None or a Choice"),
                  "signature": (state["signature"] is None or isinstance(state["signature"], tuple),
                                "None or a tuple"),
                  "weighed_at": (_is_count(state["weighed_at"]), "an int >= 0"),
                  "waiting_since": (state["waiting_since"] is None or _is_count(state["waiting_since"]),
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


def _is_count(value: Any) -> bool:
    return is_int(value) and value >= 0


def _fits(x: np.ndarray, y: np.ndarray) -> dict[str, tuple[float, float, float]]:
    """The step models ``(a, beta, gamma)`` through one or two measured points ``(length, seconds)
    of a batch``, by name: from one point a fixed cost, one like L and one like L^2; from two, each
    pair of those terms; a fit with a negative term is left out."""
    if x.size == 1:
        return {"fixed": (float(y[0]), 0.0, 0.0), "~L": (0.0, float(y[0] / x[0]), 0.0),
                "~L^2": (0.0, 0.0, float(y[0] / x[0] ** 2))}
    fits = {}
    for name, (p, q) in (("a+b*L", (0, 1)), ("a+c*L^2", (0, 2)), ("b*L+c*L^2", (1, 2))):
        design = np.array([[x[0] ** p, x[0] ** q], [x[1] ** p, x[1] ** q]], float)
        try:
            first, second = np.linalg.solve(design, y[:2])
        except np.linalg.LinAlgError:
            continue
        if first >= 0 and second >= 0:
            terms = [0.0, 0.0, 0.0]
            terms[p], terms[q] = float(first), float(second)
            fits[name] = (terms[0], terms[1], terms[2])
    return fits


def _least_regret(priced: dict[str, tuple[str, Estimate, float, int, float]]) -> tuple[str, str]:
    """The strategy whose worst loss over the fitted models is the least (they choose differently
    and no more lengths will be measured), and the words that say so."""
    loss = {}
    for strategy in STRATEGIES:
        loss[strategy] = max((est.seconds if strategy == "bucket" else pack_s) - min(est.seconds, pack_s)
                             for _, est, pack_s, _, _ in priced.values())
    want = min(STRATEGIES, key=lambda s: (loss[s], s != "bucket"))
    fits = ", ".join(f"{name}: {p[0]}" for name, p in priced.items())
    other = "pack" if want == "bucket" else "bucket"
    return want, (f"; the step models that fit the lengths measured choose differently ({fits}): {want}, "
                  f"whose worst loss over them is {loss[want]:.3g} s ({other}'s: {loss[other]:.3g} s)")
