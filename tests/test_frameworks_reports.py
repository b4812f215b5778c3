"""Equinox and Flax NNX reports: real programs whose reports leave the user's terms.

Each test is one defect found by running small training programs under ``shapewatch.watch()``
(and ``python -m shapewatch run``) on the CPU; plain Equinox/Flax compile counts were compared
with ``jax_log_compiles`` and matched in every case below.
"""

from __future__ import annotations

import functools
import os

import pytest

import shapewatch

HERE = os.path.abspath(__file__)


def _line(text: str) -> int:
    with open(HERE) as fh:
        return next(i for i, line in enumerate(fh, 1) if text in line)


# ----------------------------------------------------------------------------------------- Equinox


def test_filter_jit_of_a_module_names_the_modules_own_arrays_when_they_cause_the_compile():
    """``eqx.filter_jit(model)``: the callable holds the arrays. Two models of one class share
    Equinox's jit; the second compiles because its weight has another shape, and the report must
    say so, not "identical shapes and dtypes ... shapewatch cannot tell which"."""
    eqx = pytest.importorskip("equinox")
    import jax.numpy as jnp

    class Net(eqx.Module):
        w: object

        def __call__(self, x):
            return self.w @ x

    with shapewatch.watch():
        small = eqx.filter_jit(Net(jnp.ones((2, 3))))
        large = eqx.filter_jit(Net(jnp.ones((4, 3))))
    small(jnp.ones(3))
    large(jnp.ones(3))
    misses = shapewatch.misses(large)
    assert [m.kind for m in misses] == ["compile", "compile"]  # as many as plain Equinox compiles
    assert "identical" not in misses[-1].explanation
    assert "w.shape[0]: 2 -> 4" in misses[-1].explanation


def test_filter_jit_of_a_partial_made_anew_says_the_partial_is_a_new_object():
    """``eqx.filter_jit(functools.partial(apply, params))`` made in a loop: Equinox holds a
    ``functools.partial`` static (it is not a pytree) and shares one jit between partials of one
    function, so each new partial compiles (as in plain Equinox). The report must say that the
    partial is a new object on every call, not "identical shapes and dtypes ... cannot tell which"."""
    eqx = pytest.importorskip("equinox")
    import jax.numpy as jnp

    def apply(params, x):
        return params["w"] @ x

    with shapewatch.watch():
        steps = [eqx.filter_jit(functools.partial(apply, {"w": jnp.ones((2, 3))})) for _ in range(2)]
    for step in steps:
        step(jnp.ones(3))
    misses = shapewatch.misses(steps[-1])
    assert len(misses) == 2
    assert "cannot tell" not in misses[-1].explanation, misses[-1].explanation


def test_filter_jit_of_an_equinox_layer_is_not_located_in_jax():
    """Every ``eqx.nn`` layer's ``__call__`` is wrapped by ``jax.named_scope``: the location must
    not be JAX's wrapper (``jax/_src/source_info_util.py:285``)."""
    eqx = pytest.importorskip("equinox")
    import jax
    import jax.numpy as jnp

    mlp = eqx.nn.MLP(4, 2, 8, 1, key=jax.random.PRNGKey(0))
    with shapewatch.watch():
        forward = eqx.filter_jit(mlp)
    forward(jnp.ones(4))
    location = shapewatch.misses(forward)[0].location
    assert "source_info_util" not in location and f"{os.sep}jax{os.sep}" not in location
    assert location.startswith(os.path.dirname(os.path.abspath(eqx.__file__)))  # MLP.__call__, in equinox/nn


@pytest.mark.parametrize("use_bias", [True, False])  # without biases: None children in the tree
def test_a_model_whose_layer_list_grew_is_not_shown_as_two_equal_texts(use_bias):
    """An Equinox model with 3 layers instead of 2: the change must not read ``A -> A``."""
    eqx = pytest.importorskip("equinox")
    import jax
    import jax.numpy as jnp

    class Stack(eqx.Module):
        layers: list

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    with shapewatch.watch():
        @eqx.filter_jit
        def forward(model, x):
            return jax.vmap(model)(x)

    key = jax.random.PRNGKey(0)
    forward(Stack([eqx.nn.Linear(3, 3, use_bias=use_bias, key=key) for _ in range(2)]), jnp.ones((2, 3)))
    forward(Stack([eqx.nn.Linear(3, 3, use_bias=use_bias, key=key) for _ in range(3)]), jnp.ones((2, 3)))
    miss = shapewatch.misses(forward)[-1]
    assert miss.explanation == "model.layers: length 2 -> 3"
    assert len(shapewatch.misses(forward)) == 2
    for change in miss.changes:
        assert str(change.old) != str(change.new), miss.explanation
    assert "model.layers" in miss.explanation  # named by the field that changed


def test_filter_jit_decorated_inside_watch_is_watched_even_if_decorated_before():
    """Equinox caches its ``jax.jit`` per function (per class for a Module): decorating again
    inside ``watch()`` (a notebook cell re-run after ``watch()``) silently gives the unwatched jit."""
    eqx = pytest.importorskip("equinox")
    import jax.numpy as jnp

    def double(x):
        return x * 2

    eqx.filter_jit(double)  # an earlier cell
    with shapewatch.watch():
        step = eqx.filter_jit(double)
    step(jnp.ones(2))
    assert len(shapewatch.misses(step)) == 1  # TypeError: ... is not a watched function


def test_a_default_left_out_of_a_filter_jit_call_is_not_called_traced_nor_fixed_with_static_argnames():
    """``step(m, x)`` then ``step(m, x, True)``: Equinox holds ``training`` static, and
    ``filter_jit`` refuses ``static_argnames``; the cause must not say "passed (traced)" nor
    propose ``static_argnames``."""
    eqx = pytest.importorskip("equinox")
    import jax.numpy as jnp

    with shapewatch.watch():
        @eqx.filter_jit
        def step(x, training=True):
            return x * 2 if training else x

    step(jnp.ones(2))
    step(jnp.ones(2), True)
    assert shapewatch.misses(step)[-1].explanation == "training: default (not passed) -> passed, static True"
    record = next(f for f in shapewatch.report().functions if f.record.function.endswith("step"))
    texts = [f"{c.text} {c.fix}" for c in record.causes]
    assert not any("traced" in t or "static_argnames" in t for t in texts), texts


def test_the_cause_of_a_static_field_that_took_several_objects_counts_and_names_them_right():
    """relu (in two compiles), then two lambdas, then two partials in ``model.act``: 5 objects of
    three kinds, not "6 different objects of partial" (the count of misses, the last one's class)."""
    eqx = pytest.importorskip("equinox")
    import jax
    import jax.numpy as jnp

    class M(eqx.Module):
        w: object
        act: object

        def __call__(self, x):
            return self.act(self.w * x)

    with shapewatch.watch():
        @eqx.filter_jit
        def forward(model, x):
            return model(x)

    forward(M(jnp.ones(3), jax.nn.relu), jnp.ones(3))
    forward(M(jnp.ones(4), jax.nn.relu), jnp.ones(4))  # the same relu, another length
    forward(M(jnp.ones(3), lambda z: z), jnp.ones(3))
    forward(M(jnp.ones(3), lambda z: z), jnp.ones(3))
    forward(M(jnp.ones(3), functools.partial(jnp.clip, min=0)), jnp.ones(3))
    forward(M(jnp.ones(3), functools.partial(jnp.clip, min=0)), jnp.ones(3))
    assert len(shapewatch.misses(forward)) == 6
    record = next(f for f in shapewatch.report().functions if f.record.function.endswith("forward"))
    text = next(c.text for c in record.causes if c.path == "model.act")
    assert "6 different objects" not in text and "objects of partial" not in text, text


# ---------------------------------------------------------------------------------------- Flax NNX


def _nnx():
    nnx = pytest.importorskip("flax.nnx")
    return nnx


def test_misses_and_no_recompiles_accept_an_nnx_jit_method_of_an_instance():
    """``@nnx.jit`` on a method: ``model.predict`` is what the user holds (flax 0.12 binds it with
    ``functools.partial``); ``misses(model.predict)`` raised TypeError (not a watched function)."""
    nnx = _nnx()
    import jax.numpy as jnp

    with shapewatch.watch():
        class Net(nnx.Module):
            def __init__(self):
                self.lin = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

            @nnx.jit
            def predict(self, x):
                return self.lin(x)

    model = Net()
    model.predict(jnp.ones((2, 3)))
    model.predict(jnp.ones((4, 3)))  # predict line
    misses = shapewatch.misses(model.predict)
    assert [m.explanation for m in misses] == ["first compile", "x.shape[0]: 2 -> 4"]
    assert misses[-1].call_site == f"{HERE}:{_line('model.predict(jnp.ones((4, 3)))  # predict line')}"
    with shapewatch.no_recompiles(model.predict):
        model.predict(jnp.ones((4, 3)))
        with pytest.raises(shapewatch.RecompileError):
            model.predict(jnp.ones((5, 3)))


def _nnx_blocks_explanation(change) -> str:
    """A two-block NNX model through a watched ``nnx.jit``, called, changed by ``change(model,
    nnx)``, called again: the second miss's explanation."""
    nnx = _nnx()
    if not hasattr(nnx, "List"):
        pytest.skip("flax < 0.11 has no nnx.List")
    import jax.numpy as jnp

    class Net(nnx.Module):
        def __init__(self):
            self.blocks = nnx.List([nnx.Linear(3, 3, rngs=nnx.Rngs(0)) for _ in range(2)])

        def __call__(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    with shapewatch.watch():
        @nnx.jit
        def forward(model, x):
            return model(x)

    model = Net()
    forward(model, jnp.ones((2, 3)))
    change(model, nnx)
    forward(model, jnp.ones((2, 3)))
    return shapewatch.misses(forward)[-1].explanation


def test_an_nnx_layer_that_changed_type_is_named_by_graph_path():
    """``model.blocks[1] = nnx.LayerNorm(...)`` in place of a Linear: the change is named
    ``model.blocks[1]``, as its leaves are (``model.blocks[1].kernel``), not ``model['blocks']['1']``."""
    def swap(model, nnx):
        model.blocks[1] = nnx.LayerNorm(3, rngs=nnx.Rngs(1))

    explanation = _nnx_blocks_explanation(swap)
    assert explanation.startswith("model.blocks[1]"), explanation
    assert "['blocks']" not in explanation


def test_an_nnx_list_that_grew_is_a_length_change_of_the_list():
    def grow(model, nnx):
        model.blocks.append(nnx.Linear(3, 3, rngs=nnx.Rngs(1)))

    assert _nnx_blocks_explanation(grow) == "model.blocks: length 2 -> 3"


def test_a_trace_that_raised_is_not_listed_as_a_compile_outside_watched_functions():
    """A watched step whose trace raised, and JAX's own traces that compiled nothing, are not
    "compiles outside watched functions" (the JSON's ``unwatched`` listed them with 0 compiles)."""
    import jax.numpy as jnp

    @shapewatch.watched_jit
    def step_that_raises(x):
        if x.shape[0] > 2:
            raise ValueError("too long")
        return x * 2

    step_that_raises(jnp.ones(2))
    with pytest.raises(ValueError, match="too long"):
        step_that_raises(jnp.ones(3))
    report = shapewatch.report()
    assert "step_that_raises" not in report.unwatched
    assert all(compiles > 0 for compiles, _ in report.unwatched.values())
    assert "step_that_raises" not in report.to_dict()["unwatched"]
