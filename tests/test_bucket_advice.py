"""The fix for a length that varied: its buckets, and the padding they add, weighed by calls when counted."""

import collections

import jax
import jax.numpy as jnp
import numpy as np

import shapewatch
from shapewatch import watched_jit
from shapewatch._monitor.jit import hook_of
from shapewatch.buckets import propose

# Most calls are short; a few are long (as in a text data set).
LENGTHS = [8] * 60 + [9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 8, 13, 45, 9, 8, 41]


def step_over(lengths, **options):
    @watched_jit(**options)
    def step(x):
        return jnp.tanh(x).sum()

    for n in lengths:
        step(np.ones((2, n), np.float32))
    return step


def axis_cause():
    (function,) = shapewatch.report().functions
    return next(c for c in function.causes if c.kind == "axis")


def test_calls_are_counted_per_signature_once_the_function_recompiles_on_a_shape():
    step = step_over(LENGTHS, count_calls=True)
    calls = {m.signature.arrays[0].shape[1]: m.calls for m in shapewatch.report().functions[0].record.misses}
    assert calls == dict(collections.Counter(LENGTHS))
    assert shapewatch.report().functions[0].record.calls == len(LENGTHS)
    assert hook_of(step).tally is not None


def test_a_function_that_keeps_its_shape_counts_calls_but_not_per_signature():
    step = step_over([8] * 5, count_calls=True)
    (function,) = shapewatch.report().functions
    assert function.record.calls == 5
    assert [m.calls for m in function.record.misses] == [None]
    assert hook_of(step).tally is None


def test_the_padding_of_the_fix_is_weighed_by_the_calls_counted():
    step_over(LENGTHS, count_calls=True)
    cause = axis_cause()
    plan = propose(LENGTHS, max_buckets=3)
    assert (f"; pad to the buckets {list(plan.boundaries)} (shapewatch.buckets.propose): 3 compiles "
            f"instead of 11, adding {plan.waste(LENGTHS):.0%} padding over the "
            f"{len(LENGTHS)} calls counted; ") in cause.fix
    assert "(most frequent: 8 (62 calls), " in cause.text


def test_the_histogram_counts_calls_when_they_are_counted():
    step_over(LENGTHS, count_calls=True)
    bars = axis_cause().histogram
    assert bars[0] == "bars: calls counted per length"
    assert sum(int(line.split()[-1]) for line in bars[1:]) == len(LENGTHS)


def test_without_counted_calls_the_fix_says_that_each_length_weighs_once():
    step_over(LENGTHS)
    cause = axis_cause()
    distinct = sorted(set(LENGTHS))
    plan = propose(distinct, max_buckets=3)
    assert (f"adding {plan.waste(distinct):.0%} padding over the 11 lengths seen, if each came equally often (how "
            "often each came is unknown: cached calls do not reach shapewatch; count them with "
            "watched_jit(..., count_calls=True)); ") in cause.fix
    assert cause.histogram[0] == "bars: distinct lengths traced, each once (calls not counted)"
    assert sum(int(line.split()[-1]) for line in cause.histogram[1:]) == 11


def test_the_html_histogram_says_what_its_bars_count():
    step_over(LENGTHS, count_calls=True)
    page = shapewatch.report().to_html()
    assert '<p class="note">calls counted per length</p>' in page
    assert "<title>8: 62 calls</title>" in page
    shapewatch.reset()
    step_over(LENGTHS)
    page = shapewatch.report().to_html()
    assert '<p class="note">distinct lengths traced, each once (calls not counted)</p>' in page
    assert "<title>8: 5 misses</title>" not in page and "<title>8: 1 miss</title>" in page


def test_calls_of_a_length_compiled_for_two_static_values_before_counting_began_are_counted():
    @watched_jit(count_calls=True, static_argnames="mode")
    def step(x, mode):
        return jnp.tanh(x).sum() * (1.0 if mode == "train" else 2.0)

    plain = jax.jit(step.__wrapped__, static_argnames="mode")
    for n in [8] * 5 + [9] + [8] * 20:
        for mode in ("train", "eval"):
            x = np.ones((2, n), np.float32)
            assert float(step(x, mode=mode)) == float(plain(x, mode=mode))
    cause = axis_cause()
    assert "(most frequent: 8 (50 calls), 9 (2 calls))" in cause.text
    assert "over the 52 calls counted; " in cause.fix


def test_calls_of_a_length_compiled_in_two_dtypes_before_counting_began_are_counted():
    step = watched_jit(lambda x: jnp.tanh(x).sum(), count_calls=True)
    step(np.ones((2, 8), np.float32))
    step(np.ones((2, 8), np.float16))
    for n in [9] + [8] * 30:
        step(np.ones((2, n), np.float32))
    assert "(most frequent: 8 (30 calls), 9 (1 call))" in axis_cause().text
