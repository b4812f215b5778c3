"""Budgets, no-recompile sections, freeze and expect_compiles, on real JAX (CPU)."""

from __future__ import annotations

import logging
import threading
import warnings

import jax
import jax.numpy as jnp
import pytest

import shapewatch
from shapewatch._guards import guards as _guards


def watched(**options):
    """A new watched function; records are keyed by code, so one per test (or use ``another``)."""

    @shapewatch.watched_jit(**options)
    def step(x):
        return x * 2 + 1

    return step


def another(**options):
    @shapewatch.watched_jit(**options)
    def other(x):
        return x - 1

    return other


@pytest.fixture(autouse=True)
def _no_leftover_guards():
    yield
    shapewatch.unfreeze()
    assert _guards._sections == ()


# ---------------------------------------------------------------- budgets


def test_a_budget_warns_once_per_function_with_the_cause_and_the_fix():
    step, other = watched(max_recompiles=1, on_excess="warn"), another(max_recompiles=0, on_excess="warn")
    with pytest.warns(shapewatch.RecompileWarning) as caught:
        for n in (3, 4, 5, 6):
            step(jnp.ones(n))
        other(jnp.ones(2))
        other(jnp.ones(7))
    assert len(caught) == 2
    text = str(caught[0].message)
    assert text.startswith("[shapewatch] ")
    assert "step compiled 3 times, over its budget of 2" in text
    assert f"call site: {__file__}:" in text
    assert "this miss: x.shape[0]: 4 -> 5" in text
    assert "x.shape[0] took 3 values in [3, 5]" in text
    assert "fix:" in text
    assert caught[0].filename == __file__
    assert shapewatch.misses(step)[-1].explanation == "x.shape[0]: 5 -> 6"


def test_raise_stops_the_compile_and_keeps_the_compiled_signatures_usable():
    step = watched(max_recompiles=1, on_excess="raise")
    step(jnp.ones(3))
    step(jnp.ones(4))
    with pytest.raises(shapewatch.RecompileError, match=r"step compiled 3 times") as err:
        step(jnp.ones(9))
    assert "This compile was stopped" in str(err.value)
    assert step(jnp.ones(3)).tolist() == [3.0] * 3
    assert step(jnp.ones(4)).shape == (4,)
    with pytest.raises(shapewatch.RecompileError, match=r"x.shape\[0\]: 4 -> 9"):
        step(jnp.ones(9))  # retrying the same bad shape raises again, with the same diff
    assert [m.explanation for m in shapewatch.misses(step)] == ["first compile", "x.shape[0]: 3 -> 4"]
    assert _state(step).compiles == 2


def test_a_warning_turned_into_an_error_by_the_filters_stops_the_compile_as_raise_would():
    step = watched(max_recompiles=0, on_excess="warn")
    step(jnp.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", shapewatch.RecompileWarning)
        with pytest.raises(shapewatch.RecompileError, match="over its budget") as err:
            step(jnp.ones(4))
        with pytest.raises(shapewatch.RecompileError, match="over its budget"):
            step(jnp.ones(4))
    causes, cause = [], err.value.__cause__  # JAX may put its unfiltered stack trace in between
    while cause is not None:
        causes.append(cause)
        cause = cause.__cause__
    assert any(isinstance(c, shapewatch.RecompileWarning) for c in causes)
    assert _state(step).compiles == 1


def test_log_writes_a_warning_on_the_shapewatch_logger_for_each_excess(caplog):
    step = watched(max_recompiles=0, on_excess="log")
    with caplog.at_level(logging.WARNING, logger="shapewatch"):
        for n in (3, 4, 5):
            step(jnp.ones(n))
    messages = [r.getMessage() for r in caplog.records if r.name == "shapewatch"]
    assert len(messages) == 2
    assert messages[0].startswith("[shapewatch] step compiled 2 times")


def test_the_global_budget_applies_to_functions_without_their_own():
    old = shapewatch.configure(max_recompiles=0, on_excess="raise")
    try:
        step = watched()
        step(jnp.ones(3))
        with pytest.raises(shapewatch.RecompileError):
            step(jnp.ones(4))
    finally:
        shapewatch.configure(**old)


def test_the_budget_counts_compiles_not_traces_inlined_under_grad_in_an_outer_jit():
    inner = watched(max_recompiles=0, on_excess="raise")

    @jax.jit
    def outer_grad(x):
        return jax.grad(lambda y: inner(y).sum())(x)

    for n in (3, 4, 5):
        outer_grad(jnp.ones(n))
    inner.lower(jnp.ones(6))  # ahead of time: a trace, not a compile
    assert {m.kind for m in shapewatch.misses(inner)} == {"inlined", "ahead_of_time"}
    assert _state(inner).compiles == 0


def test_grad_outside_jit_counts_as_one_compile_per_shape():
    step = watched(max_recompiles=0, on_excess="raise")
    jax.grad(lambda x: step(x).sum())(jnp.ones(3))
    with pytest.raises(shapewatch.RecompileError, match="compiled 2 times"):
        jax.grad(lambda x: step(x).sum())(jnp.ones(4))


# ---------------------------------------------------------------- no_recompiles


def test_no_recompiles_raises_at_the_first_miss_with_the_full_explanation():
    step = watched()
    step(jnp.ones(3))
    with pytest.raises(shapewatch.RecompileError) as err, shapewatch.no_recompiles(step):
        step(jnp.ones(3))
        step(jnp.ones(8))
    text = str(err.value)
    assert text.startswith("[shapewatch] step compiled inside shapewatch.no_recompiles(step).")
    assert "this miss: x.shape[0]: 3 -> 8" in text and "cause:" in text and "fix:" in text
    assert step(jnp.ones(3)).shape == (3,)


def test_no_recompiles_ignores_warm_calls_of_a_function_with_a_debug_callback():
    seen = []

    @shapewatch.watched_jit
    def logged(x):
        jax.debug.callback(lambda v: seen.append(v.shape), x)
        return x + 1

    logged(jnp.ones(3)).block_until_ready()
    with shapewatch.no_recompiles():
        for _ in range(3):
            logged(jnp.ones(3)).block_until_ready()
    jax.effects_barrier()
    assert len(seen) == 4


def test_no_recompiles_ignores_eager_ops_and_unwatched_jits_on_new_shapes():
    with shapewatch.no_recompiles():
        for n in (3, 5, 11):
            jnp.ones(n) + 1
            jax.jit(lambda x: x - 1)(jnp.ones(n))


def test_no_recompiles_ignores_a_watched_function_inlined_into_an_unwatched_jit():
    step = watched()
    with shapewatch.no_recompiles():
        for n in (3, 4):
            jax.jit(lambda x: step(x) * 3)(jnp.ones(n))
    assert {m.kind for m in shapewatch.misses(step)} == {"inlined"}


def test_no_recompiles_of_named_functions_leaves_the_others_free():
    guarded, free = watched(), another()
    with shapewatch.no_recompiles(guarded) as section:
        free(jnp.ones(3))
        with pytest.raises(shapewatch.RecompileError):
            guarded(jnp.ones(3))
    assert [m.explanation for m in section.violations] == ["first compile"]
    assert shapewatch.misses(guarded) == []


def test_nested_sections_each_guard_their_own_functions():
    a, b = watched(), another()
    with shapewatch.no_recompiles(a):
        b(jnp.ones(2))
        with shapewatch.no_recompiles(b):
            with pytest.raises(shapewatch.RecompileError, match=r"no_recompiles\(other\)"):
                b(jnp.ones(4))
        b(jnp.ones(4))
        with pytest.raises(shapewatch.RecompileError):
            a(jnp.ones(2))
    a(jnp.ones(2))


def test_a_section_in_the_main_thread_stops_a_miss_in_another_thread():
    step = watched()
    step(jnp.ones(3))
    outcome = {}

    def worker():
        try:
            step(jnp.ones(3))
            step(jnp.ones(5))
        except shapewatch.RecompileError as e:
            outcome["error"] = e

    with shapewatch.no_recompiles(step) as section:
        thread = threading.Thread(target=worker, name="worker")
        thread.start()
        thread.join()
    assert "x.shape[0]: 3 -> 5" in str(outcome["error"])
    assert [m.thread for m in section.violations] == ["worker"]


def test_a_compile_without_a_retrace_inside_a_section_is_stopped_while_it_is_lowered():
    step = watched()
    step(jnp.ones(3))
    committed = jax.device_put(jnp.ones(3), jax.devices()[0])  # committed: JAX compiles again, no retrace
    with pytest.raises(shapewatch.RecompileError, match="compiled inside"), shapewatch.no_recompiles(step):
        step(committed)
    assert _state(step).compiles == 1  # the stopped compile built nothing and is not counted
    assert step(committed).tolist() == [3.0, 3.0, 3.0]  # outside the section it compiles and works


def test_the_compile_of_a_signature_lowered_before_warns_since_it_was_already_built():
    step = watched()
    step.lower(jnp.ones(4))
    with pytest.warns(shapewatch.RecompileWarning, match="could not stop it"), shapewatch.no_recompiles(step):
        assert step(jnp.ones(4)).shape == (4,)
    assert _state(step).compiles == 1


def test_guards_reject_what_is_not_watched_or_not_valid():
    with pytest.raises(TypeError, match="not a watched function"), shapewatch.no_recompiles(lambda x: x):
        pass
    with pytest.raises(ValueError, match="'raise' or 'warn'"):
        shapewatch.freeze(on_miss="log")
    with pytest.raises(ValueError, match="n must be an integer >= 0"), shapewatch.expect_compiles(watched(), -1):
        pass


def test_an_internal_failure_of_the_guards_warns_and_lets_the_compile_through(monkeypatch):
    from shapewatch._monitor import errors

    monkeypatch.setattr(errors, "_warned", set())
    monkeypatch.setattr(_guards, "_decide", lambda state, miss: 1 / 0)
    step = watched()
    with pytest.warns(shapewatch.ShapewatchWarning, match="checking guards"), shapewatch.no_recompiles():
        assert step(jnp.ones(2)).shape == (2,)


# ---------------------------------------------------------------- freeze


def test_freeze_raises_for_any_watched_function_until_unfreeze():
    step = watched()
    step(jnp.ones(3))
    shapewatch.freeze()
    step(jnp.ones(3))
    with pytest.raises(shapewatch.RecompileError, match=r"compiled inside shapewatch.freeze\(\) \(frozen at"):
        step(jnp.ones(4))
    with pytest.raises(shapewatch.RecompileError):
        another()(jnp.ones(1))
    shapewatch.unfreeze()
    assert step(jnp.ones(4)).shape == (4,)


def test_freeze_with_warn_warns_at_each_compile():
    step = watched()
    shapewatch.freeze(on_miss="warn")
    with pytest.warns(shapewatch.RecompileWarning) as caught:
        step(jnp.ones(3))
        step(jnp.ones(4))
    assert len(caught) == 2
    assert len(shapewatch.misses(step)) == 2


# ---------------------------------------------------------------- expect_compiles


def test_expect_compiles_passes_on_the_exact_count():
    step = watched()
    with shapewatch.expect_compiles(step, 2) as section:
        for n in (3, 3, 4, 4):
            step(jnp.ones(n))
    assert len(section.misses) == 2


@pytest.mark.parametrize(("sizes", "expected", "got"), [((3, 4, 5), 2, 3), ((3,), 2, 1)])
def test_expect_compiles_lists_what_compiled_when_the_count_is_off(sizes, expected, got):
    step = watched()
    with pytest.raises(shapewatch.RecompileError) as err, shapewatch.expect_compiles(step, expected):
        for n in sizes:
            step(jnp.ones(n))
    lines = str(err.value).splitlines()
    assert lines[0] == f"[shapewatch] expected exactly {expected} compiles of step, got {got}:"
    assert lines[1].startswith("  1. x: float32[3]: first compile [compile] at ")
    assert len(lines) == 1 + got


def test_expect_compiles_at_most_accepts_fewer_and_rejects_more():
    step = watched()
    step(jnp.ones(3))
    with shapewatch.expect_compiles(step, 1, at_most=True):
        step(jnp.ones(3))
    with pytest.raises(shapewatch.RecompileError, match="at most 1 compile of step, got 2"), \
            shapewatch.expect_compiles(step, 1, at_most=True):
        step(jnp.ones(4))
        step(jnp.ones(5))


def test_expect_compiles_of_zero_says_that_nothing_compiled_is_right():
    step = watched()
    step(jnp.ones(3))
    with shapewatch.expect_compiles(step, 0):
        step(jnp.ones(3))
    with pytest.raises(shapewatch.RecompileError, match="nothing compiled"), shapewatch.expect_compiles(step, 1):
        step(jnp.ones(3))


def _state(fn):
    from shapewatch._monitor.access import state_of

    return state_of(fn)
