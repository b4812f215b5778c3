"""Six classic causes of JAX recompiles, in a program that knows nothing of shapewatch.

Run one under shapewatch to see it recorded, explained and fixed:

    python -m shapewatch run examples/recompile_causes.py length
    python -m shapewatch run examples/recompile_causes.py static_float
    ... (weak_type, recreated, nested, threads)
"""

import sys
import threading
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import jit


def varying_length():
    @jax.jit
    def train_step(params, batch):
        return jnp.tanh(batch["tokens"] @ params["w"]).sum()

    rng = np.random.default_rng(0)
    params = {"w": jnp.ones((8, 8))}
    for n in rng.integers(17, 120, size=12):
        train_step(params, {"tokens": jnp.ones((4, int(n), 8))})


def static_float():
    @partial(jit, static_argnames="lr")
    def update(w, lr):
        return w - lr * w

    for lr in (0.1, 0.05, 0.02, 0.01):
        update(jnp.ones(4), lr=lr)


def weak_type():
    @jit
    def scale(x, s):
        return x * s

    scale(jnp.ones(4), 2.0)
    scale(jnp.ones(4), jnp.float32(2.0))


def recreated():
    x = jnp.ones(4)
    for _ in range(4):
        jax.jit(lambda v: v * 2)(x)


def nested():
    inner = jax.jit(lambda v: jnp.sin(v))

    @jax.jit
    def outer(v):
        return inner(v) + 1

    for n in (3, 4, 5):
        outer(jnp.ones(n))


def threads():
    f = jax.jit(lambda v: v + 1)

    def work(k):
        for n in range(1, 4):
            f(jnp.ones(n + 10 * k))

    ts = [threading.Thread(target=work, args=(k,), name=f"worker-{k}") for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


CAUSES = {"length": varying_length, "static_float": static_float, "weak_type": weak_type,
          "recreated": recreated, "nested": nested, "threads": threads}

if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "length"
    CAUSES[which]()
    print(f"ran {which}")
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
