"""No false guard error on any supported JAX: watched functions called inside every kind of trace.

Each watched function has a zero budget (one compile) that raises, and the calls
are repeated under ``no_recompiles``: a guard may only fire for a compile of the
watched function itself, never for a trace inlined into another function.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch

JAX_NAMES_EVENTS = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 7)


def _shard_map():
    fn = getattr(jax, "shard_map", None)
    if fn is None:
        from jax.experimental.shard_map import shard_map as fn
    return fn


def _in_shard_map(f, x):
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    spec = PartitionSpec("d")
    return _shard_map()(f, mesh=mesh, in_specs=(spec,), out_specs=spec)(x)


#: Contexts in which the watched function is staged into an enclosing trace: it never compiles
#: on its own, whatever the shapes.
INLINED = {
    "jit": lambda f, x: jax.jit(lambda v: f(v) + 1)(x),
    "grad in jit": lambda f, x: jax.jit(jax.grad(lambda v: f(v).sum()))(x),
    "vmap in jit": lambda f, x: jax.jit(jax.vmap(f))(jnp.stack([x, x])),
    "scan": lambda f, x: jax.lax.scan(lambda c, v: (c + f(v), None), jnp.zeros_like(x), jnp.stack([x, x]))[0],
    "cond": lambda f, x: jax.lax.cond(True, f, lambda v: v, x),
    "while_loop": lambda f, x: jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, f(c[1])), (0, x))[1],
    "checkpoint in jit": lambda f, x: jax.jit(jax.checkpoint(lambda v: f(v) * 2))(x),
    "shard_map in jit": lambda f, x: jax.jit(lambda v: _in_shard_map(f, v))(x),
}

#: Contexts that evaluate the watched function outside any jit: it compiles for them, once per shape.
OUTSIDE_JIT = {
    "grad": lambda f, x: jax.grad(lambda v: f(v).sum())(x),
    "vmap": lambda f, x: jax.vmap(f)(jnp.stack([x, x])),
    "checkpoint": lambda f, x: jax.checkpoint(lambda v: f(v) * 2)(x),
    "shard_map": lambda f, x: _in_shard_map(f, x),
}


def _watched():
    return shapewatch.watched_jit(lambda v: jnp.sin(v) * 2, max_recompiles=0, on_excess="raise")


@pytest.mark.parametrize("context", sorted(INLINED))
def test_a_watched_function_inlined_in_any_trace_never_fires_a_guard(context):
    f, call = _watched(), INLINED[context]
    for n in (3, 4, 5):  # the enclosing function recompiles; f is only traced into it
        call(f, jnp.ones(n))
    with shapewatch.no_recompiles():
        for n in (3, 4, 5):
            call(f, jnp.ones(n))
    with shapewatch.no_recompiles(f), shapewatch.expect_compiles(f, 0):
        call(f, jnp.ones(6))  # a new shape: the enclosing function compiles, f does not
    assert shapewatch.report().functions[0].record.compiles == 0


@pytest.mark.parametrize("context", sorted(OUTSIDE_JIT))
def test_a_watched_function_under_a_transformation_outside_jit_counts_one_compile_per_shape(context):
    f, call = _watched(), OUTSIDE_JIT[context]
    first = call(f, jnp.ones(3))
    again = call(f, jnp.ones(3))
    np.testing.assert_allclose(first, again)
    with shapewatch.no_recompiles(f):
        call(f, jnp.ones(3))
    assert shapewatch.report().functions[0].record.compiles <= 1
    if context == "checkpoint" and not JAX_NAMES_EVENTS:
        # jax < 0.7 names no function in its events, and checkpoint evaluates f with no jit call
        # on the stack: that compile cannot be attributed, so it is counted outside watched functions.
        call(f, jnp.ones(4))
        assert sum(n for n, _ in shapewatch.report().unwatched.values()) >= 1
        return
    with pytest.raises(shapewatch.RecompileError, match="over its budget"):
        call(f, jnp.ones(4))  # a second shape is a second compile: over the budget of one
