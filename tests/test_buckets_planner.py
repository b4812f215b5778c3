"""propose(): the exact optimal plan, the baselines, and max_buckets='auto'."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapewatch.buckets import STRATEGIES, Buckets, LengthObserver, propose

COSTS = {
    "linear": lambda b: float(b),
    "quadratic": lambda b: float(b) ** 2,
}


def log_cost(b: int) -> float:
    return float(np.log1p(b)) + 0.01 * b


def total_cost(boundaries, lengths, cost) -> float:
    bounds = np.asarray(boundaries)
    padded = bounds[np.searchsorted(bounds, lengths)]
    return float(sum(cost(int(b)) for b in padded))


def brute_force(lengths, k, multiple_of, cost) -> float:
    cands = sorted({-(-max(length, 1) // multiple_of) * multiple_of for length in lengths})
    best = np.inf
    for r in range(min(k, len(cands))):
        for sub in itertools.combinations(cands[:-1], r):
            best = min(best, total_cost(list(sub) + [cands[-1]], lengths, cost))
    return best


small_inputs = st.tuples(
    st.lists(st.integers(0, 60), min_size=1, max_size=40).filter(lambda xs: len(set(xs)) <= 8),
    st.integers(1, 4),
    st.sampled_from([1, 1, 4, 8]),
    st.sampled_from(["linear", "quadratic", "callable"]),
)


@settings(max_examples=120, deadline=None)
@given(small_inputs)
def test_the_optimal_plan_costs_exactly_as_little_as_a_brute_force_search(case):
    lengths, k, multiple_of, cost_name = case
    cost_fn = log_cost if cost_name == "callable" else COSTS[cost_name]
    cost_arg = log_cost if cost_name == "callable" else cost_name
    plan = propose(lengths, k, multiple_of=multiple_of, cost=cost_arg)
    assert len(plan.boundaries) <= k
    assert all(b % multiple_of == 0 for b in plan.boundaries)
    assert plan.boundaries[-1] >= max(lengths)
    got = total_cost(plan.boundaries, lengths, cost_fn)
    assert got == pytest.approx(brute_force(lengths, k, multiple_of, cost_fn), rel=1e-9)
    used = set(plan.bucket_of(lengths).tolist())
    assert used == set(plan.boundaries), "every boundary is a length some bucket pads to"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 500), min_size=1, max_size=80), st.sampled_from(STRATEGIES))
def test_every_strategy_covers_the_longest_length_without_empty_buckets(lengths, strategy):
    plan = propose(lengths, 4, strategy=strategy, multiple_of=4, max_length=512)
    assert plan.boundaries[-1] >= max(lengths)
    assert plan.boundaries[-1] <= 512
    assert all(b % 4 == 0 for b in plan.boundaries)
    if strategy != "multiple":
        assert len(plan) <= 4
    assert plan.strategy == strategy
    optimal = propose(lengths, 4, multiple_of=4, max_length=512)
    if strategy != "multiple":
        assert optimal.stats["cost"] <= plan.stats["cost"] + 1e-9


def test_optimal_beats_pow2_on_a_long_tailed_distribution():
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(200), 1.0, 20_000), 1, 4096).astype(np.int64)
    obs = LengthObserver(lengths)
    waste = {s: propose(obs, 8, strategy=s, multiple_of=8).waste(obs) for s in STRATEGIES}
    assert waste["optimal"] < waste["pow2"]
    assert waste["optimal"] < waste["quantile"]
    assert waste["multiple"] < 0.02
    assert propose(obs, 8).stats["waste"] == pytest.approx(propose(obs, 8).waste(obs))


def test_multiple_pads_each_length_to_its_rounded_value_only():
    plan = propose([1, 9, 10, 17], 2, strategy="multiple", multiple_of=8)
    assert plan.boundaries == (8, 16, 24)


def test_pow2_keeps_the_largest_powers_when_there_are_too_many():
    assert propose([1, 3, 5, 9, 17], 8, strategy="pow2").boundaries == (1, 4, 8, 16, 32)
    assert propose([1, 3, 5, 9, 17], 2, strategy="pow2").boundaries == (16, 32)
    capped = propose([1, 3, 5, 9, 17], 8, strategy="pow2", max_length=24)
    assert capped.boundaries == (1, 4, 8, 16, 24)


def test_min_length_raises_the_smallest_boundary():
    assert propose([1, 2, 3, 40], 2, min_length=16).boundaries == (16, 40)


def test_truncate_plans_long_lengths_at_max_length():
    plan = propose([5, 10, 100], 2, max_length=64, overflow="truncate")
    assert plan.boundaries[-1] == 64
    assert plan.bucket_of(100) == 64


def test_quadratic_cost_spends_more_buckets_on_the_long_tail():
    lengths = list(range(1, 101))
    linear = propose(lengths, 3).boundaries
    quadratic = propose(lengths, 3, cost="quadratic").boundaries
    assert quadratic[0] > linear[0]


def test_a_plan_round_trips_through_to_dict_and_json():
    plan = propose([3, 5, 8, 9, 30, 31], 2, multiple_of=4, overflow="extend")
    again = Buckets.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan
    assert "boundaries=(12, 32)" in repr(plan)
    assert propose([3], 1, cost=log_cost).to_dict()["cost"] == "callable:log_cost"


def test_auto_picks_the_bucket_count_with_the_least_total_time():
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(np.log(300), 1.0, 50_000), 1, 8192).astype(np.int64)
    model = dict(compile_seconds=2.0, steps=10_000, step_seconds=0.05)
    plan = propose(lengths, "auto", multiple_of=8, **model)
    rows = plan.stats["auto"]["rows"]
    k = len(plan)
    assert rows[k][2] == min(r[2] for r in rows.values())
    for j in (1, 4, 32):
        fixed = propose(lengths, j, multiple_of=8)
        ratio = fixed.stats["cost"] / propose(lengths, 1, multiple_of=8).stats["cost"]
        expected = len(fixed) * 2.0 + 10_000 * 0.05 * ratio
        assert rows[len(fixed)][2] == pytest.approx(expected)
        assert rows[len(fixed)][2] >= rows[k][2]
    cheap = propose(lengths, "auto", multiple_of=8, **{**model, "compile_seconds": 0.01})
    dear = propose(lengths, "auto", multiple_of=8, **{**model, "compile_seconds": 60.0})
    assert len(cheap) > k > len(dear)


def test_explain_reads_as_a_sentence_with_the_trade_off():
    lengths = [8] * 50 + [16] * 30 + [32] * 15 + [64] * 5
    plan = propose(lengths, "auto", compile_seconds=0.9, steps=10_000, step_seconds=0.001)
    assert plan.explain() == (
        "2 buckets: 2 compiles x 0.9 s, padding 34% (vs 1 bucket: padding 74%, +5.1 s; "
        "vs 3 buckets: padding 19%, +0.15 s over 10,000 steps)\n"
        "boundaries 16, 64 (optimal, linear cost)"
    )
    fixed = propose(lengths, 2)
    assert fixed.explain() == (
        "2 buckets: padding 34% over 100 observed lengths\nboundaries 16, 64 (optimal, linear cost)"
    )
    assert (
        Buckets((8, 16)).explain().startswith("2 buckets: boundaries 8, 16 (custom, linear cost)")
    )


def test_auto_works_for_a_baseline_strategy_too():
    plan = propose(
        list(range(1, 200)),
        "auto",
        strategy="pow2",
        compile_seconds=1.0,
        steps=1000,
        step_seconds=0.1,
    )
    assert plan.strategy == "pow2" and 1 <= len(plan) <= 8


def reference_dp(values, weights, cost, k) -> float:
    """Plain O(k n^2) DP over distinct candidates: the textbook recurrence."""
    n = len(values)
    prefix = np.concatenate(([0], np.cumsum(weights)))
    best = [cost[i] * prefix[i + 1] for i in range(n)]
    for _ in range(1, k):
        best = [
            min([best[i]] + [best[j] + cost[i] * (prefix[i + 1] - prefix[j + 1]) for j in range(i)])
            for i in range(n)
        ]
    return best[-1]


@pytest.mark.parametrize("seed", range(4))
def test_the_optimal_plan_matches_a_textbook_dp_on_hundreds_of_lengths(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 2000, size=rng.integers(100, 400))
    lengths = np.repeat(lengths, rng.integers(1, 50, size=lengths.size))
    values, weights = np.unique(lengths, return_counts=True)
    for cost, per in (("linear", values * 1.0), ("quadratic", values**2.0)):
        for k in (2, 7):
            plan = propose(lengths, k, cost=cost)
            assert plan.stats["cost"] == pytest.approx(reference_dp(values, weights, per, k))
