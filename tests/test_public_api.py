import inspect

import jax.numpy as jnp

import shapewatch


def test_public_surface_imports_cleanly_and_matches_all():
    public = {n for n in dir(shapewatch) if n.isidentifier() and not n.startswith("_")}  # pytest may add @py_*
    assert set(shapewatch.__all__) - {"__version__"} == public
    for name in set(shapewatch.__all__) - {"__version__"}:
        obj = getattr(shapewatch, name)
        # each is shapewatch's own and says what it is (the API page is generated from these)
        assert (obj.__name__ if inspect.ismodule(obj) else obj.__module__).startswith("shapewatch"), name
        assert (inspect.getdoc(obj) or "").strip(), f"{name} has no docstring"


def test_exceptions_look_public():
    for cls in (shapewatch.RecompileError, shapewatch.RecompileWarning, shapewatch.ShapewatchWarning,
                shapewatch.BenchWarning):
        assert cls.__module__ == "shapewatch"


def test_suggest_buckets_uses_the_lengths_the_function_saw():
    f = shapewatch.watched_jit(lambda batch: batch["tokens"].sum())
    for n in (10, 12, 30, 31, 64):
        f({"tokens": jnp.ones((2, n))})
    plan = shapewatch.suggest_buckets(f, leaf="batch['tokens']", axis=1, max_buckets=2)
    assert plan.boundaries[-1] == 64 and len(plan.boundaries) == 2


def test_suggest_buckets_names_the_leaves_it_knows():
    f = shapewatch.watched_jit(lambda x: x)
    f(jnp.ones(2))
    import pytest

    with pytest.raises(ValueError, match="its array leaves are: x"):
        shapewatch.suggest_buckets(f, leaf="y", axis=0)


def test_watched_jit_signature_is_documented():
    assert "max_recompiles" in inspect.signature(shapewatch.watched_jit).parameters
