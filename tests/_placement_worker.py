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
