"""The adapter interface, library modules, and watch(): framework-neutral, without any framework."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import pytest

import shapewatch
from shapewatch._monitor import adapt
from shapewatch._monitor.config import from_environ


def test_a_library_module_is_never_the_call_site(tmp_path, monkeypatch):
    (tmp_path / "teamlib.py").write_text("def fit(step, x):\n    return step(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import teamlib

    step = shapewatch.watched_jit(lambda x: x + 1)
    teamlib.fit(step, jnp.ones(2))
    assert shapewatch.misses(step)[-1].call_site.endswith("teamlib.py:2")
    old = shapewatch.configure(library_modules=["teamlib"])
    try:
        teamlib.fit(step, jnp.ones(3)); line = sys._getframe().f_lineno  # noqa: E702
        assert shapewatch.misses(step)[-1].call_site == f"{__file__}:{line}"
    finally:
        shapewatch.configure(**old)


def test_library_modules_come_from_the_environment_and_must_be_names():
    assert from_environ({"SHAPEWATCH_LIBRARY_MODULES": "a.b, c"}).library_modules == ("a.b", "c")
    with pytest.raises(ValueError, match="library_modules"):
        shapewatch.configure(library_modules="teamlib")


def test_watch_is_undone_on_leaving_the_block_and_by_unwatch():
    plain = jax.jit
    with shapewatch.watch():
        assert shapewatch.is_watched(jax.jit(lambda x: x))
    assert jax.jit is plain
    shapewatch.watch()
    try:
        assert shapewatch.is_watched(jax.jit(lambda x: x))
    finally:
        shapewatch.unwatch()
    assert jax.jit is plain


class _Wrapped:
    """A tiny framework: its jit traces ``_call(packed)`` where packed = (user function, args)."""

    def __init__(self, fun):
        self.fun = fun
        self.jitted = shapewatch.watched_jit(_call, static_argnums=0)

    def __call__(self, *args):
        return self.jitted(self.fun, args)


def _call(fun, args):
    return fun(*args)


class _TinyAdapter(adapt.Adapter):
    name = "tiny"

    def resolve(self, fun, args, kwargs):
        if fun is not _call:
            return None
        user, user_args = args
        return user, [(f"arg{i}", a) for i, a in enumerate(user_args)]

    def jitted(self, obj):
        return obj.jitted if isinstance(obj, _Wrapped) else None


def test_a_new_framework_is_one_adapter_naming_its_users_function_and_arguments():
    adapter = adapt.register(_TinyAdapter())
    try:
        def user_step(x):
            return x * 2
        step = _Wrapped(user_step)
        step(jnp.ones(2))
        step(jnp.ones(3))
        misses = shapewatch.misses(step)
        assert misses[-1].function.endswith("user_step")
        assert misses[-1].explanation == "arg0.shape[0]: 2 -> 3"
    finally:
        adapt.unregister(adapter)


def test_a_function_whose_traces_all_raised_is_not_in_the_report():
    @shapewatch.watched_jit
    def broken(x):
        raise ValueError("no")

    with pytest.raises(ValueError):
        broken(jnp.ones(2))
    assert "broken" not in [f.record.function for f in shapewatch.report().functions]


def test_two_equal_looking_unhashable_static_leaves_are_the_same_leaf():
    from shapewatch._monitor.signature import _static_leaf

    assert _static_leaf("dynamic_donate", {}) == _static_leaf("dynamic_donate", {})
