"""``propose``: turn observed lengths into a :class:`Buckets` plan."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .._checks import (
    as_lengths,
    check_choice,
    check_int,
    check_multiple_of,
    check_number,
    fail,
    round_up,
)
from .._online.auto_planner import start_plan
from .buckets import COSTS, OVERFLOWS, Buckets
from .length_observer import LengthObserver, histogram
from .prior import auto_numbers, load_prior
from .strategies import STRATEGIES, Candidates, boundaries_for, cost_vector, optimal_all

__all__ = ["propose", "AUTO_MAX_BUCKETS"]

AUTO_MAX_BUCKETS = 32


def _histogram_of(data: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(data, LengthObserver):
        if not data.distinct:
            raise fail("the LengthObserver is empty; call update() before propose()")
        return data.lengths, data.counts
    return histogram(as_lengths(data))


def _candidates(
    values: np.ndarray,
    counts: np.ndarray,
    multiple_of: int,
    min_length: int,
    max_length: int | None,
) -> Candidates:
    clipped = values if max_length is None else np.minimum(values, max_length)
    cand = round_up(np.maximum(clipped, min_length), multiple_of)
    starts = np.flatnonzero(np.diff(cand, prepend=-1))  # values are sorted: groups are contiguous
    return Candidates(
        values=cand[starts],
        counts=np.add.reduceat(counts, starts),
        volume=np.add.reduceat(clipped.astype(np.float64) * counts, starts),
        multiple_of=multiple_of,
        max_length=max_length,
    )


def _plan_cost(bounds: np.ndarray, cands: Candidates, cost: Any) -> tuple[float, float]:
    """(total cost, padding fraction in elements) of ``bounds`` over the candidates."""
    idx = np.searchsorted(bounds, cands.values, side="left")
    padded = bounds[idx]
    per = cost_vector(cost, bounds)[idx]
    total_elems = float(np.dot(padded.astype(np.float64), cands.counts))
    waste = 1.0 - float(cands.volume.sum()) / total_elems if total_elems else 0.0
    return float(np.dot(per, cands.counts)), waste


def propose(
    lengths_or_observer: Any,
    max_buckets: int | str = 8,
    *,
    multiple_of: int = 1,
    min_length: int | None = None,
    max_length: int | None = None,
    cost: str | Callable[[int], float] = "linear",
    strategy: str = "optimal",
    overflow: str = "error",
    compile_seconds: float | None = None,
    steps: int | None = None,
    step_seconds: float | None = None,
) -> Buckets:
    """Propose bucket boundaries for observed lengths.

    Args:
        lengths_or_observer: lengths (int, sequence, array), a :class:`LengthObserver`, or a
            saved one: a loader's ``report()`` or ``LengthObserver.to_dict()`` (or a JSON
            file's path). With ``"auto"`` and a report that measured costs (and no cost
            numbers, ``cost``, ``strategy``, ``min_length`` or ``max_length`` given): the plan
            a loader given that report as ``prior=`` starts on (its measured step model and
            compile seconds over the report's examples); else the report's numbers fill in
            the cost model below.
        max_buckets: most buckets (= compiles), or ``"auto"`` to pick the count in
            ``1..32`` minimising ``k * compile_seconds + steps * step_seconds *
            cost_k / cost_1`` (``step_seconds``: one step when everything pads to
            the largest length; step time is proportional to the padded cost).
        multiple_of: every boundary is a multiple of this (e.g. 8 for tensor cores).
        min_length: smallest boundary (shorter lengths pad up to it); default 1.
        max_length: largest boundary allowed; must be a multiple of ``multiple_of``.
            Longer observed lengths follow ``overflow`` (planned as ``max_length``).
        cost: per-example cost of padding to length ``b``: ``"linear"`` (``b``),
            ``"quadratic"`` (``b**2``, e.g. attention) or a non-decreasing callable.
        strategy: ``"optimal"`` (exact minimum total cost), or the baselines
            ``"pow2"``, ``"quantile"``, ``"equal_volume"``, ``"multiple"``
            (one bucket per distinct rounded length; ignores ``max_buckets``).
        overflow: lengths above ``max_length``/the largest boundary: ``"error"``,
            ``"truncate"`` or ``"extend"``.
        compile_seconds, steps, step_seconds: the cost model for ``"auto"``.

    Returns:
        A :class:`Buckets`; :meth:`Buckets.explain` summarises it.

    Raises:
        ValueError: on any invalid argument (message starts with ``[shapewatch]``).

    Example:
        >>> plan = propose([3, 5, 8, 9, 30, 31], max_buckets=2)
        >>> plan.boundaries
        (9, 31)
        >>> propose([3, 5, 8, 9, 30, 31], max_buckets=2, multiple_of=8).boundaries
        (8, 32)
    """
    auto = max_buckets == "auto" if isinstance(max_buckets, str) else False
    saved, costs = False, {}
    if isinstance(lengths_or_observer, dict | str | os.PathLike):  # a saved report or observer
        saved = True
        lengths_or_observer, costs = load_prior(lengths_or_observer)
        measured = auto and strategy == "optimal" and cost == "linear" and min_length is None and (
            max_length is None) and all(v is None for v in (compile_seconds, steps, step_seconds))
        if measured and lengths_or_observer.total:
            multiple_of = check_multiple_of(multiple_of)
            plan = start_plan(lengths_or_observer, costs, multiple_of)
            if plan is not None:  # the plan a loader given this report as prior= starts on
                values, counts = _histogram_of(lengths_or_observer)
                cands = _candidates(values, counts, multiple_of, 1, None)
                c, w = _plan_cost(np.array(plan.boundaries), cands, "linear")
                stats = {**plan.stats, "n": int(counts.sum()), "distinct": int(values.size),
                         "cost": c, "waste": w}
                return dataclasses.replace(plan, overflow=check_choice("overflow", overflow, OVERFLOWS),
                                           stats=stats)
        if auto and costs.get("step_model") and lengths_or_observer.total:
            filled = auto_numbers(lengths_or_observer, costs, compile_seconds, steps, step_seconds)
            compile_seconds, steps, step_seconds = filled["compile_seconds"], filled["steps"], filled["step_seconds"]
    if not auto:
        if isinstance(max_buckets, str):
            raise fail(f"max_buckets must be an int >= 1 or 'auto'; got {max_buckets!r}")
        check_int("max_buckets", max_buckets, 1)
    multiple_of = check_multiple_of(multiple_of)
    min_length = 1 if min_length is None else check_int("min_length", min_length, 1)
    if max_length is not None:
        max_length = check_int("max_length", max_length, 1)
        if max_length < min_length:
            raise fail(f"max_length={max_length} is below min_length={min_length}")
        if max_length % multiple_of:
            raise fail(f"max_length={max_length} is not a multiple of multiple_of={multiple_of}")
    if not callable(cost) and (not isinstance(cost, str) or cost not in COSTS):
        raise fail(f"unknown cost {cost!r}; expected one of 'linear', 'quadratic' or a callable")
    check_choice("strategy", strategy, STRATEGIES)
    check_choice("overflow", overflow, OVERFLOWS)
    given = {"compile_seconds": compile_seconds, "steps": steps, "step_seconds": step_seconds}
    for name, val in given.items():
        if val is not None:
            check_number(name, val)
    if auto and any(v is None for v in given.values()):
        missing = ", ".join(k for k, v in given.items() if v is None)
        none = (" (the saved report measured no costs: its loader had a fixed plan)"
                if saved and not costs.get("step_model") else "")
        raise fail(f"max_buckets='auto' needs the cost model{none}; missing {missing}")

    values, counts = _histogram_of(lengths_or_observer)
    if max_length is not None and values[-1] > max_length and overflow == "error":
        raise fail(
            f"length {int(values[-1])} is above max_length={max_length} "
            "(overflow='error'; use overflow='truncate' or 'extend', or raise max_length)"
        )
    cands = _candidates(values, counts, multiple_of, min_length, max_length)
    cvec = cost_vector(cost, cands.values)
    stats: dict[str, Any] = {"n": int(counts.sum()), "distinct": int(values.size)}

    if auto:
        ks = range(1, AUTO_MAX_BUCKETS + 1)
        if strategy == "optimal":
            plans = optimal_all(cands, cvec, min(AUTO_MAX_BUCKETS, cands.values.size))
        else:
            plans = [boundaries_for(strategy, cands, cvec, k) for k in ks]
        base_cost = float(cvec[-1] * cands.counts.sum())  # everything padded to the largest
        rows: dict[int, tuple[float, float, float, np.ndarray]] = {}
        for bounds in plans:
            c, w = _plan_cost(bounds, cands, cost)
            ratio = c / base_cost if base_cost else 1.0
            total = bounds.size * compile_seconds + steps * step_seconds * ratio
            if bounds.size not in rows or total < rows[bounds.size][2]:
                rows[bounds.size] = (c, w, total, bounds)
        k_best = min(rows, key=lambda k: (rows[k][2], k))
        bounds = rows[k_best][3]
        stats["auto"] = {
            "compile_seconds": compile_seconds,
            "steps": steps,
            "step_seconds": step_seconds,
            "rows": {k: (r[0], r[1], r[2]) for k, r in sorted(rows.items())},
        }
    else:
        bounds = boundaries_for(strategy, cands, cvec, int(max_buckets))
    stats["cost"], stats["waste"] = _plan_cost(bounds, cands, cost)
    return Buckets(
        boundaries=tuple(int(b) for b in bounds),
        strategy=strategy,
        cost=cost,
        multiple_of=multiple_of,
        overflow=overflow,
        stats=stats,
    )
