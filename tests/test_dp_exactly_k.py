"""The exact DP behind auto re-planning: its best plan is the brute force's, with the layers
that cannot win left out."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shapewatch.buckets._online.dp_exactly_k import exact_k_plans


def cost(idx, f, w, e) -> float:
    total, start = 0.0, 0
    for i in idx:
        total += f[i] * w[start : i + 1].sum() + e[i]
        start = i + 1
    return total


def brute(f, w, e, max_k):
    n = f.size
    best = np.inf
    for k in range(1, max_k + 1):
        for rest in itertools.combinations(range(n - 1), k - 1):
            best = min(best, cost([*rest, n - 1], f, w, e))
    return best


@pytest.mark.parametrize("seed", range(60))
def test_the_best_plan_returned_is_the_cheapest_of_all(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 10))
    f = np.sort(rng.random(n)) if seed % 3 else rng.random(n)  # not always non-decreasing
    w = rng.random(n) * rng.integers(1, 100)
    e = np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * rng.choice([0.01, 1.0, 50.0]))
    max_k = int(rng.integers(1, n + 1))
    plans = exact_k_plans(f, w, e, max_k)
    assert 1 <= len(plans) <= max_k
    for k, p in enumerate(plans, 1):
        assert len(p) == k and p[-1] == n - 1 and list(p) == sorted(set(p))
    got = min(cost(p, f, w, e) for p in plans)
    assert got == pytest.approx(brute(f, w, e, max_k))


def test_a_costly_compile_stops_the_layers_early():
    f = np.linspace(1.0, 2.0, 50)
    w = np.ones(50)
    assert len(exact_k_plans(f, w, np.full(50, 1e6), 15)) == 1  # one more bucket never pays
    assert len(exact_k_plans(f, w, np.zeros(50), 15)) == 15  # free boundaries: every k computed
