"""The exact DP behind auto re-planning: the cheapest plan within a cap on new shapes (the shapes
compiled already take nothing from it) is the brute force's, with the layers that cannot win
left out; in a job of several processes each group also costs its processes' uneven counts."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from shapewatch.buckets._online.dp_within_cap import MAX_CANDIDATES, cheapest_within


def cost(idx, f, w, e, spread=0.0, held=None) -> float:
    total, start, whole = 0.0, 0, w.sum()
    for i in idx:
        count = w[start : i + 1].sum()
        var = count * (1 - count / whole)
        if held is not None:  # each bucket of the plan in use: kappa x (the group's weight of it)^2, less lam S^2
            bucket, kappa, lam = held
            var += sum(k * w[start : i + 1][bucket[start : i + 1] == b].sum() ** 2 for b, k in enumerate(kappa))
            var -= lam * count**2
        total += f[i] * count + e[i] + spread * f[i] * math.sqrt(max(var, 0.0))
        start = i + 1
    return total


def brute(f, w, e, free, new_at_most, spread=0.0, held=None):
    """The least cost of every plan ending at the last candidate with at most ``new_at_most``
    boundaries not free (inf where there is none)."""
    n = f.size
    best = np.inf
    for k in range(1, n + 1):
        for rest in itertools.combinations(range(n - 1), k - 1):
            plan = [*rest, n - 1]
            if sum(not free[i] for i in plan) <= new_at_most:
                best = min(best, cost(plan, f, w, e, spread, held))
    return best


@pytest.mark.parametrize("seed", range(120))
def test_the_plan_is_the_cheapest_of_all_within_the_cap(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 10))
    f = np.sort(rng.random(n)) if seed % 3 else rng.random(n)  # not always non-decreasing
    w = rng.random(n) * rng.integers(1, 100)
    free = rng.random(n) < rng.choice([0.0, 0.3, 0.7])
    e = np.where(free, 0.0, rng.random(n) * rng.choice([0.01, 1.0, 50.0]))
    if seed % 4 == 0:  # a free boundary may still cost something (a partial last batch)
        e = e + 0.01 * rng.random(n)
    new_at_most = int(rng.integers(0, n + 1))
    spread = 0.0 if seed % 2 else float(rng.choice([0.56, 1.03, 3.0]))  # a job of several processes
    held = None
    if seed % 4 == 2:  # a re-plan late in a job: the counts read so far, held under the plan in use
        bucket = np.sort(rng.integers(0, 4, n))  # each candidate's bucket of the plan in use (in order)
        share = np.bincount(bucket, weights=w, minlength=4) / max(w.sum(), 1e-9)  # as the planner's kappa
        lam = float(rng.choice([0.0, 1.0, 30.0])) / max(w.sum(), 1e-9)
        held = (bucket, np.where(share > 0, lam / np.maximum(share, 1e-12), 0.0), lam)
    want = brute(f, w, e, free, new_at_most, spread, held)
    got = cheapest_within(f, w, e, free, new_at_most, spread, held)
    if not np.isfinite(want):
        assert got is None
        return
    assert got is not None
    assert got[-1] == n - 1 and list(got) == sorted(set(got))
    assert sum(not free[i] for i in got) <= new_at_most
    assert cost(got, f, w, e, spread, held) == pytest.approx(want)


def test_compiled_shapes_are_kept_where_the_cap_leaves_one_new():
    # the case a one-bucket plan was taken in: shapes 24 and 512 compiled, a cap of 3, a new top;
    # the cheapest plan of 3 boundaries needs new shapes, but 24 and 512 with the top fit
    values = np.array([8, 16, 24, 300, 512, 5000])
    w = np.array([500.0, 500.0, 500.0, 3.0, 2.0, 1.0])
    f = (values / 5000.0) ** 3
    free = np.isin(values, [24, 512])
    e = np.where(free, 0.0, 1.0)
    got = cheapest_within(f, w, e, free, 1)
    assert values[got].tolist() == [24, 512, 5000]
    assert cheapest_within(f, w, e, free, -1) is None
    assert cheapest_within(f, w, e, free, 0) is None  # the top is new: no plan without a new shape


def test_a_costly_compile_stops_the_layers_early_and_many_candidates_keep_the_compiled():
    n = 3 * MAX_CANDIDATES
    f = np.linspace(1.0, 2.0, n)
    w = np.ones(n)
    assert len(cheapest_within(f, w, np.full(n, 1e6), np.zeros(n, bool), 15)) == 1  # one more never pays
    free = np.zeros(n, bool)
    free[[7, 1001]] = True  # between the thinned grid's points: kept as candidates
    got = cheapest_within(f, w, np.where(free, 0.0, 1e6), free, 1)
    assert got.tolist() == [7, 1001, n - 1]
