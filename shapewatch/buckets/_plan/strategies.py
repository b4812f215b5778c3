"""Bucketing strategies over aggregated candidate lengths (private).

Every strategy receives the same :class:`Candidates` (distinct lengths already
clipped to ``max_length``, raised to ``min_length`` and rounded up to
``multiple_of``) and returns ascending boundaries, the last of which covers the
largest candidate and none of which is an empty bucket.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._checks import fail, round_up
from .dp_at_most_k import backtrack, optimal_layers

__all__ = ["Candidates", "STRATEGIES", "boundaries_for", "cost_vector"]

STRATEGIES = ("optimal", "pow2", "quantile", "equal_volume", "multiple")


@dataclass(frozen=True)
class Candidates:
    """Distinct rounded lengths ``values`` with example ``counts`` and unpadded ``volume``."""

    values: np.ndarray  # int64, ascending, distinct
    counts: np.ndarray  # int64 > 0
    volume: np.ndarray  # float64: sum of the (clipped) original lengths per candidate
    multiple_of: int
    max_length: int | None


def cost_vector(cost: str | Callable[[int], float], values: np.ndarray) -> np.ndarray:
    """Per-example cost of padding to each candidate; validates a callable cost."""
    if cost == "linear":
        return values.astype(np.float64)
    if cost == "quadratic":
        return values.astype(np.float64) ** 2
    out = np.empty(values.size, dtype=np.float64)
    for i, v in enumerate(values.tolist()):
        try:
            c = float(cost(v))
        except (TypeError, ValueError) as exc:
            raise fail(f"cost({v}) did not return a float: {exc}") from None
        if not np.isfinite(c):
            raise fail(f"cost({v}) returned {c}; expected a finite float")
        out[i] = c
    drops = np.flatnonzero(np.diff(out) < 0)
    if drops.size:
        i = int(drops[0])
        raise fail(
            f"cost must be non-decreasing in the length; got cost({values[i]})={out[i]:g} > "
            f"cost({values[i + 1]})={out[i + 1]:g}"
        )
    return out


def _at_fractions(cum: np.ndarray, k: int) -> np.ndarray:
    """Indices where the cumulative ``cum`` first reaches i/k of its total, i = 1..k."""
    targets = cum[-1] * np.arange(1, k) / k
    idx = np.searchsorted(cum, targets * (1 - 1e-12), side="left")
    return np.unique(np.append(np.minimum(idx, cum.size - 1), cum.size - 1))


def _pow2(cands: Candidates, k: int) -> np.ndarray:
    v = np.maximum(cands.values, 1)
    p2 = np.left_shift(1, np.ceil(np.log2(v)).astype(np.int64))
    p2 = np.where(p2 < v, p2 * 2, p2)  # guard float rounding of log2
    bounds = round_up(p2, cands.multiple_of)
    if cands.max_length is not None:
        bounds = np.minimum(bounds, cands.max_length)
    bounds = np.unique(bounds)
    return bounds[-k:]  # too many: drop the smallest (they merge upwards)


def optimal_all(cands: Candidates, cost: np.ndarray, max_k: int) -> list[np.ndarray]:
    """Optimal boundaries for every k in ``1..max_k`` (one DP run); at most one list per
    candidate: more buckets than distinct lengths cannot be used."""
    max_k = min(max_k, cands.values.size)
    _, opts = optimal_layers(cost, cands.counts, max_k)
    return [cands.values[backtrack(opts, k)] for k in range(1, max_k + 1)]


def boundaries_for(strategy: str, cands: Candidates, cost: np.ndarray, k: int) -> np.ndarray:
    """Boundaries of ``strategy`` with at most ``k`` buckets (``multiple`` ignores ``k``).

    The work is bounded by the candidates (distinct rounded lengths), whatever ``k``: more
    buckets than candidates is one bucket per candidate.
    """
    k = min(k, cands.values.size)
    if strategy == "optimal":
        if k == cands.values.size and np.all(np.diff(cost) > 0):
            return cands.values  # a bucket per candidate pads nothing; merging any costs more
        return optimal_all(cands, cost, k)[-1]
    if strategy == "multiple":
        return cands.values
    if strategy == "pow2":
        return _pow2(cands, k)
    if strategy == "quantile":
        return cands.values[_at_fractions(np.cumsum(cands.counts), k)]
    if strategy == "equal_volume":
        return cands.values[_at_fractions(np.cumsum(cands.volume), k)]
    raise AssertionError(strategy)  # validated by the caller
