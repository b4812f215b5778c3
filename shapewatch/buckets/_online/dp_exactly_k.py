"""Exactly k buckets with a per-boundary (compile) cost: the exact DP behind the
automatic re-planning of ``_online.auto_planner`` (private).

Candidates ``c_1 < ... < c_n`` with weights ``w``, per-unit cost ``f`` (non-decreasing)
and a per-boundary cost ``e`` (a compile, unless that shape is compiled already). A group
``(j, i]`` pads to ``c_i`` and costs ``f_i * (W_i - W_j) + e_i``; the last boundary is
always ``c_n``. ``O(k n^2)`` in numpy, on at most ``MAX_CANDIDATES`` candidates (more are
merged upward into a quantile grid first by the caller's data: here, by the largest
values of each group).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["exact_k_plans", "MAX_CANDIDATES"]

MAX_CANDIDATES = 1024


def exact_k_plans(f: np.ndarray, w: np.ndarray, e: np.ndarray, max_k: int,
                  accept: Callable[[np.ndarray], bool] | None = None) -> list[np.ndarray]:
    """For k = 1..max_k, the indices of the cheapest plan with exactly k boundaries (ending at n-1),
    up to the first k that cannot beat a plan with fewer (so fewer than max_k may come back).

    ``accept``: whether the caller can use a plan (e.g. within a cap on shapes); only a plan it
    accepts stops the layers after it (one it rejects cannot stand for the plans it would beat).

    When there are more than ``MAX_CANDIDATES`` candidates, boundaries are chosen among an
    evenly spaced (by weight) subset that always holds the last one.
    """
    n = f.size
    keep = np.arange(n)
    if n > MAX_CANDIDATES:
        cum = np.cumsum(w) / w.sum()
        keep = np.unique(np.append(np.searchsorted(cum, np.linspace(0, 1, MAX_CANDIDATES)[1:-1]),
                                   n - 1))
    W = np.concatenate(([0.0], np.cumsum(w)))  # W[i]: weight of candidates < i
    m = keep.size
    fk, ek, Wk = f[keep], e[keep], W[keep + 1]  # group ending at keep[t] covers up to it
    Wprev = np.concatenate(([0.0], Wk[:-1]))
    # k = 1: one group from the start to keep[t]
    F = fk * Wk + ek
    back: list[np.ndarray] = [np.full(m, -1)]
    layers = [F]
    upper = np.tril(np.ones((m, m), bool), -1)  # j < i
    # no plan of k boundaries costs less than every unit at the cheapest length at or above its
    # own plus the k least per-boundary costs; once that bound exceeds the best total found, no
    # plan with k or more boundaries can be cheaper (e >= 0): the layers after it are not computed
    bound = float(np.dot(np.minimum.accumulate(f[::-1])[::-1], w)) + np.cumsum(np.sort(ek))

    def plan(k: int) -> np.ndarray:  # the cheapest plan of k boundaries, from the back-pointers
        idx, i = [], m - 1
        for layer in range(k - 1, -1, -1):
            idx.append(keep[i])
            i = int(back[layer][i])
        return np.array(idx[::-1], dtype=np.int64)

    def ok(k: int) -> bool:
        return accept is None or bool(accept(plan(k)))

    best = float(F[m - 1]) if ok(1) else np.inf
    for k in range(2, min(max_k, m) + 1):
        if bound[k - 1] > best:
            break
        # cand[i, j] = F[j] + f_i * (Wk_i - Wk_j) + e_i   (group (keep[j], keep[i]])
        cand = F[None, :] + fk[:, None] * (Wk[:, None] - Wk[None, :]) + ek[:, None]
        cand = np.where(upper, cand, np.inf)
        arg = np.argmin(cand, axis=1)
        F = cand[np.arange(m), arg]
        back.append(arg)
        layers.append(F)
        if float(F[m - 1]) < best and np.isfinite(F[m - 1]) and ok(k):
            best = float(F[m - 1])
    del Wprev
    plans = []
    for k in range(1, len(layers) + 1):
        if not np.isfinite(layers[k - 1][m - 1]):
            break
        plans.append(plan(k))
    return plans
