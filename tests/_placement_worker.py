"""Runs one placement case on 8 host CPU devices and prints its misses as JSON (tests/test_placement.py)."""

from __future__ import annotations

import json
import os
import sys
import warnings

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["SHAPEWATCH_REPORT"] = "off"
warnings.simplefilter("ignore", DeprecationWarning)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import shapewatch  # noqa: E402

mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))


def on(spec):
    return NamedSharding(mesh, spec)


def carried():  # the step returns w2 sharded along 'model'; it was given replicated
    @shapewatch.watched_jit
    def train_step(params, x):
        w2 = jax.lax.with_sharding_constraint(params["w2"] * 0.9, on(P("model")))
        return {"w2": w2}, (x @ w2).sum()

    params = {"w2": jax.device_put(jnp.ones((8, 8)), on(P()))}
    x = jax.device_put(jnp.ones((4, 8)), on(P("data")))
    for _ in range(3):
        params, _ = train_step(params, x)
    return train_step


def state_placed_after_the_first_step():  # uncommitted at first; the step returns it placed on the mesh
    @shapewatch.watched_jit
    def train_step(state, x):
        w = jax.lax.with_sharding_constraint(state["params"]["w"] * 0.9, on(P(None, "model")))
        b = jax.lax.with_sharding_constraint(state["params"]["b"] * 0.9, on(P()))
        step = jax.lax.with_sharding_constraint(state["step"] + 1, on(P()))
        return {"params": {"b": b, "w": w}, "step": step}, (x @ w).sum()

    state = {"params": {"b": jnp.zeros(8), "w": jnp.ones((8, 8))}, "step": jnp.zeros((), jnp.int32)}
    for _ in range(3):
        state, _ = train_step(state, jnp.ones((4, 8)))
    return train_step


def another_axis():
    f = shapewatch.watched_jit(lambda x: x * 2)
    f(jax.device_put(jnp.ones((8, 8)), on(P("data"))))
    f(jax.device_put(jnp.ones((8, 8)), on(P("model"))))
    return f


def uncommitted():
    f = shapewatch.watched_jit(lambda x: x + 1)
    f(jax.device_put(jnp.ones(4), jax.devices()[0]))
    f(jnp.ones(4))
    return f


def another_device():
    f = shapewatch.watched_jit(lambda x: x + 1)
    f(jax.device_put(jnp.ones(4), jax.devices()[0]))
    f(jax.device_put(jnp.ones(4), jax.devices()[1]))
    return f


def host():
    f = shapewatch.watched_jit(lambda x: x + 1)
    f(np.ones(8, np.float32))
    f(jax.device_put(jnp.ones(8), on(P("model"))))
    f(np.ones(8, np.float32))
    return f


def nnx():
    from flax import nnx as fnnx

    class Model(fnnx.Module):
        def __init__(self, rngs):
            self.w = fnnx.Param(jnp.ones((8, 8)))

        def __call__(self, x):
            return x @ self.w

    model = Model(fnnx.Rngs(0))

    @shapewatch.watched_jit
    def step(state, x):
        m = fnnx.merge(graphdef, state)
        m.w.value = jax.lax.with_sharding_constraint(m.w.value * 0.9, on(P("model")))
        return fnnx.state(m), m(x).sum()

    graphdef, state = fnnx.split(model)
    state = jax.device_put(state, on(P()))
    x = jax.device_put(jnp.ones((4, 8)), on(P("data")))
    for _ in range(3):
        state, _ = step(state, x)
    return step


def nnx_model_and_optimizer():  # the model's w2 comes back sharded; the optimizer holds the model
    import optax
    from flax import nnx as fnnx

    class Model(fnnx.Module):
        def __init__(self):
            self.w1 = fnnx.Param(jnp.ones((8, 8)))
            self.w2 = fnnx.Param(jnp.ones((8, 8)))

        def __call__(self, x):
            return x @ self.w1 @ self.w2

    with shapewatch.watch():  # nnx.jit's own jax.jit, watched
        @fnnx.jit
        def train_step(model, optimizer, x):
            loss, grads = fnnx.value_and_grad(lambda m: m(x).sum())(model)
            optimizer.update(grads)
            model.w2.value = jax.lax.with_sharding_constraint(model.w2.value, on(P(None, "model")))
            return loss

    model = Model()
    optimizer = getattr(fnnx, "ModelAndOptimizer", fnnx.Optimizer)(model, optax.adam(1e-3))  # flax < 0.11: Optimizer
    for _ in range(3):
        train_step(model, optimizer, jnp.ones((4, 8)))
    return train_step


def equinox():
    import equinox as eqx

    model = eqx.nn.Linear(8, 8, key=jax.random.PRNGKey(0))
    model = jax.device_put(model, on(P()))

    @shapewatch.watched_jit
    def step(model, x):
        w = jax.lax.with_sharding_constraint(model.weight * 0.9, on(P("model")))
        return eqx.tree_at(lambda m: m.weight, model, w), jax.vmap(model)(x).sum()

    x = jax.device_put(jnp.ones((4, 8)), on(P("data")))
    for _ in range(3):
        model, _ = step(model, x)
    return step


if __name__ == "__main__":
    fn = globals()[sys.argv[1]]()
    report = shapewatch.report()
    print(json.dumps({
        "jax": jax.__version__,
        "misses": [{"kind": m.kind, "call_site": m.call_site, "location": m.location, "explanation": m.explanation}
                   for m in shapewatch.misses(fn)],
        "causes": [{"kind": c.kind, "path": c.path, "text": c.text, "fix": c.fix}
                   for f in report.functions for c in f.causes],
        "json": json.loads(report.to_json())["values"],
    }))
