"""The cheapest bucket plan within a cap on shapes, some compiled already: the exact DP behind
the automatic re-planning of ``_online.auto_planner`` (private).

Candidates ``c_1 < ... < c_n`` with weights ``w``, per-unit cost ``f`` and a per-boundary cost
``e`` (a compile, unless that shape is compiled already). A group ``(j, i]`` pads to ``c_i`` and
costs ``f_i * (W_i - W_j) + e_i``; the last boundary is always ``c_n``. The cap counts the shapes
compiled and the plan's new ones, so a compiled candidate (``free``) takes nothing from it: the
DP's layers are the number of new boundaries (``r``), a compiled boundary stays in its layer.
With ``spread`` (a job of several processes, see ``_online.auto_planner.spread_of``), a group
also costs ``spread * f_i * sqrt(S (1 - S / T))`` (``S = W_i - W_j``, ``T`` all the weight): the
steps the processes' uneven counts of the group add (each process's count of it varies as a
binomial's, the job takes the most of them). With ``held`` too (a re-plan in a job, its
examples read so far held under the plan in use: see ``AutoPlanner._held_under``), the count's
variance also holds ``sum_B kappa_B * M_B^2 - lam * S^2``, ``M_B`` the group's weight among the
candidates of the plan in use's bucket ``B``: the processes' counts of what they read so far differ
as much (a multinomial's), and the job takes the most of those too (the lockstep only took the
full batches every process held).
``O(R n^2)`` in numpy for ``R`` new boundaries at most, on at most ``MAX_CANDIDATES`` candidates
(more are thinned first to an evenly spaced subset by weight that keeps the last and the
compiled ones).
"""

from __future__ import annotations

import numpy as np

__all__ = ["cheapest_within", "held_variance", "uneven", "MAX_CANDIDATES"]

MAX_CANDIDATES = 1024


def uneven(spread: float, f: np.ndarray, weight: np.ndarray, total: float,
           held: np.ndarray | float = 0.0) -> np.ndarray:
    """What groups of ``weight`` (of ``total``) padded at per-unit costs ``f`` cost more in a job
    whose processes' counts of a group vary as a binomial's: ``spread`` standard deviations of
    the count (see ``_online.auto_planner.spread_of``), whose variance also holds ``held`` (the
    processes' counts of the examples read so far: see ``held_variance``). Zeros with ``spread``
    0 (one process)."""
    weight = np.asarray(weight, float)
    if not spread or total <= 0:
        return np.zeros(np.broadcast(np.asarray(f), weight).shape)
    return spread * np.asarray(f) * np.sqrt(np.clip(weight * (1.0 - weight / total) + held, 0.0, None))


def held_variance(mass: np.ndarray, kappa: np.ndarray, lam: float) -> np.ndarray:
    """``sum_B kappa_B * mass[..., B]^2 - lam * (sum_B mass[..., B])^2``: the variance across
    processes of each group's count of the examples read so far (a multinomial's over the plan
    in use's buckets), ``mass[..., B]`` its weight among bucket ``B`` of the plan in use."""
    mass = np.asarray(mass, float)
    return mass ** 2 @ np.asarray(kappa, float) - lam * mass.sum(axis=-1) ** 2


def cheapest_within(f: np.ndarray, w: np.ndarray, e: np.ndarray, free: np.ndarray,
                    new_at_most: int, spread: float = 0.0,
                    held: tuple[np.ndarray, np.ndarray, float] | None = None) -> np.ndarray | None:
    """The indices of the cheapest plan (ending at ``n - 1``) with at most ``new_at_most``
    boundaries that are not ``free``, or None where there is none (``new_at_most < 0``, or no
    candidate). ``held``: ``(bucket, kappa, lam)``, each candidate's bucket of the plan in use
    (``0 .. len(kappa) - 1``), each bucket's ``kappa`` and ``lam`` (see the module's docstring).

    Layers that cannot win are not computed: no plan with ``r`` new boundaries costs less than
    every unit at the cheapest per-unit cost at or above its own plus the ``r`` least per-boundary
    costs of the new candidates.
    """
    n = f.size
    if new_at_most < 0 or n == 0:
        return None
    free = np.asarray(free, bool)
    keep = np.arange(n)
    if n > MAX_CANDIDATES:
        cum = np.cumsum(w) / w.sum()
        grid = np.searchsorted(cum, np.linspace(0, 1, MAX_CANDIDATES)[1:-1])
        keep = np.unique(np.concatenate((grid, np.flatnonzero(free), [n - 1])))
    W = np.concatenate(([0.0], np.cumsum(w)))  # W[i]: weight of candidates < i
    m = keep.size
    fk, ek, Wk, fr = f[keep], e[keep], W[keep + 1], free[keep]  # a group ending at keep[t] covers up to it
    total = float(W[-1])
    held_start, held_pair = 0.0, 0.0
    if spread and held is not None:  # each group's variance of the counts read so far (the plan in use's)
        bucket, kappa, lam = held
        kappa = np.asarray(kappa, float)
        M = np.zeros((n + 1, kappa.size))  # M[i, B]: weight of candidates < i in bucket B
        M[np.arange(1, n + 1), np.asarray(bucket)] = w
        Mk = np.cumsum(M, axis=0)[keep + 1]
        held_start = held_variance(Mk, kappa, lam)
        q = (Mk ** 2) @ kappa  # sum_B kappa_B (Mk[i] - Mk[j])^2, expanded: a product, not a loop over B
        held_pair = q[:, None] + q[None, :] - 2.0 * (Mk * kappa) @ Mk.T - lam * (Wk[:, None] - Wk[None, :]) ** 2
    start = fk * Wk + ek + uneven(spread, fk, Wk, total, held_start)  # one group from the first candidate to keep[t]
    upper = np.tril(np.ones((m, m), bool), -1)  # j < i
    pad = fk[:, None] * (Wk[:, None] - Wk[None, :])  # a group (j, i]'s padded units (its own cost adds ek[i])
    # and in a job, the steps its processes' uneven counts add (none in one process: no term at all)
    spreads = (uneven(spread, fk[:, None], np.maximum(Wk[:, None] - Wk[None, :], 0.0), total, held_pair)
               if spread else None)
    on_free = np.flatnonzero(fr)
    base = float(np.dot(np.minimum.accumulate(f[::-1])[::-1], w))
    least = np.concatenate(([0.0], np.cumsum(np.sort(ek[~fr]))))  # the r least new per-boundary costs
    layers: list[np.ndarray] = []
    backs: list[np.ndarray] = []
    best, best_r = np.inf, -1
    for r in range(min(new_at_most, int((~fr).sum())) + 1):
        if base + least[r] > best:
            break
        F = np.full(m, np.inf)
        back = np.full(m, -2)  # -1: from the start; -2: unreachable
        if r == 0:
            F[fr], back[fr] = start[fr], -1
        else:  # a new boundary at i, after any boundary j < i of the layer before (or the start)
            after = layers[-1][None, :] + pad + ek[:, None]
            cand = np.where(upper, after if spreads is None else after + spreads, np.inf)
            arg = np.argmin(cand, axis=1)
            val = cand[np.arange(m), arg]
            if r == 1:
                arg, val = np.where(start < val, -1, arg), np.minimum(start, val)
            new = ~fr
            F[new], back[new] = val[new], np.where(np.isfinite(val[new]), arg[new], -2)
        for i in on_free:  # a compiled boundary at i, after one j < i of the same layer (ascending)
            if i == 0:
                continue
            opts = F[:i] + pad[i, :i] + ek[i]
            if spreads is not None:
                opts = opts + spreads[i, :i]
            j = int(np.argmin(opts))
            if opts[j] < F[i]:
                F[i], back[i] = opts[j], j
        layers.append(F)
        backs.append(back)
        if F[m - 1] < best:
            best, best_r = float(F[m - 1]), r
    if best_r < 0:
        return None
    idx, i, r = [], m - 1, best_r
    while i >= 0:
        idx.append(int(keep[i]))
        j = int(backs[r][i])
        r -= 0 if fr[i] else 1
        i = j
    return np.array(idx[::-1], dtype=np.int64)
