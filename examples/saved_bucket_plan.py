"""A training loop whose loader plans its buckets with no numbers and saves what it measured.

``group_by_length`` linked to a watched attention step (``compile_records``) measures the
compile and step costs as it trains; its ``report()`` goes to ``loader.json`` (or the path
given), which ``shapewatch buckets loader.json --max-buckets auto`` reads and a next run
takes as ``prior=``. Usage: ``python examples/saved_bucket_plan.py [PATH]``.
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

import shapewatch
from shapewatch.buckets import group_by_length

rng = np.random.default_rng(0)
examples = [rng.integers(1, 64, n).astype(np.int32)
            for n in np.clip(rng.lognormal(np.log(48), 1.0, 1600), 2, 512).astype(int)]
emb = jnp.asarray(rng.standard_normal((64, 16)), jnp.float32)


@shapewatch.watched_jit
def step(emb, tokens, mask):
    x = emb[tokens]
    s = x @ x.transpose(0, 2, 1)
    return (jax.nn.softmax(jnp.where(mask[:, None, :], s, -1e9), -1) @ x).sum()


loader = group_by_length(examples, batch_size=16, compile_records=shapewatch.compile_records(step))
for batch in loader:
    float(step(emb, batch.data, batch.mask))  # wait for the step, as a loop that logs does
with open(sys.argv[1] if len(sys.argv) > 1 else "loader.json", "w") as fh:
    json.dump(loader.report(), fh)
