"""Flax NNX under shapewatch: nnx.jit steps reported in the user's terms (real training steps)."""

from __future__ import annotations

import os

import pytest

nnx = pytest.importorskip("flax.nnx")
pytest.importorskip("optax")

import jax  # noqa: E402

import shapewatch  # noqa: E402
from tests._frameworks import EXAMPLES, example, line_of  # noqa: E402

HERE = os.path.abspath(__file__)
SOURCE = os.path.join(EXAMPLES, "flax_nnx_training.py")


@pytest.fixture(scope="module")
def trained():
    """The example's training loop, watched in process: lengths 8, 12, 8, 16."""
    shapewatch.reset()
    with shapewatch.watch():
        ex = example("flax_nnx_training")
    model = ex.Model(nnx.Rngs(0))
    optimizer = ex.make_optimizer(model)
    for tokens, labels in ex.batches(jax.random.PRNGKey(1)):
        ex.train_step(model, optimizer, tokens, labels)
    return ex, model, optimizer, shapewatch.misses(ex.train_step)


def test_an_nnx_jit_step_is_located_at_the_users_function_and_called_from_the_users_line(trained):
    _, _, _, misses = trained
    assert [m.kind for m in misses] == ["compile"] * 3
    assert {m.function for m in misses} == {"train_step"}
    assert {m.location for m in misses} == {f"{SOURCE}:{line_of(SOURCE, '@nnx.jit')}"}
    assert {m.call_site for m in misses} == {f"{HERE}:{line_of(HERE, 'ex.train_step(model, optimizer, tokens, labels)')}"}


def test_an_nnx_jit_steps_leaves_are_named_by_graph_path(trained):
    _, _, _, misses = trained
    paths = [a.path for a in misses[0].signature.arrays]
    assert paths[:3] == ["model.embed.embedding", "model.out.bias", "model.out.kernel"]
    assert paths[-2:] == ["tokens", "labels"]
    assert "optimizer.opt_state[0].mu.embed.embedding" in paths  # on flax < 0.11 the optimizer holds the model too
    assert ("model.out.out_features", "32") in [(s.path, s.value) for s in misses[0].signature.statics]
    assert [m.explanation for m in misses] == [
        "first compile",
        "tokens.shape[1]: 8 -> 12; labels.shape[1]: 8 -> 12",
        "tokens.shape[1]: 12 -> 16; labels.shape[1]: 12 -> 16",
    ]


def test_an_attribute_that_appears_in_the_graph_is_named(trained):
    ex, _, _, _ = trained
    with shapewatch.watch():
        @nnx.jit
        def forward(model, tokens):
            return model(tokens).sum()
    model = ex.Model(nnx.Rngs(0))
    tokens = jax.numpy.zeros((2, 4), jax.numpy.int32)
    forward(model, tokens)
    model.scale = nnx.Param(jax.numpy.ones(3))
    forward(model, tokens)
    assert shapewatch.misses(forward)[-1].explanation == (
        "model: keys {'embed','out'} -> {'embed','out','scale'}")


def test_no_recompiles_and_budgets_stop_an_nnx_jit_step(trained):
    ex, model, optimizer, _ = trained
    tokens, labels = next(ex.batches(jax.random.PRNGKey(1)))
    with shapewatch.no_recompiles(ex.train_step):
        ex.train_step(model, optimizer, tokens, labels)
        with pytest.raises(shapewatch.RecompileError, match="train_step compiled inside"):
            ex.train_step(model, optimizer, tokens[:, :5], labels[:, :5])
    old = shapewatch.configure(max_recompiles=0, on_excess="raise")
    try:
        with shapewatch.watch():
            @nnx.jit
            def budgeted_double(x):
                return x * 2
        budgeted_double(jax.numpy.ones(2))
        with pytest.raises(shapewatch.RecompileError, match="budgeted_double compiled 2 times, over its budget"):
            budgeted_double(jax.numpy.ones(3))
    finally:
        shapewatch.configure(**old)


@pytest.mark.skipif(not hasattr(getattr(nnx, "variablelib", None), "HijaxVariable"),
                    reason="flax < 0.12 has no hijax Variables (Variables that are JAX values)")
def test_a_hijax_variable_argument_is_a_leaf_read_through_what_it_lowers_to():
    @shapewatch.watched_jit
    def step(w, x):
        return (x @ w[...]).sum()

    x = jax.numpy.ones((2, 4))
    assert float(step(nnx.Param(jax.numpy.ones((4, 3)), hijax=True), x)) == 24.0
    step(nnx.Param(jax.numpy.ones((4, 3), jax.numpy.bfloat16), hijax=True), x)
    misses = shapewatch.misses(step)
    assert [(a.path, a.describe()) for a in misses[0].signature.arrays] == [
        ("w", "Variable float32[4,3]"), ("x", "float32[2,4]")]
    assert [m.explanation for m in misses] == ["first compile", "w dtype: Variable float32 -> Variable bfloat16"]


@pytest.mark.skipif(hasattr(nnx, "List") and not hasattr(nnx, "ModelAndOptimizer"),
                    reason="this flax has no nnx.ModelAndOptimizer (and its nnx.Optimizer holds no model)")
def test_an_optimizer_that_holds_the_model_names_its_state_as_the_user_reads_it():
    ex = example("flax_nnx_training")
    holds_model = getattr(nnx, "ModelAndOptimizer", None) or nnx.Optimizer  # flax < 0.11: Optimizer does
    with shapewatch.watch():
        @nnx.jit
        def step(model, optimizer, tokens, labels):
            loss, grads = nnx.value_and_grad(ex.loss_fn)(model, tokens, labels)
            optimizer.update(grads)
            return loss

    model = ex.Model(nnx.Rngs(0))
    optimizer = holds_model(model, ex.optax.adam(1e-2))
    step(model, optimizer, *next(ex.batches(jax.random.PRNGKey(1))))
    paths = [a.path for a in shapewatch.misses(step)[0].signature.arrays]
    assert paths == [
        "model.embed.embedding", "model.out.bias", "model.out.kernel",
        "optimizer.opt_state[0].count",
        "optimizer.opt_state[0].mu.embed.embedding", "optimizer.opt_state[0].mu.out.bias",
        "optimizer.opt_state[0].mu.out.kernel",
        "optimizer.opt_state[0].nu.embed.embedding", "optimizer.opt_state[0].nu.out.bias",
        "optimizer.opt_state[0].nu.out.kernel",
        "optimizer.step", "tokens", "labels",
    ]  # the model's leaves once, under the argument that passes them first
