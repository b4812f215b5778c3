"""Across runs: what the persistent compilation cache did, and why a second run compiled again.

Run it twice with a persistent cache (the directory is the first argument)::

    python examples/across_runs.py /tmp/jax-cache          # compiles; writes the run manifest
    python examples/across_runs.py /tmp/jax-cache          # the report says why it compiled again

``MIN_COMPILE`` sets ``jax_persistent_cache_min_compile_time_secs`` (JAX's default, 1 s,
writes none of these small compiles), ``LENGTHS`` the batch lengths (``16,24``).
"""

from __future__ import annotations

import os
import sys

import jax

if __package__ in (None, ""):  # run as a script from a source tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

jax.config.update("jax_compilation_cache_dir", sys.argv[1] if len(sys.argv) > 1 else "/tmp/jax-cache")
if "MIN_COMPILE" in os.environ:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ["MIN_COMPILE"]))

import jax.numpy as jnp  # noqa: E402

import shapewatch  # noqa: E402


@shapewatch.watched_jit
def train_step(params, batch):
    logits = batch["tokens"] @ params["w"]
    return ((logits - batch["labels"]) ** 2).mean()


params = {"w": jnp.ones((8, 4))}
for n in [int(v) for v in os.environ.get("LENGTHS", "16,24").split(",")]:
    train_step(params, {"tokens": jnp.ones((n, 8)), "labels": jnp.zeros((n, 4))})
