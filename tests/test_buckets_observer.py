"""LengthObserver: a streaming, mergeable, serialisable histogram of lengths."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapewatch.buckets import LengthObserver

lengths_lists = st.lists(st.integers(0, 300), min_size=0, max_size=60)


def test_update_accepts_an_int_a_sequence_and_an_array():
    obs = LengthObserver()
    obs.update(7)
    obs.update([3, 7])
    obs.update(np.array([[3, 9], [7, 7]], dtype=np.int32))
    assert obs.lengths.tolist() == [3, 7, 9]
    assert obs.counts.tolist() == [2, 4, 1]
    assert (obs.total, obs.distinct, obs.min, obs.max, obs.sum) == (7, 3, 3, 9, 43)
    assert obs.mean == pytest.approx(43 / 7)
    assert len(obs) == 7


def test_memory_grows_with_distinct_lengths_not_with_lengths_seen():
    obs = LengthObserver()
    for _ in range(5):
        obs.update(np.random.default_rng(0).integers(1, 50, size=100_000))
    assert obs.distinct <= 49
    assert obs.total == 500_000


def test_sparse_huge_lengths_use_the_sorting_path():
    obs = LengthObserver([1, 10**12, 10**12, 5])
    assert obs.lengths.tolist() == [1, 5, 10**12]
    assert obs.counts.tolist() == [1, 1, 2]


def test_integral_floats_are_accepted_as_lengths():
    assert LengthObserver([2.0, 3.0]).lengths.tolist() == [2, 3]


def test_an_empty_update_is_a_no_op():
    obs = LengthObserver([4])
    obs.update([])
    assert obs.total == 1
    assert LengthObserver().max is None and LengthObserver().mean is None


def test_quantile_returns_a_seen_length():
    obs = LengthObserver([1, 2, 3, 4, 100])
    assert obs.quantile(0.5) == 3
    assert obs.quantile(1.0) == 100
    assert obs.quantile(0.0) == 1


def test_a_failed_update_leaves_the_observer_unchanged():
    obs = LengthObserver([4, 5])
    with pytest.raises(
        ValueError, match=r"\[shapewatch\] lengths must be non-negative integers; got -1"
    ):
        obs.update([6, -1])
    assert obs.lengths.tolist() == [4, 5] and obs.total == 2


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ([1, -3], "got -3"),
        ([1.0, float("nan")], "got nan"),
        ([2.5], "got 2.5"),
        (["a"], "got dtype"),
        (True, "got True"),
        ([1, None], "got None"),
    ],
)
def test_bad_lengths_raise_value_error_naming_the_value(bad, match):
    with pytest.raises(ValueError, match=rf"\[shapewatch\].*{match}"):
        LengthObserver().update(bad)


def test_repr_summarises_the_histogram():
    assert repr(LengthObserver([3, 3, 9])) == "LengthObserver(total=3, distinct=2, min=3, max=9)"
    assert repr(LengthObserver()) == "LengthObserver(total=0)"


@settings(max_examples=60, deadline=None)
@given(lengths_lists, lengths_lists)
def test_merging_two_observers_equals_observing_the_concatenation(a, b):
    merged = LengthObserver(a).merge(LengthObserver(b))
    assert merged == LengthObserver(a + b)
    values, counts = np.unique(np.array(a + b, dtype=np.int64), return_counts=True)
    assert merged.lengths.tolist() == values.tolist()
    assert merged.counts.tolist() == counts.tolist()


@settings(max_examples=40, deadline=None)
@given(lengths_lists)
def test_to_dict_from_dict_round_trips_through_json(a):
    obs = LengthObserver(a)
    again = LengthObserver.from_dict(json.loads(json.dumps(obs.to_dict())))
    assert again == obs


def test_from_dict_rejects_mismatched_lengths_and_counts():
    with pytest.raises(ValueError, match=r"2 lengths but 1 counts"):
        LengthObserver.from_dict({"lengths": [1, 2], "counts": [3]})
    with pytest.raises(ValueError, match=r"expects keys 'lengths' and 'counts'"):
        LengthObserver.from_dict({"lengths": [1]})


def test_merge_rejects_other_types():
    with pytest.raises(ValueError, match=r"can only merge a LengthObserver; got list"):
        LengthObserver().merge([1, 2])


def test_copy_is_independent():
    obs = LengthObserver([1])
    dup = obs.copy()
    dup.update(2)
    assert obs.total == 1 and dup.total == 2
