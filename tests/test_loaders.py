"""Tests for the loader wrappers ``bucketed`` and ``group_by_length`` (numpy and generators)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapewatch.buckets import Batch, Buckets, bucketed, group_by_length

FAST = settings(max_examples=40, deadline=None)
SMALL_BUFFER = "ignore:.*buffer_size=.* is below one full batch per bucket"


def tokens(n: int, start: int = 0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int64)


def unpadded(batch: Batch) -> list[tuple[int, ...]]:
    """The real examples of a group_by_length batch of 1-D token arrays, as tuples."""
    data = batch.data
    return [tuple(data[r, : batch.lengths[r]].tolist()) for r in range(batch.rows)]


def key(ex: np.ndarray) -> tuple[int, ...]:
    return tuple(np.asarray(ex).tolist())


# ---------------------------------------------------------------- bucketed


def test_bucketed_given_boundaries_pads_and_masks():
    stream = (np.full((2, n), 7.0) for n in (3, 5, 9, 4))
    out = list(bucketed(stream, buckets=(4, 8, 16), pad_value=-1))
    assert [b.bucket for b in out] == [4, 8, 16, 4]
    first = out[0]
    assert first.data.shape == (2, 4) and first.data[0].tolist() == [7, 7, 7, -1]
    assert first.mask.tolist() == [[True, True, True, False]] * 2
    assert first.lengths.tolist() == [3, 3] and first.rows == 2


def test_bucketed_pytrees_dicts_tuples():
    batch = {"ids": np.ones((2, 5), int), "emb": np.ones((2, 5, 3)), "y": np.arange(2)}
    (b,) = bucketed([batch], buckets=(8,))
    assert b.data["ids"].shape == (2, 8) and b.data["emb"].shape == (2, 8, 3)
    assert b.data["y"].tolist() == [0, 1] and b.mask.shape == (2, 8)
    (t,) = bucketed([(np.ones((3, 2)), np.zeros((3, 2, 4)))], buckets=(4,))
    assert t.data[0].shape == (3, 4) and t.data[1].shape == (3, 4, 4)


def test_bucketed_ragged_lists():
    (b,) = bucketed([[[1, 2], [1, 2, 3, 4, 5], []]], buckets=(4, 8))
    assert b.data.shape == (3, 8) and b.lengths.tolist() == [2, 5, 0]
    assert b.data[1, :5].tolist() == [1, 2, 3, 4, 5] and b.data[1, 5:].tolist() == [0, 0, 0]
    assert b.mask.sum(axis=1).tolist() == [2, 5, 0]


def test_bucketed_learns_after_warmup_in_order_and_extends():
    sizes = [3, 5, 9, 4, 30, 2, 70]
    it = bucketed((tokens(n)[None] for n in sizes), warmup=4, max_buckets=2)
    out = list(it)
    assert [b.lengths[0] for b in out] == sizes  # held, then yielded in order, nothing lost
    assert it.plan is not None and it.plan.overflow == "extend"
    assert it.plan.boundaries == (5, 9)  # planned on the first 4 only
    assert [b.bucket for b in out] == [5, 5, 9, 5, 30, 5, 70]
    assert it.overflowed == 2 and it.extended == {30: 1, 70: 1}
    for b, n in zip(out, sizes):
        assert b.data[0, :n].tolist() == list(range(n)) and b.data.shape[1] == b.bucket


def test_one_plan_in_two_loaders_counts_apart_and_is_left_as_it_was():
    plan = Buckets((4, 8), overflow="extend")
    before = (vars(plan).copy(), hash(plan))
    one = bucketed((tokens(n)[None] for n in (3, 30, 30, 9)), buckets=plan)
    two = group_by_length([tokens(n) for n in (3, 12, 5)], batch_size=1, buckets=plan, shuffle=False)
    assert [b.bucket for b in one] == [4, 30, 30, 9]
    assert one.extended == {30: 2, 9: 1} and one.overflowed == 3
    assert two.extended == {} and two.max_shapes == 2  # the other loader's batches are not its own
    assert [b.bucket for b in two] == [4, 12, 8]
    assert two.extended == {12: 1} and two.max_shapes == 3 and one.extended == {30: 2, 9: 1}
    assert (vars(plan), hash(plan)) == before and one.plan is plan and two.plan is plan


def test_bucketed_short_stream_and_empty():
    assert [b.bucket for b in bucketed([np.ones((1, 3))], warmup=8)] == [3]
    assert list(bucketed(iter([]))) == []


def test_bucketed_length_of_per_row_and_no_mask():
    batch = np.ones((2, 6))
    (b,) = bucketed([batch], buckets=(8,), length_of=lambda x: [2, 6])
    assert b.lengths.tolist() == [2, 6] and b.mask.sum(axis=1).tolist() == [2, 6]
    (c,) = bucketed([batch], buckets=(8,), return_mask=False)
    assert c.mask is None and c.lengths.tolist() == [6, 6]


def test_bucketed_jax_arrays_stay_jax():
    import jax

    (b,) = bucketed([jax.numpy.ones((2, 3))], buckets=(4,))
    assert isinstance(b.data, jax.Array) and b.data.shape == (2, 4)


def test_bucketed_bad_input():
    with pytest.raises(ValueError, match=r"^\[shapewatch\]"):
        list(bucketed([{"a": np.ones((2, 3)), "b": np.ones((2, 4))}], buckets=(8,)))
    with pytest.raises(ValueError, match=r"^\[shapewatch\]"):
        list(bucketed([np.ones(3)], buckets=(8,)))  # no axis 1
    with pytest.raises(ValueError, match=r"^\[shapewatch\]"):
        bucketed([], max_buckets=0)


# ---------------------------------------------------------------- group_by_length


def test_group_basic_no_shuffle():
    data = [tokens(n) for n in (3, 9, 4, 10, 2)]
    out = list(group_by_length(data, batch_size=2, buckets=(4, 10), shuffle=False))
    assert [(b.data.shape, b.lengths.tolist(), b.rows) for b in out] == [
        ((2, 4), [3, 4], 2), ((2, 10), [9, 10], 2), ((2, 4), [2, 0], 1)
    ]
    assert out[-1].mask[1].tolist() == [False] * 4  # the padded row


def test_group_token_budget_rows_per_bucket():
    data = [tokens(n) for n in [4] * 10 + [16] * 10]
    it = group_by_length(data, token_budget=32, buckets=(4, 16), shuffle=False, remainder="keep")
    shapes = Counter(b.data.shape for b in it)
    assert shapes == {(8, 4): 1, (2, 4): 1, (2, 16): 5}


def test_group_pytree_examples_with_scalar_leaf():
    data = ({"ids": tokens(n), "feat": np.ones((n, 3)), "label": np.int32(n)} for n in (2, 5, 3))
    out = list(group_by_length(data, batch_size=4, buckets=(8,), shuffle=False))
    (b,) = out
    assert b.data["ids"].shape == (4, 8) and b.data["feat"].shape == (4, 8, 3)
    assert b.data["label"].tolist() == [2, 5, 3, 0] and b.rows == 3


@pytest.mark.filterwarnings(SMALL_BUFFER)
@FAST
@given(
    lengths=st.lists(st.integers(0, 40), max_size=60),
    remainder=st.sampled_from(["pad", "keep"]),
    sizing=st.sampled_from([("batch_size", 1), ("batch_size", 3), ("token_budget", 50)]),
    buffer_size=st.integers(1, 25),
    shuffle=st.booleans(),
    seed=st.integers(0, 3),
    given_buckets=st.booleans(),
)
def test_group_no_example_lost_duplicated_or_altered(
    lengths, remainder, sizing, buffer_size, shuffle, seed, given_buckets
):
    examples = [tokens(n, start=100 * i) for i, n in enumerate(lengths)]
    it = group_by_length(
        iter(examples), **{sizing[0]: sizing[1]}, remainder=remainder, buffer_size=buffer_size,
        shuffle=shuffle, seed=seed,
        **({"buckets": (8, 16)} if given_buckets else {"max_buckets": 3}),
    )
    seen = [ex for b in it for ex in unpadded(b)]
    assert Counter(seen) == Counter(key(e) for e in examples)
    assert it.dropped == 0 and it.max_buffered <= buffer_size


@pytest.mark.filterwarnings(SMALL_BUFFER)
@FAST
@given(lengths=st.lists(st.integers(0, 30), max_size=60), batch=st.integers(1, 5),
       buffer_size=st.integers(1, 30))
def test_group_drop_reports_what_it_dropped(lengths, batch, buffer_size):
    examples = [tokens(n, start=100 * i) for i, n in enumerate(lengths)]
    it = group_by_length(examples, batch_size=batch, remainder="drop", buffer_size=buffer_size,
                         max_buckets=3)
    out = list(it)
    seen = Counter(ex for b in out for ex in unpadded(b))
    assert not seen - Counter(key(e) for e in examples)  # a sub-multiset: nothing invented
    assert sum(seen.values()) + it.dropped == len(examples)
    assert all(b.data.shape[0] == batch for b in out)  # flushes are padded, never dropped


def _order(seed: int) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(123)
    data = [tokens(int(n), start=1000 * i) for i, n in enumerate(rng.integers(1, 50, 300))]
    it = group_by_length(data, batch_size=4, seed=seed, buffer_size=64, max_buckets=4)
    return [ex for b in it for ex in unpadded(b)]


def test_group_deterministic_per_seed():
    assert _order(0) == _order(0)
    assert _order(0) != _order(1)
    assert Counter(_order(0)) == Counter(_order(1))


def _random_stream(seed: int, n: int):
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield tokens(int(np.clip(rng.lognormal(3.0, 0.8), 1, 300)), start=i)


@pytest.mark.parametrize("buckets", [None, (16, 32, 64, 128, 300)])
def test_group_distinct_shapes_bounded(buckets):
    plan = {"max_buckets": 5, "multiple_of": 4} if buckets is None else {"buckets": buckets}
    it = group_by_length(_random_stream(0, 5000), batch_size=8, buffer_size=256, **plan)
    shapes = {b.data.shape for b in it}
    assert len(shapes) <= it.max_shapes
    assert it.max_shapes <= 5 + len(it.extended)
    assert {s[0] for s in shapes} == {8}


def test_group_token_budget_shapes_bounded():
    it = group_by_length(_random_stream(1, 3000), token_budget=512, buffer_size=300,
                         buckets=(16, 32, 64, 128, 300))
    shapes = {b.data.shape for b in it}
    assert len(shapes) <= it.max_shapes == 5


def test_group_endless_stream_bounded_memory():
    def endless():
        for i in itertools.count():
            yield tokens(1 + (i * 7919) % 97, start=i)

    it = group_by_length(endless(), batch_size=4, buffer_size=100, max_buckets=4)
    n = sum(b.rows for b in itertools.islice(it, 400))
    assert n == 1600
    assert 0 < it.max_buffered <= 100


def test_group_tiny_buffer_flushes_partials():
    data = [tokens(n, start=100 * i) for i, n in enumerate([1, 9, 17, 25] * 5)]
    with pytest.warns(UserWarning, match=r"buffer_size=3 is below .* expected buffer_size >= 16"):
        it = group_by_length(data, batch_size=4, buffer_size=3, buckets=(8, 16, 24, 32), seed=2)
    seen = [ex for b in it for ex in unpadded(b)]
    assert Counter(seen) == Counter(key(e) for e in data)
    assert it.max_buffered <= 3


def test_group_auto_uses_cost_model():
    data = list(_random_stream(2, 400))
    it = group_by_length(data, batch_size=8, max_buckets="auto", compile_seconds=0.5,
                         steps=1000, step_seconds=0.01)
    assert sum(b.rows for b in it) == 400
    assert "auto" in it.plan.stats
    cheap = group_by_length(data, batch_size=8, max_buckets="auto", compile_seconds=1e-6,
                            steps=1000, step_seconds=0.01)
    next(cheap)
    assert len(cheap.plan) >= len(it.plan)


def test_group_accepts_buckets_object_and_lists():
    plan = Buckets((4, 8), overflow="extend")
    out = list(group_by_length([[1, 2, 3], [4, 5, 6, 7, 8, 9]], batch_size=1, buckets=plan,
                               shuffle=False))
    assert [b.data.tolist() for b in out] == [[[1, 2, 3, 0]], [[4, 5, 6, 7, 8, 9, 0, 0]]]


@pytest.mark.parametrize(
    "examples, kwargs, message",
    [
        ([5, 6], {"batch_size": 2}, "no length"),
        ([tokens(3), np.ones((3, 2))], {"batch_size": 2}, "mixed ranks"),
        ([{"a": tokens(3), "b": tokens(4)}], {"batch_size": 2}, "disagree"),
        ([tokens(3)], {}, "batch_size or token_budget"),
        ([tokens(3)], {"batch_size": 2, "remainder": "nope"}, "remainder"),
        ([tokens(3)], {"batch_size": 2, "max_buckets": "auto", "steps": 10}, "or none of them"),
        ([tokens(3)], {"batch_size": 2, "max_shapes": 0}, "max_shapes must be an integer >= 1; got 0"),
        ([tokens(3)], {"batch_size": 0}, "batch_size"),
        ([tokens(3)], {"batch_size": 2, "buffer_size": 0}, "buffer_size"),
        ([{"a": tokens(3)}, {"b": tokens(3)}], {"batch_size": 2}, "structure"),
        ([tokens(3), np.array(["a", "b", "c"])], {"batch_size": 2}, "no common dtype"),
    ],
)
def test_group_bad_input(examples, kwargs, message):
    with pytest.raises(ValueError, match=r"^\[shapewatch\] .*" + message):
        list(group_by_length(iter(examples), **kwargs))


# ---------------------------------------------------------------- the example's data pipeline


def test_example_strategies_keep_every_token():
    """The training example's five pipelines (no training: no compiles) pad, never lose."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples"))
    try:
        import variable_length_training as ex
    finally:
        sys.path.pop(0)
    cfg = ex.QUICK
    examples = ex.make_examples(cfg)
    assert [len(e) for e in examples] == [len(e) for e in ex.make_examples(cfg)]
    assert all(8 <= len(e) <= cfg.max_len for e in examples)
    total = sum(len(e) for e in examples)
    pipelines = {
        "plain": ex.plain(examples, cfg), "max": ex.to_max(examples, cfg),
        "pow2": ex.pow2(examples, cfg), "quantile": ex.quantile(examples, cfg),
        "grouped": ex.grouped(examples, cfg),
    }
    for name, batches in pipelines.items():
        masks = [np.asarray(mask) for _, mask in batches]
        assert sum(int(m.sum()) for m in masks) == total, name
        if name == "pow2":
            assert all(m.shape[1] & (m.shape[1] - 1) == 0 for m in masks)


# ---------------------------------------------------------------- options the mode would ignore


@pytest.mark.parametrize(
    "loader, kwargs, message",
    [
        ("group", {"buckets": (4, 10), "prior": "/nonexistent.json", "compile_seconds": 2.0, "max_shapes": 1},
         r"compile_seconds=2\.0, max_shapes=1, prior='/nonexistent.json' would be ignored: buckets= is a fixed plan"),
        ("group", {"buckets": (4, 10), "max_buckets": 3}, r"max_buckets=3 would be ignored: buckets= is a fixed plan"),
        ("group", {"max_buckets": 2, "clock": lambda: 0.0},
         r"clock=<function .*> would be ignored: max_buckets=2 plans once with propose\(\)"),
        ("group", {"max_buckets": 2, "steps": 100},
         r"steps=100 would be ignored: max_buckets=2 plans once with propose\(\)"),
        ("group", {"compile_seconds": 1.0, "steps": 100, "step_seconds": 0.01, "max_shapes": 4},
         r"max_shapes=4 would be ignored: compile_seconds, steps and step_seconds plan once"),
        ("bucketed", {"buckets": (4, 10), "compile_records": lambda: []},
         r"compile_records=<function .*> would be ignored: buckets= is a fixed plan"),
        ("bucketed", {"max_buckets": 2, "max_shapes": 3},
         r"max_shapes=3 would be ignored: max_buckets=2 plans once"),
    ],
)
def test_options_the_mode_ignores_are_refused(loader, kwargs, message):
    """An option that would change nothing is an error naming it, the mode and the fix,
    raised when the loader is made (before any example is read)."""
    read = []

    def examples():
        for n in (3, 5, 9):
            read.append(n)
            yield tokens(n)

    with pytest.raises(ValueError, match=r"^\[shapewatch\] (group_by_length|bucketed): " + message + r".*; fix: "):
        if loader == "group":
            group_by_length(examples(), batch_size=2, **kwargs)
        else:
            bucketed(examples(), axis=0, **kwargs)
    assert read == []


@pytest.mark.parametrize(
    "kwargs",
    [{"max_buckets": 2, "prior": None}, {"buckets": (4, 10), "max_buckets": "auto"},
     {"compile_seconds": 1.0, "steps": 100, "step_seconds": 0.01}, {"max_shapes": 4, "clock": lambda: 0.0}],
)
def test_options_each_mode_uses_are_taken(kwargs):
    out = list(group_by_length(iter([tokens(3), tokens(5), tokens(9)]), batch_size=1, shuffle=False, **kwargs))
    assert sorted(int(b.mask.sum()) for b in out) == [3, 5, 9]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 2.0}, r"batch_size must be an integer >= 1; got float 2\.0"),
        ({"batch_size": 2, "buffer_size": "64"}, r"buffer_size must be an integer >= 1; got str '64'"),
        ({"batch_size": 2, "max_shapes": 1.5}, r"max_shapes must be an integer >= 1; got float 1\.5"),
        ({"batch_size": 2, "max_buckets": None}, r"max_buckets must be an integer >= 1 or 'auto'; got NoneType None"),
        ({"batch_size": 2, "seed": "0"}, r"seed must be an int; got str '0'"),
        ({"batch_size": 2, "length_of": 3}, r"length_of must be a callable; got int 3"),
        ({"batch_size": 2, "remainder": 1}, r"remainder must be a str, one of .*; got int 1"),
        ({"batch_size": 2, "buckets": 8}, r"buckets must be None, a Buckets or a sequence of ints; got int 8"),
    ],
)
def test_wrong_types_raise_type_error(kwargs, message):
    """A wrong type is a TypeError (and, as in 0.1, a ValueError) naming the type and value."""
    with pytest.raises(TypeError, match=r"^\[shapewatch\] .*" + message) as caught:
        list(group_by_length(iter([tokens(3)]), **kwargs))
    assert isinstance(caught.value, ValueError)
