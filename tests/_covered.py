"""A new shape right after measured steps, for tests/test_loaders_async.py (also run in a process
pinned to one core)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from shapewatch.buckets import group_by_length


def attention(w, x):
    """A step whose cost grows with the length squared (tens of ms at the top on a CPU)."""
    h = jnp.tanh(x[..., None] * w)
    s = jax.nn.softmax(h @ h.transpose(0, 2, 1), -1) @ h
    return w - 1e-6 * s.mean(0).mean(0), s.mean()


def covered(params: str = "jax"):
    """A new shape right after measured steps: (its loader, the shapes yielded, whether each
    example came once). ``params="numpy"``: the step's parameters a NumPy array, so JAX's
    backends start at the first step, after the loader's first batch."""
    step = jax.jit(lambda w, x: attention(w, x))  # a new function: it compiles
    rng = np.random.default_rng(0)
    # enough short examples that a bucket for them saves many compiles' worth on any machine (a
    # replan right after the measured steps, whatever a step costs against a compile there)
    ns = np.where(rng.random(16 * 512) < 0.2, 256, rng.integers(4, 16, 16 * 512))
    ns[:32] = 256
    examples = [np.full(int(k), i, np.float32) for i, k in enumerate(ns)]
    it = group_by_length(examples, batch_size=16, seed=0)
    w = jnp.ones((32,)) if params == "jax" else np.ones((32,), np.float32)
    loss, shapes, seen = None, [], []
    for b in it:
        w, loss = step(w, b.data)
        shapes.append(b.data.shape[1])
        seen += [int(v) for v, k in zip(np.asarray(b.data)[:, 0], b.lengths, strict=True) if k > 0]
    float(loss)
    return it, shapes, sorted(seen) == list(range(len(examples)))
