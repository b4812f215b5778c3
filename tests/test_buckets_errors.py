"""Bad input raises ValueError naming the value and what was expected; nothing half-applied."""

from __future__ import annotations

import numpy as np
import pytest

from shapewatch.buckets import Buckets, LengthObserver, pad_batch, propose

LENGTHS = [3, 5, 8, 30]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_buckets": 0}, r"max_buckets must be an integer >= 1; got 0"),
        ({"max_buckets": 2.5}, r"max_buckets must be an integer >= 1; got float 2.5"),
        ({"max_buckets": True}, r"max_buckets must be an integer >= 1; got bool True"),
        ({"max_buckets": "many"}, r"max_buckets must be an int >= 1 or 'auto'; got 'many'"),
        ({"multiple_of": 0}, r"multiple_of must be an integer >= 1; got 0"),
        ({"min_length": 10, "max_length": 8}, r"max_length=8 is below min_length=10"),
        ({"max_length": 30, "multiple_of": 8}, r"max_length=30 is not a multiple of multiple_of=8"),
        ({"max_length": 16}, r"length 30 is above max_length=16 \(overflow='error'"),
        (
            {"strategy": "greedy"},
            r"unknown strategy 'greedy'; expected one of 'optimal', 'pow2', "
            r"'quantile', 'equal_volume', 'multiple'",
        ),
        (
            {"cost": "cubic"},
            r"unknown cost 'cubic'; expected one of 'linear', 'quadratic' or a callable",
        ),
        (
            {"overflow": "wrap"},
            r"unknown overflow 'wrap'; expected one of 'error', 'truncate', 'extend'",
        ),
        (
            {"cost": lambda b: -b},
            r"cost must be non-decreasing in the length; got cost\(3\)=-3 > cost\(5\)=-5",
        ),
        ({"cost": lambda b: float("inf")}, r"cost\(3\) returned inf; expected a finite float"),
        (
            {"max_buckets": "auto"},
            r"max_buckets='auto' needs the cost model; missing compile_seconds, steps, step_seconds",
        ),
        (
            {"max_buckets": "auto", "compile_seconds": 1.0, "steps": 10},
            r"max_buckets='auto' needs the cost model; missing step_seconds",
        ),
        ({"compile_seconds": -1.0}, r"compile_seconds must be a finite number >= 0; got -1.0"),
    ],
)
def test_bad_propose_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=r"^\[shapewatch\] " + match):
        propose(LENGTHS, **kwargs)


@pytest.mark.parametrize(
    ("lengths", "match"),
    [
        ([], r"lengths are empty"),
        (LengthObserver(), r"the LengthObserver is empty"),
        ([4, -2], r"got -2"),
        ([4.0, float("nan")], r"got nan"),
        ([4, 4.5], r"got 4.5"),
    ],
)
def test_bad_lengths_for_propose_raise_value_error(lengths, match):
    with pytest.raises(ValueError, match=r"^\[shapewatch\] .*" + match):
        propose(lengths)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"boundaries": ()}, r"boundaries are empty"),
        ({"boundaries": (8, 4)}, r"boundaries must be strictly ascending; got \(8, 4\)"),
        ({"boundaries": (0, 4)}, r"boundaries must be positive ints; got 0"),
        (
            {"boundaries": (4, 6), "multiple_of": 4},
            r"boundary 6 is not a multiple of multiple_of=4",
        ),
        ({"boundaries": (4,), "overflow": "clip"}, r"unknown overflow 'clip'"),
        ({"boundaries": (4,), "cost": "cubic"}, r"unknown cost 'cubic'; expected one of"),
    ],
)
def test_invalid_buckets_cannot_be_built(kwargs, match):
    with pytest.raises(ValueError, match=r"^\[shapewatch\] " + match):
        Buckets(**kwargs)


def test_a_length_above_the_largest_boundary_names_both():
    with pytest.raises(ValueError, match=r"length 20 is above the largest boundary 16"):
        Buckets((8, 16)).bucket_of([3, 20])
    with pytest.raises(ValueError, match=r"length 20 is above the largest boundary 16"):
        Buckets((8, 16)).pad(np.ones((2, 20)))


def test_an_axis_out_of_range_names_the_axis_and_the_shape():
    with pytest.raises(
        ValueError,
        match=r"axis 2 is out of range for an array of shape \(2, 3\); "
        r"expected an int with -2 <= axis < 2",
    ):
        Buckets((8,)).pad(np.ones((2, 3)), axis=2)
    with pytest.raises(ValueError, match=r"no array leaf has axis 3"):
        Buckets((8,)).pad_tree({"a": np.ones((2, 3))}, axis=3)


def test_pad_batch_rejects_oversized_and_disagreeing_batches():
    with pytest.raises(ValueError, match=r"batch has 5 rows, more than batch_size=4"):
        pad_batch(np.ones((5, 2)), 4)
    with pytest.raises(ValueError, match=r"\['x'\] has length 3 but \['y'\] has length 2"):
        pad_batch({"x": np.ones((3, 2)), "y": np.ones(2)}, 4)
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1; got 0"):
        pad_batch(np.ones(2), 0)


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match=r"unknown Buckets keys \['colour'\]"):
        Buckets.from_dict({"boundaries": [4], "colour": "red"})
