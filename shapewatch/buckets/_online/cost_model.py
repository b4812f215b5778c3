"""Measured costs for the online planner: compile seconds and a step-time model (private).

The loaders time what the consumer does with each batch: from yielding it to the next
request, waiting for the device at both ends where JAX may run the step asynchronously
(``_online.step_meter``: only those batches are observed then). The first batch of a new shape
includes its compile; later ones are steps.
With a linked watched step (``compile_records``), the compile seconds come from
shapewatch's own records instead, and the step is the rest. Where JAX may run asynchronously,
a new shape's first batch is not waited for: its compile comes from JAX's compile events
(``observe_compile``), or the linked records.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["LENGTHS_TO_FIT", "STEPS_TO_SETTLE", "CostModel", "Model", "fits_through", "model_seconds",
           "modelled_step_seconds"]

#: Step-time model terms, in the order they are preferred on equal fit: g(b) = a + beta*b + gamma*b**2.
_SUBSETS = [s for r in (1, 2, 3) for s in itertools.combinations((1, 0, 2), r)]
#: Measured lengths the step model needs before it can tell L^2 from a fixed part plus L.
LENGTHS_TO_FIT = 3
#: Steps of a shape before its point is settled: a stall (a busy host, a collection) only lengthens
#: a step, and the lower of two drops it (see :meth:`CostModel.step_points`).
STEPS_TO_SETTLE = 2
#: A step model that fits measured points: seconds of a batch at length L = sum of coef * L**power.
Model = tuple[tuple[int, float], ...]


class CostModel:
    """Compile and step seconds per shape, as measured so far.

    Attributes:
        first: shape -> (length, seconds of its first batch: compile + one step; or its
            compile alone where that batch was not waited for).
        compiles: shape -> compile seconds from linked records or JAX's compile events.
        steps: shape -> seconds of each later batch of that shape.
    """

    def __init__(self, records: Callable[[], Any] | None = None) -> None:
        self._records = records
        self._seen_records = self._count_records()
        self.first: dict[Any, tuple[int, float]] = {}
        self.compiles: dict[Any, float] = {}
        self.by_events: set[Any] = set()  # shapes whose compile JAX's events timed
        self.steps: dict[Any, list[float]] = {}
        self.prior_compile: float | None = None
        self.prior_step: tuple[float, float, float] | None = None

    def _count_records(self) -> Any:
        """Where the records seen so far end: the last sequence number when the records
        have one (a capped list, ``max_records``, keeps its length once full), else the count."""
        if self._records is None:
            return 0
        return self._mark(list(self._records()))

    @staticmethod
    def _mark(records: list[Any]) -> Any:
        seqs = [getattr(r, "seq", None) for r in records]
        if records and all(isinstance(q, int) for q in seqs):
            return ("seq", max(seqs))
        return ("count", len(records))

    def _fresh(self, records: list[Any]) -> list[Any]:
        kind, at = self._seen_records if isinstance(self._seen_records, tuple) else ("count", 0)
        seqs = [getattr(r, "seq", None) for r in records]
        if kind == "seq" and all(isinstance(q, int) for q in seqs):
            return [r for r, q in zip(records, seqs, strict=True) if q > at]
        return records[at:] if kind == "count" else records

    def _linked(self) -> float:
        """Seconds of the linked records' compiles since the last call (0 when none are linked)."""
        if self._records is None:
            return 0.0
        records = list(self._records())
        fresh = self._fresh(records)
        if records:
            self._seen_records = self._mark(records)
        return float(sum(getattr(r, "total_s", 0.0) or 0.0 for r in fresh))

    def observe_compile(self, shape: Any, length: int, seconds: float) -> None:
        """A new shape's compile, timed by JAX's compile events (its batch was not waited for,
        so its step is not known from it); linked records, where given, time it instead."""
        linked = self._linked()
        self.compiles[shape] = linked if self._records is not None else seconds
        self.first[shape] = (length, self.compiles[shape])
        if self._records is None:
            self.by_events.add(shape)

    def mark(self) -> dict[str, Any]:
        """What :meth:`observe`, :meth:`observe_compile` and :meth:`forget_event_compiles` change,
        as it stands: :meth:`at` gives the fields as they were here, :meth:`rewind` goes back."""
        return {"first": dict(self.first), "compiles": dict(self.compiles), "by_events": set(self.by_events),
                "steps": {k: (v, len(v)) for k, v in self.steps.items()}, "_seen_records": self._seen_records}

    def at(self, mark: dict[str, Any]) -> dict[str, Any]:
        """The fields :meth:`mark` covers, as they were at ``mark`` (copies: the model is not changed)."""
        steps = {k: v[:n] for k, (v, n) in mark["steps"].items()}  # a shape's steps are only appended to
        return {**mark, "first": dict(mark["first"]), "compiles": dict(mark["compiles"]),
                "by_events": set(mark["by_events"]), "steps": steps}

    def rewind(self, mark: dict[str, Any]) -> None:
        """Back to ``mark`` (:meth:`mark`)."""
        vars(self).update(self.at(mark))

    def forget_event_compiles(self) -> None:
        """Drop what was measured of the shapes whose compile JAX's events timed: the steps
        turned out to run on another thread than the one asking for batches (a prefetching
        thread), so their compiles read ~0 s and their waits timed the queue. Those shapes'
        next batches are charged afresh, by the time between batches (a blind estimate)."""
        for shape in self.by_events:
            self.compiles.pop(shape, None)
            self.first.pop(shape, None)
            self.steps.pop(shape, None)
        self.by_events.clear()

    def observe(self, shape: Any, length: int, seconds: float, new: bool) -> str:
        """Attribute ``seconds`` (yield to next request) of a batch of ``shape``; returns its kind."""
        linked = self._linked()
        if new:
            self.first[shape] = (length, seconds)
            if self._records is not None:
                self.compiles[shape] = linked
                self.steps.setdefault(shape, []).append(max(seconds - linked, 0.0))
            return "compile"
        self.steps.setdefault(shape, []).append(max(seconds - linked, 0.0))
        return "step"

    # -- estimates
    def step_points(self) -> tuple[np.ndarray, np.ndarray]:
        """(length, step seconds) per shape: the lower median of its steps (of two, the shorter: a
        stall only lengthens a step). A shape's first batch is a step only when linked records give
        its compile exactly; else a shape counts from its second batch (a first batch less an
        estimated compile is mostly the estimate's error)."""
        x, y, _ = CostModel._table(self)
        return x, y

    def step_counts(self) -> np.ndarray:
        """How many steps each of :meth:`step_points`' points rests on (in their order)."""
        return CostModel._table(self)[2]

    def _table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pts = sorted((self.first[s][0], _lower_median(v), len(v)) for s, v in self.steps.items()
                     if v and s in self.first)
        return (np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float),
                np.array([p[2] for p in pts], np.int64))

    def step_model(self) -> tuple[float, float, float] | None:
        """Non-negative (a, beta, gamma) of g(b) = a + beta*b + gamma*b**2, or None if unknown.

        One measured shape: proportional to the length (g = beta*b). More: the non-negative
        least-squares fit over the subsets of terms, preferring fewer terms on a near tie; with
        :data:`LENGTHS_TO_FIT` lengths or more measured by two steps each, over those alone.
        """
        x, y = CostModel.step_points(self)  # this model's own points (agreed costs answer with others)
        if not x.size:
            return self.prior_step
        settled = CostModel.step_counts(self) >= STEPS_TO_SETTLE
        if settled.sum() >= LENGTHS_TO_FIT:  # a point of one step (it may hold a stall) waits for its second
            x, y = x[settled], y[settled]
        if self.prior_step is not None and x.size < 3:
            # too few lengths to fit a shape: keep the earlier run's shape, scaled to this run
            a, beta, gamma = self.prior_step
            pred = a + beta * x + gamma * x * x
            if float(np.dot(pred, pred)) > 0:
                k = max(float(np.dot(pred, y) / np.dot(pred, pred)), 0.0)
                return (a * k, beta * k, gamma * k)
        if x.size == 1:
            return (0.0, float(y[0] / max(x[0], 1.0)), 0.0)
        scale = float(np.abs(y).max()) or 1.0
        best: tuple[float, tuple[float, float, float]] | None = None
        for subset in _SUBSETS:
            if len(subset) > x.size:
                continue
            design = np.stack([x ** p for p in subset], axis=1)
            coef, *_ = np.linalg.lstsq(design, y, rcond=None)
            if (coef < 0).any():
                continue
            resid = float(np.sqrt(np.mean((design @ coef - y) ** 2))) / scale
            params = [0.0, 0.0, 0.0]
            for p, c in zip(subset, coef, strict=True):
                params[p] = float(c)
            if best is None or resid < best[0] - 0.02:
                best = (resid, (params[0], params[1], params[2]))
        return best[1] if best else (0.0, float(y.mean() / max(x.mean(), 1.0)), 0.0)

    def step_seconds(self, lengths: np.ndarray) -> np.ndarray | None:
        """Modelled seconds of one batch at each length (non-decreasing), or None if unknown."""
        return modelled_step_seconds(self.step_model(), lengths)

    def compile_seconds(self) -> float | None:
        """Mean measured compile seconds (exact with linked records), or None if unknown: a
        shape's first batch less the lower median of its later ones."""
        if self.compiles:
            return float(np.mean(list(self.compiles.values())))
        samples = [max(t - _lower_median(self.steps[s]), 0.0)
                   for s, (_, t) in self.first.items() if self.steps.get(s)]
        if samples:
            return float(np.mean(samples))
        return self.prior_compile

    def to_dict(self) -> dict[str, Any]:
        return {"compile_seconds": self.compile_seconds(), "step_model": self.step_model()}


def _lower_median(values: list[float]) -> float:
    """The lower of the middle two of an even count (of two steps, the shorter), else the median."""
    return float(np.sort(np.asarray(values, float))[(len(values) - 1) // 2])


def modelled_step_seconds(model: tuple[float, float, float] | None, lengths: np.ndarray) -> np.ndarray | None:
    """Seconds of one batch at each length under ``model`` (a + b*L + c*L^2, made non-decreasing),
    or None when there is no model."""
    if model is None:
        return None
    a, beta, gamma = model
    b = np.asarray(lengths, float)
    return np.maximum.accumulate(a + beta * b + gamma * b * b)


def model_seconds(model: Model, lengths: np.ndarray) -> np.ndarray:
    """Seconds of a batch at each length under ``model`` (made non-decreasing)."""
    b = np.asarray(lengths, float)
    return np.maximum.accumulate(sum((coef * b ** power for power, coef in model), np.zeros_like(b)))


#: The terms of the step models fitted through one point, and through two (pairs of terms).
_ONE = {"fixed": 0, "~L": 1, "~L^2": 2, "~L^3": 3}
_PAIRS = {"a+b*L": (0, 1), "a+c*L^2": (0, 2), "b*L+c*L^2": (1, 2), "a+d*L^3": (0, 3), "b*L+d*L^3": (1, 3),
          "c*L^2+d*L^3": (2, 3)}


def fits_through(x: np.ndarray, y: np.ndarray) -> dict[str, Model]:
    """The step models through one or two measured points ``(length, seconds of a batch)``, by
    name: from one point a fixed cost, one like L, like L^2 and like L^3 (attention whose L x L
    scores outgrow a cache: steeper than L^2); from two, each pair of those terms. A fit with a
    negative term is left out."""
    if x.size == 1:
        return {name: ((power, float(y[0] / x[0] ** power)),) for name, power in _ONE.items()}
    fits = {}
    for name, (p, q) in _PAIRS.items():
        design = np.array([[x[0] ** p, x[0] ** q], [x[1] ** p, x[1] ** q]], float)
        try:
            first, second = np.linalg.solve(design, y[:2])
        except np.linalg.LinAlgError:
            continue
        tiny = 1e-9 * float(np.abs(y[:2]).max())  # a term that is 0 up to rounding is 0
        if min(first * x[1] ** p, second * x[1] ** q) >= -tiny:
            fits[name] = ((p, max(float(first), 0.0)), (q, max(float(second), 0.0)))
    return fits
