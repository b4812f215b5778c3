"""Applying a plan: bucket_of, waste, pad, pad_tree, pad_batch on numpy and JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapewatch.buckets import Buckets, pad_batch, pad_to

PLAN = Buckets((4, 8, 16), multiple_of=4)


def test_bucket_of_is_the_smallest_boundary_at_or_above_the_length():
    assert [PLAN.bucket_of(n) for n in (0, 1, 4, 5, 8, 9, 16)] == [4, 4, 4, 8, 8, 16, 16]
    out = PLAN.bucket_of(np.array([[1, 5], [9, 16]]))
    assert isinstance(out, np.ndarray) and out.tolist() == [[4, 8], [16, 16]]


def test_waste_is_the_padding_fraction_in_elements():
    assert PLAN.waste([4, 8]) == 0.0
    assert PLAN.waste([2, 6]) == pytest.approx(1 - 8 / 12)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=3),
    st.integers(0, 16),
    st.data(),
)
def test_pad_round_trips_and_the_mask_counts_the_valid_positions(lead, length, data):
    axis = data.draw(st.integers(-(len(lead) + 1), len(lead)))
    shape = list(lead)
    shape.insert(axis % (len(lead) + 1), length)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    out, mask = PLAN.pad(x, axis=axis, value=-1, return_mask=True)
    ax = axis % x.ndim
    assert out.shape[ax] == PLAN.bucket_of(length)
    assert np.array_equal(np.take(out, np.arange(length), axis=ax), x)
    assert (np.take(out, np.arange(length, out.shape[ax]), axis=ax) == -1).all()
    assert mask.shape == out.shape[: ax + 1] and mask.dtype == bool
    assert (mask.sum(axis=-1) == length).all()


def test_pad_on_numpy_returns_numpy_with_a_numpy_mask():
    x = np.ones((2, 5), dtype=np.int32)
    out, mask = PLAN.pad(x, return_mask=True)
    assert type(out) is np.ndarray and type(mask) is np.ndarray
    assert out.dtype == np.int32 and out.shape == (2, 8)
    assert out[:, 5:].sum() == 0 and mask.tolist() == [[True] * 5 + [False] * 3] * 2


def test_pad_on_jax_returns_jax_arrays():
    x = jnp.ones((2, 5, 3), dtype=jnp.bfloat16)
    out, mask = PLAN.pad(x, axis=1, value=7, return_mask=True)
    assert isinstance(out, jax.Array) and isinstance(mask, jax.Array)
    assert out.shape == (2, 8, 3) and out.dtype == jnp.bfloat16
    assert float(out[0, 6, 0]) == 7.0 and mask.shape == (2, 8)
    assert int(mask.sum()) == 10


def test_pad_works_inside_jit():
    @jax.jit
    def f(x):
        return PLAN.pad(x, value=0)

    assert f(jnp.ones((3,))).shape == (4,)


def test_an_array_already_at_its_bucket_is_returned_as_is():
    x = np.zeros((2, 8))
    assert PLAN.pad(x) is x


def test_truncate_cuts_to_the_largest_boundary():
    plan = Buckets((4, 8), overflow="truncate")
    out, mask = plan.pad(np.arange(10), return_mask=True)
    assert out.tolist() == list(range(8)) and mask.all()
    assert plan.bucket_of(100) == 8
    jout = plan.pad(jnp.arange(10))
    assert isinstance(jout, jax.Array) and jout.shape == (8,)


def test_extend_rounds_up_and_records_nothing_on_the_plan():
    plan = Buckets((8, 16), multiple_of=8, overflow="extend")
    same = Buckets((8, 16), multiple_of=8, overflow="extend")
    assert plan.bucket_of(17) == 24
    assert plan.pad(np.ones((1, 30))).shape == (1, 32)
    assert plan.bucket_of([40, 17]).tolist() == [40, 24]
    assert plan.waste([17]) == pytest.approx(1 - 17 / 24)
    assert vars(plan) == vars(same) and hash(plan) == hash(same)  # nothing recorded: a plan is immutable
    assert "extended" not in plan.explain()
    with pytest.warns(DeprecationWarning, match=r"Buckets.extended is deprecated and always empty.*loader.extended"):
        assert plan.extended == {} and len(plan.extended) == 0
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError):
        plan.extended[24] = 1  # a read-only view


def test_a_plan_cannot_be_changed():
    import dataclasses

    plan = Buckets((8, 16), overflow="extend")
    for name, value in [("boundaries", (4,)), ("overflow", "error"), ("stats", {}), ("extended", {}),
                        ("anything", 1)]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(plan, name, value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del plan.boundaries
    assert plan == Buckets((8, 16), overflow="extend") and hash(plan) == hash(Buckets((8, 16), overflow="extend"))
    # equality and hashing: the same five fields as before the plan stopped recording
    assert hash(plan) == hash((plan.boundaries, plan.strategy, plan.cost, plan.multiple_of, plan.overflow))
    assert plan != Buckets((8, 16)) and plan == dataclasses.replace(plan, stats={"n": 1})  # stats: not compared


def test_pad_to_pads_to_an_exact_length():
    assert pad_to(np.ones((2, 3)), 6, axis=0).shape == (6, 3)
    with pytest.raises(ValueError, match=r"length 2 is below the array's length 3 on axis -1"):
        pad_to(np.ones((2, 3)), 2)


def test_pad_tree_pads_every_leaf_with_the_axis_to_one_bucket():
    tree = {
        "tokens": np.ones((2, 5), dtype=np.int32),
        "embeddings": jnp.ones((2, 5, 3)),
        "labels": np.array([1, 0]),
        "meta": ("name", 3),
    }
    out, mask = PLAN.pad_tree(tree, axis=1, return_mask=True)
    assert out["tokens"].shape == (2, 8) and isinstance(out["tokens"], np.ndarray)
    assert out["embeddings"].shape == (2, 8, 3) and isinstance(out["embeddings"], jax.Array)
    assert out["labels"] is tree["labels"] and out["meta"] == ("name", 3)
    assert mask.shape == (2, 8) and int(mask.sum()) == 10


def test_pad_tree_names_both_leaves_when_lengths_disagree_and_records_nothing():
    plan = Buckets((8,), overflow="extend")
    tree = {"a": np.ones((2, 5)), "b": np.ones((2, 12))}
    with pytest.raises(ValueError, match=r"\['a'\] has length 5 but \['b'\] has length 12"):
        plan.pad_tree(tree, axis=1)


def test_pad_batch_pads_rows_and_masks_them():
    batch = {"x": np.ones((3, 4)), "y": jnp.arange(3)}
    padded, valid = pad_batch(batch, 5)
    assert padded["x"].shape == (5, 4) and padded["y"].shape == (5,)
    assert isinstance(padded["y"], jax.Array)
    assert valid.tolist() == [True, True, True, False, False]
    assert padded["x"][3:].sum() == 0


def test_pad_batch_of_a_full_batch_changes_nothing():
    x = np.ones((4, 2))
    padded, valid = pad_batch(x, 4)
    assert padded is x and valid.all()


def test_pad_can_write_into_a_preallocated_output():
    buf = np.full((2, 8), 9.0, dtype=np.float32)
    out = PLAN.pad(np.ones((2, 5), dtype=np.float32), out=buf)
    assert out is buf and buf[:, :5].sum() == 10 and buf[:, 5:].sum() == 0
    assert pad_to(np.ones(8), 8, out=np.zeros(8)).sum() == 8


def test_a_wrong_out_array_raises_before_anything_is_recorded():
    plan = Buckets((8,), overflow="extend")
    with pytest.raises(
        ValueError, match=r"out has shape \(2, 8\) and dtype float64; expected shape \(2, 12\)"
    ):
        plan.pad(np.ones((2, 12)), out=np.zeros((2, 8)))
    with pytest.raises(ValueError, match=r"out= is only supported for numpy"):
        plan.pad(jnp.ones((2, 4)), out=np.zeros((2, 8)))
