"""Leaves that changed the same way in the same misses are one cause with one fix, their leaves listed."""

import html
import json

import jax.numpy as jnp

import shapewatch
from shapewatch import watched_jit


def causes_of(f):
    name = shapewatch.misses(f)[0].function
    return next(r.causes for r in shapewatch.report().functions if r.record.function == name)


def params(dtype):
    return {"dense": {"bias": jnp.zeros(4, dtype), "kernel": jnp.ones((3, 4), dtype)}, "scale": jnp.ones((), dtype)}


def test_leaves_cast_to_another_dtype_in_one_miss_are_one_cause_that_lists_them():
    @watched_jit
    def step(params, x):
        return (x @ params["dense"]["kernel"] + params["dense"]["bias"]).sum() * params["scale"]

    x = jnp.ones((2, 3))
    step(params(jnp.float32), x)
    step(params(jnp.bfloat16), x)
    (cause,) = causes_of(step)
    assert (cause.kind, cause.path, cause.misses) == ("dtype", "params", 1)
    assert cause.text == ("params: the dtype of 3 leaves took 2 values: float32, bfloat16; "
                          "leaves: params['dense']['bias'], params['dense']['kernel'], params['scale']")
    assert cause.paths == ("params['dense']['bias']", "params['dense']['kernel']", "params['scale']")
    assert cause.fix == "fix the dtype at the data source (cast once, before the call)"


def test_leaves_that_changed_in_different_misses_stay_apart():
    @watched_jit
    def f(a, b):
        return a.sum() + b.sum()

    f(jnp.ones(2), jnp.ones(2))
    f(jnp.ones(2, jnp.bfloat16), jnp.ones(2))
    f(jnp.ones(2, jnp.bfloat16), jnp.ones(2, jnp.bfloat16))
    assert sorted(c.text for c in causes_of(f)) == [
        "a dtype took 2 values: bfloat16, float32", "b dtype took 2 values: float32, bfloat16"]


def test_arguments_passed_by_keyword_together_are_one_cause_with_one_fix():
    @watched_jit
    def f(x, y, z):
        return x + y + z

    x = jnp.ones(3)
    f(x, x, x)
    f(x, y=x, z=x)
    (cause,) = causes_of(f)
    assert cause.text == ("y and z were passed positionally in some calls and by keyword in others (jit caches "
                          "each way apart); changed 1 time")
    assert cause.fix == "pass y and z the same way every call (always positionally or always by keyword)"


def test_the_headline_names_a_grouped_cause_without_its_list_of_leaves():
    @watched_jit
    def step(params):
        return params["dense"]["kernel"].sum() + params["dense"]["bias"].sum() + params["scale"]

    step(params(jnp.float32))
    step(params(jnp.bfloat16))
    headline = shapewatch.report().to_text().splitlines()[0]
    assert headline.endswith("cause: params: the dtype of 3 leaves took 2 values: float32, bfloat16)")


def test_json_and_html_reports_carry_the_grouped_cause_and_its_leaves():
    @watched_jit
    def step(params):
        return params["dense"]["kernel"].sum() + params["scale"]

    step(params(jnp.float32))
    step(params(jnp.float16))
    report = shapewatch.report()
    name = shapewatch.misses(step)[0].function
    (function,) = [f for f in json.loads(report.to_json())["functions"] if f["function"] == name]
    (cause,) = function["causes"]
    assert cause["paths"] == ["params['dense']['bias']", "params['dense']['kernel']", "params['scale']"]
    assert cause["text"].endswith("; leaves: params['dense']['bias'], params['dense']['kernel'], params['scale']")
    assert html.escape(cause["text"]) in report.to_html()


def test_arguments_left_to_their_defaults_together_are_one_cause_with_one_fix():
    @watched_jit
    def f(x, y=None, z=None):
        return x if y is None else x + y.sum() + z.sum()

    x = jnp.ones(3)
    f(x)
    f(x, jnp.ones(2), jnp.ones((4, 4)))
    (cause,) = causes_of(f)
    assert cause.text == ("y and z were left to their defaults in some calls and passed in others: each way "
                          "compiles apart; changed 1 time")
    assert cause.fix == "pass y and z in every call or in none"


def test_a_miss_that_changed_a_thousand_leaves_is_explained_in_a_bounded_line():
    @watched_jit
    def step(params, x):
        return sum(leaf.sum() for leaf in params.values()) + x.sum()

    tree = {f"w{i:04d}": jnp.ones(2) for i in range(1000)}
    step(tree, jnp.ones(2))
    cast = {k: v.astype(jnp.bfloat16) for k, v in tree.items()}
    cast["w0000"] = jnp.ones(3)  # one leaf changed otherwise, in the same miss
    assert float(step(cast, jnp.ones(2, jnp.int32))) == 2 * 999 + 3 + 2
    explanation = shapewatch.misses(step)[1].explanation
    assert explanation == ("params['w0000'].shape[0]: 2 -> 3; dtype of 999 leaves: float32 -> bfloat16 "
                           "(params['w0001'], params['w0002'], params['w0003'] and 996 more); "
                           "x dtype: float32 -> int32")
    assert len(shapewatch.report().to_text()) < 10_000
