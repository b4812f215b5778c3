"""The loaders never lose, alter or stall on data, whatever the input does (issue 19).

Every test here runs under ``signal.alarm``: a hang fails the test instead of the run.
"""

from __future__ import annotations

import signal
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapewatch.buckets import Buckets, bucketed, group_by_length, pad_batch
from tests._interrupt import alarm

FAST = settings(max_examples=40, deadline=None)
SMALL_BUFFER = "ignore:.*buffer_size=.* is below one full batch per bucket"
TIMEOUT_S = 120
DRAIN_S = 10


@pytest.fixture(autouse=True)
def _no_hang():
    """Every test ends within TIMEOUT_S (``drain`` also bounds each run on its own)."""
    with alarm(TIMEOUT_S):
        yield


def tokens(n: int, start: int = 0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int64)


def key(ex) -> tuple:
    return tuple(np.asarray(ex).tolist())


def unpadded(batch) -> list[tuple]:
    return [tuple(batch.data[r, : batch.lengths[r]].tolist()) for r in range(batch.rows)]


class Script:
    """An iterator that yields the ``("ok" | "bad", value)`` events' values and raises
    ``OSError`` at the ``("io", None)`` ones, and goes on after each."""

    def __init__(self, events):
        self.events = list(events)
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.i >= len(self.events):
            raise StopIteration
        kind, value = self.events[self.i]
        self.i += 1
        if kind == "io":
            raise OSError(f"read error at event {self.i - 1}")
        return value


def drain(it, limit: int = 10_000, seconds: int = DRAIN_S):
    """Call ``next`` until StopIteration, collecting batches and errors; bounded in calls
    and (``signal.alarm``) in time, so each hypothesis example is bounded too."""
    batches, errors = [], []
    previous = signal.alarm(seconds)
    try:
        for _ in range(limit):
            try:
                batches.append(next(it))
            except StopIteration:
                return batches, errors
            except (OSError, ValueError) as exc:
                errors.append(exc)
        raise AssertionError(f"the loader was still going after {limit} calls")
    finally:
        signal.alarm(previous)


# ---------------------------------------------------------------- group_by_length, items 1, 2


@pytest.mark.parametrize("remainder", ["pad", "drop", "keep"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_an_example_above_an_error_plan_is_left_out_and_the_rest_comes_out(remainder, shuffle):
    data = [tokens(3, start=10 * i) for i in range(10)]
    stream = data[:2] + [tokens(20)] + data[2:]
    it = group_by_length(iter(stream), batch_size=2, buckets=Buckets((8,)), buffer_size=4,
                         remainder=remainder, shuffle=shuffle)
    batches, errors = drain(it)
    assert len(errors) == 1 and str(errors[0]).startswith("[shapewatch] an example has length 20")
    assert Counter(ex for b in batches for ex in unpadded(b)) == Counter(map(key, data))
    assert it.dropped == 0 and all(b.rows > 0 for b in batches)


def test_a_source_error_propagates_once_and_keeps_every_example_read():
    def source():
        yield from (tokens(n) for n in (3, 4, 5))
        raise OSError("read error")

    it = group_by_length(source(), batch_size=2, buckets=(8,), shuffle=False)
    with pytest.raises(OSError, match="read error"):
        next(it)
    assert sorted(len(ex) for b in it for ex in unpadded(b)) == [3, 4, 5]


def test_a_bad_example_in_the_buffer_raises_once_and_loses_nothing_held():
    stream = [tokens(3), tokens(4), "not an example", tokens(5)]
    it = group_by_length(iter(stream), batch_size=4, buckets=(8,))
    with pytest.raises(ValueError, match=r"^\[shapewatch\] example has no length.*'not an"):
        next(it)
    (batch,) = list(it)
    assert sorted(map(len, unpadded(batch))) == [3, 4, 5]


BAD_EXAMPLES = ["bad", None, np.array([object()]), {"no": "length"}]


@pytest.mark.filterwarnings(SMALL_BUFFER)
@FAST
@given(
    lengths=st.lists(st.integers(0, 12), max_size=40),
    faults=st.lists(st.tuples(st.integers(0, 60), st.sampled_from(["io", "bad", "long"])),
                    max_size=8),
    remainder=st.sampled_from(["pad", "drop", "keep"]),
    sizing=st.sampled_from([("batch_size", 1), ("batch_size", 3), ("token_budget", 20)]),
    buffer_size=st.integers(1, 20),
    shuffle=st.booleans(),
    plan=st.sampled_from(["learned", "error", "extend"]),
)
def test_every_valid_example_comes_out_once_whatever_fails_around_it(
    lengths, faults, remainder, sizing, buffer_size, shuffle, plan
):
    events = [("ok", tokens(n, start=100 * i)) for i, n in enumerate(lengths)]
    for pos, kind in sorted(faults, reverse=True):
        if kind == "long" and plan != "error":
            continue
        value = tokens(50) if kind == "long" else BAD_EXAMPLES[pos % len(BAD_EXAMPLES)]
        events.insert(min(pos, len(events)), (kind if kind == "io" else "bad", value))
    buckets = {"learned": None, "error": Buckets((4, 16)), "extend": (4, 8)}[plan]
    it = group_by_length(Script(events), **{sizing[0]: sizing[1]}, remainder=remainder,
                         buffer_size=buffer_size, shuffle=shuffle,
                         **({"max_buckets": 3} if buckets is None else {"buckets": buckets}))
    batches, errors = drain(it)
    assert len(errors) == sum(kind != "ok" for kind, _ in events)
    assert all(str(e).startswith(("[shapewatch]", "read error")) for e in errors)
    valid = Counter(key(v) for kind, v in events if kind == "ok")
    seen = Counter(ex for b in batches for ex in unpadded(b))
    if remainder == "drop":
        assert not seen - valid and sum(seen.values()) + it.dropped == sum(valid.values())
    else:
        assert seen == valid and it.dropped == 0
    assert it.max_buffered <= buffer_size


# ---------------------------------------------------------------- item 3: dtypes


def test_dtypes_are_promoted_to_hold_every_value_read_before_the_first_batch():
    (b,) = group_by_length([np.array([1], np.int16), [70000]], batch_size=2, buckets=(2,),
                           shuffle=False)
    assert b.data.dtype == np.int64 and b.data[:, 0].tolist() == [1, 70000]
    (b,) = group_by_length([np.array([1.0], np.float32), np.array([1e40])], batch_size=2,
                           buckets=(2,), shuffle=False)
    assert b.data.dtype == np.float64 and b.data[1, 0] == 1e40
    (b,) = group_by_length([[], [1.5]], batch_size=2, buckets=(2,), shuffle=False)
    assert b.data.dtype == np.float64 and b.data[1, 0] == 1.5


def test_a_narrower_dtype_stays_when_every_value_fits():
    data = [np.arange(3, dtype=np.int32), np.arange(4, dtype=np.int64), [1, 2]]
    (b,) = group_by_length(data, batch_size=3, buckets=(4,), shuffle=False)
    assert b.data.dtype == np.int32


def test_after_the_first_batch_an_example_that_does_not_fit_raises_and_is_left_out():
    data = [np.arange(2, dtype=np.int16)] * 2 + [np.array([70000, 1])] + [np.arange(2, 4)] * 2
    it = group_by_length(iter(data), batch_size=2, buckets=(2,), shuffle=False, buffer_size=2)
    batches, errors = drain(it)
    assert len(errors) == 1
    assert str(errors[0]).startswith("[shapewatch] leaf <root> has dtype int64 with values")
    assert [b.data.tolist() for b in batches] == [[[0, 1], [0, 1]], [[2, 3], [2, 3]]]
    assert all(b.data.dtype == np.int16 for b in batches)


def test_a_pad_value_the_dtype_cannot_hold_is_refused_before_any_data():
    with pytest.raises(ValueError, match=r"^\[shapewatch\] pad_value 'x' cannot be stored"):
        next(group_by_length([tokens(3)], batch_size=1, pad_value="x"))


# ---------------------------------------------------------------- item 5: drop, small buffers


@pytest.mark.parametrize("buffer_size", [4, 32])
def test_drop_with_a_small_buffer_drops_only_the_last_partial_batches(buffer_size):
    data = (tokens(i % 13 + 1, start=i) for i in range(1000))
    with pytest.warns(UserWarning, match=r"^\[shapewatch\] buffer_size=.* is below"):
        it = group_by_length(data, batch_size=8, buffer_size=buffer_size, remainder="drop",
                             max_buckets=8)  # a fixed count: the plan does not hang on timing
        rows = sum(b.rows for b in it)
    assert rows + it.dropped == 1000
    assert it.dropped < 8 * len(it.plan)  # at most one partial batch per bucket, at the end


def test_a_buffer_big_enough_for_every_bucket_does_not_warn():
    it = group_by_length([tokens(3)], batch_size=2, buckets=(4, 8), buffer_size=4)
    assert sum(b.rows for b in it) == 1


# ---------------------------------------------------------------- item 6: fixed-size leaves


@pytest.mark.parametrize("lengths", [[3, 5], [5, 3], [3, 3, 5], [5, 3, 3]])
def test_a_fixed_size_leaf_is_stacked_whatever_the_order_of_lengths(lengths):
    data = [{"tok": tokens(n), "onehot": np.eye(3)[0]} for n in lengths]
    it = group_by_length(data, batch_size=4, buckets=(8,), shuffle=False,
                         length_of=lambda e: len(e["tok"]))
    (b,) = list(it)
    assert b.data["onehot"].shape == (4, 3) and b.data["tok"].shape == (4, 8)
    assert b.data["onehot"][: len(lengths)].tolist() == [[1.0, 0.0, 0.0]] * len(lengths)


def test_lists_of_numbers_in_a_dict_are_sequences():
    rows = [{"input_ids": [101, 7, 102], "attention_mask": [1, 1, 1]},
            {"input_ids": [101, 102], "attention_mask": [1, 1]}]
    (b,) = group_by_length(rows, batch_size=2, buckets=(4,), shuffle=False)
    assert b.data["input_ids"].tolist() == [[101, 7, 102, 0], [101, 102, 0, 0]]
    assert b.lengths.tolist() == [3, 2]


def test_a_tuple_of_numbers_inside_an_example_stays_a_pair_of_scalars():
    rows = [{"ids": tokens(3), "meta": (1, 2)}, {"ids": tokens(2), "meta": (3, 4)}]
    (b,) = group_by_length(rows, batch_size=2, buckets=(4,), shuffle=False)
    assert [m.tolist() for m in b.data["meta"]] == [[1, 3], [2, 4]]


# ---------------------------------------------------------------- item 7: truncating plans


def test_a_truncating_plan_cuts_group_by_length_examples_and_counts_them():
    plan = Buckets((4, 8), overflow="truncate")
    it = group_by_length([tokens(10), tokens(3)], batch_size=1, buckets=plan, shuffle=False)
    a, b = list(it)
    assert a.data.tolist() == [list(range(8))] and a.lengths.tolist() == [8]
    assert b.data.tolist() == [[0, 1, 2, 0]] and it.truncated == 1


def test_a_truncating_plan_cuts_bucketed_batches_and_their_lengths():
    plan = Buckets((4, 8), overflow="truncate")
    (b,) = bucketed([np.ones((2, 10))], buckets=plan)
    assert (b.bucket, b.lengths.tolist(), b.mask.sum(1).tolist()) == (8, [8, 8], [8, 8])
    it = bucketed([[tokens(10), tokens(3)]], buckets=plan)
    (r,) = list(it)
    assert r.data.tolist() == [list(range(8)), [0, 1, 2, 0, 0, 0, 0, 0]]
    assert r.lengths.tolist() == [8, 3] and it.truncated == 1


# ---------------------------------------------------------------- items 4, 8: bucketed


def test_a_bad_batch_in_the_warm_up_raises_once_and_the_held_batches_come_out():
    stream = [np.ones((2, 3)), "bad", np.ones((2, 4)), np.ones((2, 5))]
    it = bucketed(iter(stream), warmup=8, max_buckets=8)
    batches, errors = drain(it)
    assert [b.bucket for b in batches] == [3, 4, 5]
    assert len(errors) == 1 and str(errors[0]).startswith("[shapewatch] batch has no array")


def test_a_ragged_batch_with_an_empty_row_keeps_the_rows_dtype():
    (b,) = bucketed([[[1, 2, 3], []]], buckets=(4,))
    assert b.data.dtype == np.int64 and b.data.tolist() == [[1, 2, 3, 0], [0, 0, 0, 0]]


BAD_BATCHES = ["bad", None, np.ones(3), [np.ones(2), np.ones((2, 2))]]


@FAST
@given(
    sizes=st.lists(st.integers(1, 20), max_size=25),
    faults=st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["io", "bad"])), max_size=6),
    warmup=st.integers(0, 6),
    ragged=st.booleans(),
)
def test_bucketed_yields_every_valid_batch_once_in_order_whatever_fails(
    sizes, faults, warmup, ragged
):
    def batch(i, n):
        return [tokens(n, start=i), tokens(max(n - 1, 0))] if ragged else tokens(n, i)[None]

    events = [("ok", batch(i, n)) for i, n in enumerate(sizes)]
    for pos, kind in sorted(faults, reverse=True):
        events.insert(min(pos, len(events)), (kind, BAD_BATCHES[pos % len(BAD_BATCHES)]))
    it = bucketed(Script(events), warmup=warmup, max_buckets=3)
    batches, errors = drain(it)
    assert len(errors) == sum(kind != "ok" for kind, _ in events)
    assert [b.lengths[0] for b in batches] == sizes
    for b, (i, n) in zip(batches, enumerate(sizes)):
        assert b.data[0, :n].tolist() == list(range(i, i + n))


# ---------------------------------------------------------------- found by review


def test_a_warning_made_an_error_while_planning_loses_nothing_and_iteration_goes_on():
    import warnings

    data = [np.ones(n, np.int64) for n in (1, 2, 3, 9, 10, 11)]
    it = group_by_length(data, batch_size=4, buffer_size=4, shuffle=False, max_buckets=2)
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(12):
            try:
                batch = next(it)
            except StopIteration:
                break
            except UserWarning:
                continue
            got += [int(n) for n in batch.lengths[: batch.rows]]
    assert sorted(got) == [1, 2, 3, 9, 10, 11]


@pytest.mark.parametrize("first, second", [
    (np.array([1, 2], np.int8), np.array([200], np.uint8)),
    (np.array([1, 2], np.int32), np.array([3_000_000_000], np.uint32)),
])
def test_integers_of_one_size_and_other_signedness_are_promoted_not_wrapped(first, second):
    batch = next(group_by_length([first, second], batch_size=4, buckets=(4,), shuffle=False))
    assert batch.data[1, 0] == second[0]


def test_values_that_no_common_dtype_holds_exactly_are_refused_not_rounded():
    it = group_by_length([[1, 2], np.array([2**63 + 5], np.uint64)], batch_size=4, buckets=(4,), shuffle=False)
    with pytest.raises(ValueError, match="no common dtype .* holds exactly"):
        next(it)


def _bfloat16_casts_to_float16(monkeypatch, allowed: bool) -> None:
    """numpy's casting table as ml_dtypes >= 0.7 (allowed) or an earlier release has it."""
    import ml_dtypes

    can_cast = np.can_cast

    def patched(from_, to, casting="safe"):
        pair = (np.dtype(from_) if not isinstance(from_, np.ndarray) else from_.dtype, np.dtype(to))
        if {pair[0], pair[1]} == {np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)}:
            return allowed and casting in ("same_kind", "unsafe")
        return can_cast(from_, to, casting)

    monkeypatch.setattr(np, "can_cast", patched)


@pytest.mark.parametrize("table_allows_the_cast", [False, True])
def test_float16_and_bfloat16_meet_in_float32(monkeypatch, table_allows_the_cast):
    import ml_dtypes

    _bfloat16_casts_to_float16(monkeypatch, table_allows_the_cast)
    data = [np.array([1, 2], np.float16), np.array([1.5], ml_dtypes.bfloat16)]
    batch = next(group_by_length(data, batch_size=4, buckets=(4,), shuffle=False))
    assert batch.data.dtype == np.float32 and batch.data[1, 0] == 1.5


@pytest.mark.parametrize("table_allows_the_cast", [False, True])
def test_a_float8_example_keeps_a_bfloat16_batch_and_float16_widens_it(monkeypatch, table_allows_the_cast):
    import ml_dtypes

    _bfloat16_casts_to_float16(monkeypatch, table_allows_the_cast)
    e4m3 = np.array([0.5, 448.0], ml_dtypes.float8_e4m3fn)
    data = [np.array([1, 2], ml_dtypes.bfloat16), e4m3]
    batch = next(group_by_length(data, batch_size=4, buckets=(4,), shuffle=False))
    assert batch.data.dtype == ml_dtypes.bfloat16  # every float8_e4m3fn value is a bfloat16
    data = [np.array([1, 2], ml_dtypes.bfloat16), np.array([1], np.float16)]
    batch = next(group_by_length(data, batch_size=4, buckets=(4,), shuffle=False))
    assert batch.data.dtype == np.float32  # float16 has 10 mantissa bits, bfloat16 only 7


@pytest.mark.parametrize("value, dtype", [(-1, np.uint8), (0.5, np.int32), (float("nan"), np.int64)])
def test_a_pad_value_that_would_be_stored_as_something_else_is_refused(value, dtype):
    with pytest.raises(ValueError, match="cannot be stored exactly"):
        pad_batch(np.ones(2, dtype), 3, value=value)


def test_bucketed_leaves_out_a_batch_that_its_pad_value_cannot_pad_and_goes_on():
    batches = [np.ones((2, n), np.uint8) for n in (3, 5, 9)]
    it = bucketed(batches, axis=1, warmup=3, max_buckets=1, pad_value=-1)
    for _ in range(2):  # the batches of 3 and 5 need padding: each raises once, the others stay
        with pytest.raises(ValueError, match="pad_value -1 cannot be stored exactly in dtype uint8"):
            next(it)
    assert [b.lengths.tolist() for b in it] == [[9, 9]]  # the batch of 9 needs none


def test_bucketed_goes_on_after_a_batch_above_a_plan_that_refuses_it():
    it = bucketed([np.ones((2, 3)), np.ones((2, 9)), np.ones((2, 4))], buckets=Buckets((4, 8)))
    assert next(it).bucket == 4
    with pytest.raises(ValueError, match=r"^\[shapewatch\] length 9 is above the largest boundary 8"):
        next(it)
    assert [b.bucket for b in it] == [4]


def test_values_held_before_a_widening_keep_their_value_in_the_wider_dtype():
    import ml_dtypes

    data = [np.array([127, -128], np.int8), np.array([1, 2], ml_dtypes.float8_e4m3fn)]
    batch = next(group_by_length(data, batch_size=4, buckets=(4,), shuffle=False))
    assert batch.data[0, :2].astype(np.float64).tolist() == [127.0, -128.0]


def test_integers_held_before_are_refused_a_float_that_would_round_them():
    it = group_by_length([np.array([2**53 + 1]), np.array([1.5], np.float16)], batch_size=4,
                         buckets=(4,), shuffle=False)
    with pytest.raises(ValueError, match=r"^\[shapewatch\] leaf <root> has dtype float16 .* holds exactly"):
        next(it)


def test_an_infinity_is_not_turned_into_nan_by_a_float8_format_without_infinities():
    import ml_dtypes

    data = [np.array([1.0], ml_dtypes.float8_e4m3fn), np.array([np.inf], ml_dtypes.float8_e4m3)]
    batch = next(group_by_length(data, batch_size=4, buckets=(4,), shuffle=False))
    assert np.isinf(batch.data[1, 0].astype(np.float64))


def test_a_false_is_not_stored_in_a_float_format_without_zero():
    import ml_dtypes

    data = [np.array([1.0], ml_dtypes.float8_e8m0fnu), np.array([False])]
    batch = next(group_by_length(data, batch_size=4, buckets=(4,), shuffle=False))
    assert batch.data[1, 0].astype(np.float64) == 0.0


def test_a_float_format_refused_after_the_first_batch_is_named_as_a_format_not_by_its_values():
    import ml_dtypes

    data = [np.array([1, 2], ml_dtypes.bfloat16)] * 2 + [np.array([1.0, 2.0], np.float16)]
    it = group_by_length(iter(data), batch_size=2, buckets=(2,), shuffle=False, buffer_size=2)
    next(it)
    with pytest.raises(ValueError) as error:
        next(it)
    assert str(error.value).startswith("[shapewatch] leaf <root> has float format float16, not every value of "
                                       "which bfloat16 holds; expected bfloat16, the dtype fixed by the first batch")


@pytest.mark.parametrize("make, error, match", [
    (lambda: group_by_length(None, batch_size=2), TypeError, r"examples must be an iterable of examples .*got NoneType None"),
    (lambda: group_by_length(5, batch_size=2, strategy="pack"), TypeError, r"examples must be an iterable .*got int 5"),
    (lambda: bucketed(None), TypeError, r"batches must be an iterable of batches .*got NoneType None"),
    (lambda: group_by_length([np.arange(3)], batch_size=2, seed=-1), ValueError, r"seed must be an int >= 0 .*got -1"),
], ids=["examples None", "examples an int", "batches None", "a negative seed"])
def test_a_source_that_is_no_iterable_or_a_negative_seed_is_refused_naming_it(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("strategy", ["bucket", "pack", "auto"])
def test_length_of_returning_no_int_is_a_type_error_naming_the_value_and_the_others_are_kept(strategy):
    data = [np.arange(n) for n in (3, 5, 4, 2)]
    loader = group_by_length(data, batch_size=2, strategy=strategy, shuffle=False,
                             length_of=lambda e: 3.0 if len(e) == 5 else len(e))
    with pytest.raises(TypeError, match=r"length_of must return an int in \[0, 2\*\*40\]; got float 3.0"):
        list(loader)
    rest = sorted(int(n) for b in loader for n in np.asarray(b.lengths)[:b.rows] if n)
    assert rest == [2, 3, 4]
