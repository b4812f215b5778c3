"""Two recompiles that only placement explains, on 8 host CPU devices.

``train_step`` returns ``params['w2']`` sharded along ``model`` although it was given it
replicated, so its second call compiles again; ``scale`` gets the same array on a mesh of
the same shape and axis names over the devices in reverse order. Run with
``SHAPEWATCH_REPORT=full python examples/placement.py``.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import shapewatch  # noqa: E402

mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))


@shapewatch.watched_jit
def train_step(params, x):
    grads = jax.grad(lambda p: ((x @ p["w1"]) @ p["w2"]).sum())(params)
    new = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    new["w2"] = jax.lax.with_sharding_constraint(new["w2"], NamedSharding(mesh, P("model")))
    return new


@shapewatch.watched_jit
def scale(x):
    return x * 2


params = {"w1": jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P(None, "model"))),
          "w2": jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P()))}
x = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("data")))
for _ in range(3):
    params = train_step(params, x)

for order in (jax.devices(), jax.devices()[::-1]):
    other = Mesh(np.array(order).reshape(2, 4), ("data", "model"))
    scale(jax.device_put(jnp.ones((8, 8)), NamedSharding(other, P("data"))))
