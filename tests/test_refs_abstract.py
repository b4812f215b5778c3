"""``jax.Ref`` arguments under ``watched_jit``: what ``jax.jit`` tells apart, the signature must too.

``jax.jit`` keys its cache on the abstract value, and a Ref's (``Ref{float32[3]}``) is
not an array's (``float32[3]``): passing a Ref where an array was passed compiles
again. The miss must name that argument as the cause, not call the signatures
identical.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import shapewatch

new_ref = getattr(jax, "new_ref", None)
pytestmark = pytest.mark.skipif(new_ref is None, reason=f"jax {jax.__version__} has no jax.new_ref")


def test_an_array_argument_turned_into_a_ref_is_the_named_cause():
    placed = jax.device_put(jnp.zeros(3), jax.devices()[0])  # committed, as a Ref's buffer is
    traces = []

    @jax.jit
    def plain(r):
        traces.append(jax.typeof(r))
        return r[...] * 2

    plain(placed)
    plain(new_ref(placed))
    assert len(traces) == 2  # jax.jit traces again for the Ref

    watched = shapewatch.watched_jit(lambda r: r[...] * 2)
    assert watched(placed).tolist() == watched(new_ref(placed)).tolist() == [0.0] * 3
    first, second = shapewatch.misses(watched)
    assert first.signature != second.signature
    assert second.explanation.startswith("r dtype: float32 -> Ref float32"), second.explanation
    (leaf,) = second.signature.arrays
    assert (leaf.path, leaf.shape, leaf.dtype) == ("r", (3,), "Ref float32")


def test_a_ref_and_an_array_in_one_pytree_are_told_apart_by_path():
    @shapewatch.watched_jit
    def step(state):
        state["acc"][...] += state["x"]
        return state["x"] * 1

    step({"acc": new_ref(jnp.zeros(2)), "x": jnp.ones(2)})
    (miss,) = shapewatch.misses(step)
    assert [(a.path, a.dtype) for a in miss.signature.arrays] == [
        ("state['acc']", "Ref float32"), ("state['x']", "float32")]


def test_warm_skips_a_ref_signature_it_cannot_rebuild():
    from shapewatch._integrations.warm import abstract_arguments

    sig = {"arrays": [{"path": "r", "shape": [3], "dtype": "Ref float32", "weak_type": False}],
           "structure": {"r": "PyTreeDef(*)"}}
    with pytest.raises(ValueError, match="r"):
        abstract_arguments(sig)


def _transformed_ref():
    """A view of a Ref (``ref.at[1:3]``), where this jax makes one (jax 0.10's ``Ref.at`` is not implemented)."""
    if new_ref is None:  # jax 0.5: no public Ref (the module's tests skip)
        return None
    try:
        return new_ref(jnp.zeros(4)).at[1:3]
    except NotImplementedError:
        return None


@pytest.mark.skipif(_transformed_ref() is None, reason=f"jax {jax.__version__} has no Ref views (ref.at[...])")
@pytest.mark.xfail(strict=True, reason="known: a TransformedRef argument is one pytree leaf to jax.tree_util; "
                                        "the signature holds it as a static (its repr), not as the Ref it views")
def test_a_ref_view_argument_is_named_as_a_ref_not_a_static():
    @shapewatch.watched_jit
    def bump(r):
        r[...] += 1

    whole = new_ref(jnp.zeros(4))
    bump(whole.at[1:3])
    assert whole[...].tolist() == [0.0, 1.0, 1.0, 0.0]
    (miss,) = shapewatch.misses(bump)
    assert miss.signature.statics == ()
    assert [a.dtype for a in miss.signature.arrays] == ["Ref float32"]


def _hijax_param():
    """A high-level value (Flax's ``nnx.Param(..., hijax=True)``, flax >= 0.12), or None."""
    try:
        from flax import nnx

        return nnx.Param(jnp.full(3, 2.0), hijax=True)
    except Exception:  # no flax, or a flax without hijax Variables
        return None


@pytest.mark.skipif(_hijax_param() is None, reason="flax is missing or has no hijax Variables")
def test_a_high_level_argument_is_not_closed_over_by_the_hook():
    """On a miss the signature reads each concrete leaf's placement; ``.sharding`` of a
    high-level value (a hijax Variable) reads it, and inside jit's trace that made JAX take the
    concrete value as a constant (jax 0.12) or one more input (jax 0.10) of the traced program."""

    def body(m, x):
        return x * 2

    def traced(jit):
        jitted, param = jit(body), _hijax_param()
        assert jitted(param, jnp.ones(3)).tolist() == [2.0] * 3
        closed = jitted.trace(param, jnp.ones(3)).jaxpr  # the call's trace, from jit's cache
        return len(closed.consts), len(closed.in_avals)

    assert traced(shapewatch.watched_jit) == traced(jax.jit) == (0, 2)
