"""At most k buckets with the least padding cost: the exact DP behind ``propose``'s
``"optimal"`` strategy, layered with vectorised divide-and-conquer (private).

Problem: ``n`` distinct candidate lengths ``c_1 < ... < c_n`` with example counts
``w_i`` and a non-decreasing per-example cost ``f_i = cost(c_i)``. Split them into
at most ``k`` contiguous groups; a group ``(j, i]`` pads to ``c_i`` and costs
``f_i * (W_i - W_j)`` (``W`` = prefix sums of ``w``). Then

    F_k(i) = min_{0 <= j <= i} F_{k-1}(j) + f_i * (W_i - W_j)

(``j == i`` is an empty group, so ``F_k`` is "at most k buckets"). For
``a < b <= c < d`` the group cost ``C`` satisfies
``C(a,c) + C(b,d) - C(a,d) - C(b,c) = (f_c - f_d)(W_b - W_a) <= 0`` (quadrangle
inequality), so the leftmost optimal split ``opt_k(i)`` is non-decreasing in
``i`` and divide-and-conquer optimisation is exact. Each recursion *level*
(all segments at the same depth) is evaluated as one ragged numpy computation,
so a layer costs ``O(n log n)`` work in ``O(log n)`` numpy passes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["optimal_layers", "backtrack"]


def _layer(prev: np.ndarray, f: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One DP layer: returns (F_k, opt_k), both of length n + 1."""
    n = prev.size - 1
    cur = np.empty(n + 1, dtype=np.float64)
    opt = np.zeros(n + 1, dtype=np.int64)
    cur[0] = 0.0
    lo = np.array([1], dtype=np.int64)
    hi = np.array([n], dtype=np.int64)
    olo = np.array([0], dtype=np.int64)
    ohi = np.array([n], dtype=np.int64)
    while lo.size:
        mid = (lo + hi) >> 1
        last = np.minimum(mid, ohi)
        sizes = last - olo + 1
        starts = np.cumsum(sizes) - sizes
        j = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(starts - olo, sizes)
        mids = np.repeat(mid, sizes)
        vals = prev[j] + f[mids] * (w[mids] - w[j])
        best_val = np.minimum.reduceat(vals, starts)
        hits = np.flatnonzero(vals == np.repeat(best_val, sizes))
        best = j[hits[np.searchsorted(hits, starts)]]  # leftmost minimiser per segment
        cur[mid] = best_val
        opt[mid] = best
        left = mid > lo
        right = mid < hi
        lo = np.concatenate((lo[left], mid[right] + 1))
        hi = np.concatenate((mid[left] - 1, hi[right]))
        olo = np.concatenate((olo[left], best[right]))
        ohi = np.concatenate((best[left], ohi[right]))
    return cur, opt


def optimal_layers(
    cost: np.ndarray, weights: np.ndarray, max_k: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Optimal total cost for every ``k`` in ``1..max_k`` and the split tables.

    Args:
        cost: per-example cost of each candidate boundary, ascending candidates.
        weights: number of examples at each candidate (all > 0).
        max_k: largest number of buckets to solve for.

    Returns:
        ``(totals, opts)``: ``totals[k-1]`` is the optimal cost with at most ``k``
        buckets; ``opts[k-1]`` is the split table used by :func:`backtrack`.
    """
    n = cost.size
    f = np.concatenate(([0.0], np.asarray(cost, dtype=np.float64)))
    w = np.concatenate(([0.0], np.cumsum(weights, dtype=np.float64)))
    prev = f * w  # k = 1: a single bucket padding everything to c_i
    opts = [np.zeros(n + 1, dtype=np.int64)]
    totals = [prev[n]]
    for _ in range(1, min(max_k, n)):
        prev, opt = _layer(prev, f, w)
        opts.append(opt)
        totals.append(prev[n])
    return np.asarray(totals), opts


def backtrack(opts: list[np.ndarray], k: int) -> list[int]:
    """Indices (0-based, ascending) of the candidates chosen as boundaries for ``k``."""
    k = min(k, len(opts))
    i = opts[0].size - 1
    chosen: list[int] = []
    for layer in range(k - 1, -1, -1):
        if i == 0:
            break
        j = int(opts[layer][i])
        if j < i:
            chosen.append(i - 1)
            i = j
    return chosen[::-1]
