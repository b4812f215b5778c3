"""Lengths: bools refused inside lists too, a stated upper limit instead of int64 overflow, and
planning bounded by the distinct lengths, not by max_buckets."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from shapewatch.buckets import Buckets, LengthObserver, group_by_length, propose

LIMIT = r"lengths must be at most 2\*\*40 = 1,099,511,627,776"


@pytest.mark.parametrize("lengths", [[True, 3], (3, np.bool_(False)), [[1, 2], [True]]])
def test_bools_inside_lists_are_refused_like_a_bool_alone(lengths):
    with pytest.raises(ValueError, match=r"^\[shapewatch\] lengths must be non-negative "
                       r"integers; got (True|False) \(a bool\)"):
        LengthObserver(lengths)


@pytest.mark.parametrize(
    "lengths",
    [[2**62, 2**62], 2**63 - 1, [2**64], np.array([2**63], dtype=np.uint64), [2.0**41]],
)
def test_lengths_above_the_stated_limit_are_refused_before_anything_changes(lengths):
    obs = LengthObserver([3])
    with pytest.raises(ValueError, match=r"^\[shapewatch\] " + LIMIT + "; got"):
        obs.update(lengths)
    assert obs.total == 1
    with pytest.raises(ValueError, match=LIMIT):
        Buckets((8,), overflow="extend", multiple_of=8).bucket_of(lengths)


def test_the_limit_itself_is_accepted_and_its_sums_are_exact():
    top = 2**40
    assert Buckets((8,), overflow="extend", multiple_of=8).bucket_of(top) == top
    obs = LengthObserver.from_dict({"lengths": [top], "counts": [2**30]})
    assert obs.sum == 2**70 and obs.mean == float(top)
    assert propose(obs, 1).boundaries == (top,)


def test_boundaries_above_the_limit_are_refused():
    with pytest.raises(ValueError, match=r"^\[shapewatch\] boundaries must be at most 2\*\*40"):
        Buckets((8, 2**41))


@pytest.mark.parametrize("strategy", ["optimal", "pow2", "quantile", "equal_volume", "multiple"])
def test_a_huge_max_buckets_costs_no_more_than_the_distinct_lengths(strategy):
    signal.alarm(60)  # a hang fails instead of stalling the run
    try:
        plan = propose([3, 7, 1, 12], 10**9, strategy=strategy)
    finally:
        signal.alarm(0)
    assert len(plan.boundaries) <= 4 and plan.boundaries[-1] >= 12


def test_group_by_length_with_a_huge_max_buckets_plans_one_bucket_per_length():
    signal.alarm(60)
    try:
        data = [np.arange(n) for n in (3, 7, 1, 12, 5)]
        it = group_by_length(data, batch_size=2, max_buckets=10**9, shuffle=False)
        rows = sorted(int(n) for b in it for n in b.lengths[: b.rows])
    finally:
        signal.alarm(0)
    assert rows == [1, 3, 5, 7, 12] and it.plan.boundaries == (1, 3, 5, 7, 12)
