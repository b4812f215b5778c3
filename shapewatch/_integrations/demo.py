"""``python -m shapewatch demo``: a recompile storm, recorded, explained and fixed."""

from __future__ import annotations

import numpy as np


def main() -> int:
    import jax.numpy as jnp

    import shapewatch
    from shapewatch import buckets

    @shapewatch.watched_jit
    def train_step(params, batch):
        h = jnp.tanh(batch["tokens"] @ params["w"])
        return (h * batch["mask"][..., None]).sum()

    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(4.0, 0.6, size=24).astype(int) + 8, 256)
    params = {"w": jnp.ones((16, 16))}
    print("[demo] 24 training steps; each batch is padded to its own longest sequence:")
    for n in lengths:
        batch = {"tokens": jnp.ones((4, int(n), 16)), "mask": jnp.ones((4, int(n)))}
        train_step(params, batch)
    rep = shapewatch.report()
    print(rep.to_text("summary"))
    before = rep.functions[0].record.compiles

    plan = buckets.propose([int(n) for n in lengths], max_buckets=4, multiple_of=8)
    print(f"\n[demo] the same steps with lengths padded to the buckets {list(plan.boundaries)}:")
    train_step.clear_cache()  # start cold, as a fresh process would: no padded shape is cached yet
    shapewatch.reset()
    shapes: set[int] = set()
    for n in lengths:
        tokens, mask = np.ones((4, int(n), 16), np.float32), np.ones((4, int(n)), np.float32)
        batch = {"tokens": jnp.asarray(plan.pad(tokens, axis=1)), "mask": jnp.asarray(plan.pad(mask, axis=1))}
        shapes.add(batch["tokens"].shape[1])
        train_step(params, batch)
    print(shapewatch.report().summary())
    record = shapewatch.report().functions[0].record
    print(f"[demo] from a cold cache, train_step compiled {record.compiles} times ({len(shapes)} padded "
          f"lengths: {sorted(shapes)}) instead of {before}.")
    shapewatch.reset()
    return 0
