"""Flax linen with a TrainState and optax under jax.jit: leaves by key path, the user's lines."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("flax.linen")
pytest.importorskip("optax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import shapewatch  # noqa: E402
from tests._frameworks import EXAMPLES, example, line_of  # noqa: E402

HERE = os.path.abspath(__file__)
SOURCE = os.path.join(EXAMPLES, "flax_linen_training.py")


def test_a_linen_train_state_step_is_named_by_key_path_at_the_users_lines():
    with shapewatch.watch():
        ex = example("flax_linen_training")
    model = ex.Model()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    state = ex.train_state.TrainState.create(apply_fn=model.apply, params=params, tx=ex.optax.adam(1e-2))
    for tokens, labels in ex.batches(jax.random.PRNGKey(1)):
        state, _ = ex.train_step(state, tokens, labels)
    misses = shapewatch.misses(ex.train_step)
    assert [m.kind for m in misses] == ["compile"] * 3
    assert {m.location for m in misses} == {f"{SOURCE}:{line_of(SOURCE, '@jax.jit')}"}
    assert {m.call_site for m in misses} == {f"{HERE}:{line_of(HERE, 'state, _ = ex.train_step(')}"}
    paths = [a.path for a in misses[0].signature.arrays]
    assert "state.params['Dense_0']['kernel']" in paths
    assert "state.opt_state[0].mu['Embed_0']['embedding']" in paths
    assert misses[-1].explanation == "tokens.shape[1]: 12 -> 16; labels.shape[1]: 12 -> 16"
    assert [f.record.function for f in shapewatch.report().functions] == ["train_step"]
