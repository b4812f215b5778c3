"""Equinox under shapewatch: eqx.filter_jit steps reported in the user's terms (real training steps)."""

from __future__ import annotations

import os
import re

import pytest

eqx = pytest.importorskip("equinox")
pytest.importorskip("optax")

import jax  # noqa: E402

import shapewatch  # noqa: E402
from tests._frameworks import example, line_of  # noqa: E402

HERE = os.path.abspath(__file__)
SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "equinox_training.py")


@pytest.fixture(scope="module")
def trained():
    """The example's training loop, watched in process: lengths 8, 12, 8, 16."""
    shapewatch.reset()
    with shapewatch.watch():
        ex = example("equinox_training")
    model = ex.Model(jax.random.PRNGKey(0))
    opt_state = ex.optimizer.init(eqx.filter(model, eqx.is_array))
    for tokens, labels in ex.batches(jax.random.PRNGKey(1)):
        model, opt_state, _ = ex.train_step(model, opt_state, tokens, labels)
    return ex, model, opt_state, shapewatch.misses(ex.train_step)


def test_a_filter_jit_step_is_located_at_the_users_function_and_called_from_the_users_line(trained):
    _, _, _, misses = trained
    assert [m.kind for m in misses] == ["compile"] * 3
    assert {m.function for m in misses} == {"train_step"}
    assert {m.location for m in misses} == {f"{SOURCE}:{line_of(SOURCE, '@eqx.filter_jit')}"}
    assert {m.call_site for m in misses} == {f"{HERE}:{line_of(HERE, 'model, opt_state, _ = ex.train_step(')}"}


def test_a_filter_jit_steps_leaves_are_named_by_parameter_and_field(trained):
    _, _, _, misses = trained
    paths = [a.path for a in misses[0].signature.arrays]
    assert paths[:3] == ["model.embed.weight", "model.out.weight", "model.out.bias"]
    assert "opt_state[0].mu.embed.weight" in paths and paths[-2:] == ["tokens", "labels"]
    assert [(s.path, s.value) for s in misses[0].signature.statics] == [("model.activation", "relu")]
    assert [m.explanation for m in misses] == [
        "first compile",
        "tokens.shape[1]: 8 -> 12; labels.shape[1]: 8 -> 12",
        "tokens.shape[1]: 12 -> 16; labels.shape[1]: 12 -> 16",
    ]


def test_a_changed_non_array_field_is_a_static_change_of_that_field(trained):
    ex, model, opt_state, _ = trained
    tokens, labels = next(ex.batches(jax.random.PRNGKey(1)))
    tokens, labels = tokens[:, :6], labels[:, :6]  # a length not compiled yet
    ex.train_step(model, opt_state, tokens, labels)
    gelu = eqx.tree_at(lambda m: m.activation, model, jax.nn.gelu)
    ex.train_step(gelu, opt_state, tokens, labels)
    # Two different functions, each named with the line of its code (jax.nn's custom_jvp functions).
    assert re.fullmatch(r"model\.activation \(static\): relu \(functions\.py:\d+\) -> gelu \(functions\.py:\d+\)",
                        shapewatch.misses(ex.train_step)[-1].explanation)


def test_no_recompiles_and_budgets_stop_a_filter_jit_step(trained):
    ex, model, opt_state, _ = trained
    tokens, labels = next(ex.batches(jax.random.PRNGKey(1)))
    ex.train_step(model, opt_state, tokens, labels)  # cached: no miss
    with shapewatch.no_recompiles(ex.train_step):
        ex.train_step(model, opt_state, tokens, labels)
        with pytest.raises(shapewatch.RecompileError, match="train_step compiled inside"):
            ex.train_step(model, opt_state, tokens[:, :5], labels[:, :5])
    old = shapewatch.configure(max_recompiles=0, on_excess="raise")
    try:
        with shapewatch.watch():
            @eqx.filter_jit
            def budgeted_double(x):
                return x * 2
        budgeted_double(jax.numpy.ones(2))
        with pytest.raises(shapewatch.RecompileError, match="budgeted_double compiled 2 times, over its budget"):
            budgeted_double(jax.numpy.ones(3))
    finally:
        shapewatch.configure(**old)
