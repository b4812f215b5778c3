"""The fix for a varying length: bounded or storm by cost, safe for its axis, and honest about longer lengths.

Each program is a real watched function on real JAX (CPU), called with the lengths of one
pattern; the fix is read from the report's cause.
"""

import inspect
import re

import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch
from shapewatch import buckets, watched_jit


def axis_fix():
    (function,) = shapewatch.report().functions
    return next(c for c in function.causes if c.kind == "axis").fix


def bucketed_pipeline(count_calls=False):
    """A text classifier's step, fed by a pipeline that buckets lengths to 8, 16, 24 and 32."""
    @watched_jit(count_calls=count_calls)
    def train_step(tokens):
        return jnp.tanh(tokens).sum()

    for n in [16, 8, 32, 24] * 25:
        train_step(np.ones((64, n), np.float32))


def test_a_few_lengths_on_a_grid_each_compiled_once_are_bounded_and_padding_is_not_the_advice():
    bucketed_pipeline()
    fix = axis_fix()
    assert fix.startswith("bounded: 4 lengths (on a grid of 8: the program's own buckets), each compiled once, ")
    assert "padding would save 3 compiles (" in fix and "add 38% work to every call: it pays only if the " in fix
    assert "otherwise keep these shapes; if it pays: pad to the buckets [32]" in fix
    assert "storm" not in fix


def test_a_bounded_fix_with_counted_calls_gives_the_step_time_under_which_padding_pays():
    bucketed_pipeline(count_calls=True)
    fix = axis_fix()
    found = re.search(r"it pays only if the run's steps take under ([\d.]+) (ms|s) in all, a step under ([\d.]+) "
                      r"(ms|s) over the 100 calls counted \(the step time is unknown: shapewatch does not time "
                      r"calls; shapewatch\.bench\(fn, \*args\) measures one\); otherwise keep these shapes", fix)
    assert found is not None, fix
    in_all, per_step = (float(v) * (1e-3 if unit == "ms" else 1) for v, unit in (found.group(1, 2), found.group(3, 4)))
    assert per_step == pytest.approx(in_all / 100, rel=0.06, abs=1e-3)  # one budget, said two ways (rounded)


def test_a_bounded_fix_without_counted_calls_says_the_step_time_is_unknown_and_gives_no_step_budget():
    bucketed_pipeline()
    fix = axis_fix()
    assert "it pays only if the run's steps take under " in fix
    assert " in all (the step time is unknown: shapewatch does not time calls; shapewatch.bench(fn, *args) " \
           "measures one); otherwise keep these shapes" in fix
    assert ", a step under " not in fix


def two_lengths(shape_of, lengths):
    @watched_jit
    def step(x):
        return jnp.tanh(x).sum()

    for n in lengths:
        step(np.ones(shape_of(n), np.float32))
    return axis_fix()


def test_two_irregular_lengths_on_a_sequence_axis_each_compiled_once_are_bounded_not_a_storm():
    fix = two_lengths(lambda n: (4, n), [37, 53, 37, 53, 53])
    assert fix.startswith("bounded: 2 lengths (37 and 53: two shapes), each compiled once, "), fix
    assert "storm" not in fix
    assert "padding would save 1 compile (" in fix and "add 15% work to every call: it pays only if" in fix  # 16 of 106 padded
    assert "; if it pays: pad to the buckets [53] (shapewatch.buckets.propose): 1 compile instead of 2" in fix
    assert "padding moves the last real position" in fix


def test_two_irregular_lengths_of_a_vector_are_bounded_and_three_that_keep_coming_are_still_a_storm():
    assert two_lengths(lambda n: (n,), [3, 5]).startswith("bounded: 2 lengths (3 and 5: two shapes), each compiled once")
    shapewatch.reset()
    assert two_lengths(lambda n: (4, n), [37, 53, 41]).startswith("storm: each new length compiles (3 compiles so far")


def test_rows_that_grow_step_by_step_are_not_called_a_decoding_context():
    fix = two_lengths(lambda n: (n, 8), [3, 5, 7, 9])  # a Haiku apply's batch of 3, 5, 7, 9 rows
    assert fix.startswith("storm: each new length compiles (4 compiles so far"), fix
    assert "decoding" not in fix and "last real position" not in fix
    assert "mask them out of losses and metrics" in fix


def test_a_last_partial_batch_is_bounded_and_its_fix_names_masking_and_pad_batch():
    @watched_jit
    def eval_step(logits):
        return logits.sum() / logits.shape[0]  # a mean over the batch: padded rows would count

    for n in [64] * 13 + [40]:
        eval_step(np.ones((n, 10), np.float32))
    fix = axis_fix()
    assert fix.startswith("bounded: 2 lengths (a full and a short batch: a last, partial one), each compiled once")
    assert "add 60% work to each short batch" in fix  # (64 - 40) / 40 on the short batch, not on every call
    assert "pad the short batch to 64 rows (shapewatch.buckets.pad_batch(batch, 64))" in fix
    assert "mask them out of losses and metrics (a mean over shape[0] counts them)" in fix
    assert "Batch.rows and Batch.mask" in fix
    assert "if each came equally often" not in fix


def test_a_context_growing_by_one_token_per_compile_gets_one_shape_at_the_maximum_or_a_cache_first():
    @watched_jit
    def next_token(ctx):
        return jnp.tanh(ctx)[:, -1].sum()  # reads the last position

    for n in range(11, 41):
        next_token(np.ones((1, n), np.float32))
    fix = axis_fix()
    assert fix.startswith("the length grows by 1 per compile, in order (11 to 40: a decoding loop's context, "
                          "30 compiles")
    first, _, rest = fix.partition("; buckets only after that")
    assert "compile one shape at the largest length" in first and "the true index of the last real position" in first
    assert "or keep a cache of fixed size" in first
    assert "reading positions at the true length" in rest


def test_lengths_in_random_order_that_keep_coming_are_a_storm_padded_to_buckets_with_positions_named():
    @watched_jit
    def step(x):
        return jnp.tanh(x).sum()

    for n in np.random.default_rng(0).integers(5, 200, 30):
        step(np.ones((2, int(n)), np.float32))
    fix = axis_fix()
    assert fix.startswith("storm: each new length compiles (")
    assert "; pad to the buckets [" in fix
    assert "padding moves the last real position: what reads positions (x[:, -1], a cumulative sum" in fix


def test_every_fix_says_that_longer_lengths_compile_again_and_how_to_give_the_maximum():
    for lengths in ([16, 8, 32, 24], [64, 64, 40], list(range(11, 20)), [5, 90, 17, 33, 2, 150]):
        shapewatch.reset()

        @watched_jit
        def step(x):
            return jnp.tanh(x).sum()

        for n in lengths:
            step(np.ones((n, 3), np.float32))
        fix = axis_fix()
        caveat = re.search(r"; lengths longer than (\d+) will compile again: give the largest the program can see "
                           r"\(shapewatch\.buckets\.propose\(lengths, max_length=\.\.\.\), or a loader's "
                           r"buckets=\[\.\.\., maximum\]\)$", fix)
        assert caveat is not None, fix
        largest_bucket = max(map(int, re.findall(r"\d+", fix.partition("pad to the buckets [")[2].partition("]")[0])),
                             default=0)
        assert int(caveat.group(1)) == max(max(lengths), largest_bucket)


def test_the_names_a_fix_cites_exist_in_the_buckets_api():
    assert "max_length" in inspect.signature(buckets.propose).parameters
    assert list(inspect.signature(buckets.pad_batch).parameters)[:2] == ["tree", "batch_size"]
    assert "buckets" in inspect.signature(buckets.group_by_length).parameters
    assert "buckets" in inspect.signature(buckets.bucketed).parameters
    fields = set(buckets.Batch._fields)
    assert {"rows", "mask", "lengths"} <= fields


def test_functions_are_ranked_by_the_time_a_fix_would_save_not_by_their_compiles_in_all():
    from shapewatch._reports.report import FunctionReport, _by_time_a_fix_saves

    def record(name, compiles, seconds):
        return shapewatch.FunctionRecord(key=name, function=name, module="m", location="m.py:1", compiles=compiles,
                                         kinds={"compile": compiles}, signatures=compiles, trace_s=0.0, lower_s=0.0,
                                         compile_s=seconds, calls=None, dropped=0, misses=())

    once = FunctionReport(record("big_model_step", 1, 40.0), ())  # one long compile: no fix saves any of it
    storm = FunctionReport(record("small_step", 30, 6.0), ())  # 29 of its 30 compiles are what a fix saves
    assert [f.record.function for f in sorted([once, storm], key=_by_time_a_fix_saves)] == ["small_step",
                                                                                           "big_model_step"]
