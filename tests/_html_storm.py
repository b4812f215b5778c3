"""A small real recompile storm, recorded by shapewatch, for the HTML tests.

Three watched functions: a training step whose sequence length varies (an axis
cause with proposed buckets), an update whose learning rate is static (a static
cause), and a function whose name is HTML (to show that the page escapes it).
"""

import jax.numpy as jnp

import shapewatch

LENGTHS = (40, 33, 47, 58, 66, 75, 88, 104, 127, 45, 63, 40)
LEARNING_RATES = (0.1, 0.05, 0.02, 0.01)
HOSTILE = "<script>window.__pwned=1</script>"
HOSTILE_TEXT = '<img src=x onerror="window.__pwned=1">'


def record_storm(hostile=True):
    """Runs the storm and returns ``shapewatch.report().to_dict()`` (``hostile``: with the HTML-named function)."""

    def train_step(params, batch):
        return (jnp.tanh(batch["tokens"] @ params["w"]) * batch["mask"][..., None]).sum()

    def update(x, lr):
        return x * lr

    # New function objects each time (so that jax compiles them again), named as at module level.
    train_step.__qualname__, update.__qualname__ = "train_step", "update"
    train_step = shapewatch.watched_jit(train_step)
    update = shapewatch.watched_jit(update, static_argnames="lr")

    def html_named(x):
        return x + 1

    html_named.__name__ = html_named.__qualname__ = HOSTILE
    html_named = shapewatch.watched_jit(html_named)

    params = {"w": jnp.ones((8, 8))}
    for i, n in enumerate(LENGTHS):  # a training loop: a step per batch, the learning rate changed every 3
        train_step(params, {"tokens": jnp.ones((2, n, 8)), "mask": jnp.ones((2, n))})
        if i % 3 == 0:
            update(jnp.ones(3), lr=LEARNING_RATES[i // 3])
    if hostile:
        html_named(jnp.ones(2))
        html_named(jnp.ones(3))
    return shapewatch.report().to_dict()


def with_hostile_text(data):
    """The report with HTML in an explanation and a call site, as a saved file might carry."""
    for f in data["functions"]:
        if f["function"] == HOSTILE:
            f["misses"][-1]["explanation"] = HOSTILE_TEXT
            f["misses"][-1]["call_site"] = HOSTILE_TEXT + ":1"
    return data


def misses_of(data):
    return sum(len(f["misses"]) for f in data["functions"])
