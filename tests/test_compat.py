"""The JAX internals that shapewatch reads, checked on the installed JAX.

Each signal named in ``shapewatch._monitor.compat`` has a test here, so that a JAX
release that changes one fails loudly in this file rather than quietly giving
wrong miss kinds. CI runs this file on the oldest, the most installed and the
newest supported JAX.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch
from shapewatch._monitor import compat

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3])
HAS_PARENT_TRACES = JAX_VERSION >= (0, 6, 2)


def _seen_while_tracing(outer):
    """What the trace context and jit's frames say inside a jitted function, for each way of calling it."""
    seen = []

    def inner(x):
        seen.append((compat.enclosing_kind(), compat.enclosing_kind_from_frames(sys._getframe(1))))
        return x * 2

    outer(jax.jit(inner))
    return seen[0]


CALLS = {
    "top": lambda f: f(jnp.ones(3)),
    "inlined": lambda f: jax.jit(lambda x: f(x) + 1)(jnp.ones(3)),
    "inlined under grad": lambda f: jax.jit(jax.grad(lambda x: f(x).sum()))(jnp.ones(3)),
    "inlined under scan": lambda f: jax.lax.scan(lambda c, x: (c + f(x), None), jnp.zeros(3), jnp.ones((2, 3))),
    "transform": lambda f: jax.grad(lambda x: f(x).sum())(jnp.ones(3)),
    "transform by vmap": lambda f: jax.vmap(f)(jnp.ones((2, 3))),
}


@pytest.mark.parametrize("how", sorted(CALLS))
def test_the_trace_context_tells_how_a_jit_call_was_entered(how):
    from_context, from_frames = _seen_while_tracing(CALLS[how])
    expected = how.split(" ")[0]
    if HAS_PARENT_TRACES:
        assert from_context == expected
    else:
        assert from_context is None  # no link to the parent trace: the frames tell instead
    assert from_frames == expected


def test_an_ahead_of_time_trace_has_no_cache_miss_frame():
    seen = []

    def inner(x):
        seen.append(compat.enclosing_kind_from_frames(sys._getframe(1)))
        return x

    jax.jit(inner).lower(jnp.ones(2))
    assert seen == [None]


def test_the_function_being_compiled_is_found_on_the_stack():
    found = []
    jitted = jax.jit(lambda x: x + 1)

    def listener(event, duration, **kwargs):
        if event == compat.LOWER_EVENT:
            found.append(compat.called_function(sys._getframe()))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jitted(jnp.ones(5))
    finally:
        _unregister(listener)
    assert found and found[-1] is jitted.__wrapped__


def test_a_transformation_is_seen_on_the_stack_of_its_compile():
    seen = []
    jitted = jax.jit(lambda x: x * 3)
    jitted(jnp.ones(6))  # traced once; grad below compiles without a retrace

    def listener(event, duration, **kwargs):
        if event == compat.LOWER_EVENT:
            seen.append(compat.transformation_on_stack(sys._getframe()))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jax.grad(lambda x: jitted(x).sum())(jnp.ones(6))
        jax.vmap(jitted)(jnp.ones((2, 6)))
    finally:
        _unregister(listener)
    assert "differentiation (grad, vjp, jvp)" in seen and "vmap" in seen


def test_the_monitoring_events_shapewatch_listens_to_are_emitted():
    events = set()

    def listener(event, duration, **kwargs):
        events.add(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jax.jit(lambda x: x - 7)(jnp.ones(7))
    finally:
        _unregister(listener)
    assert {compat.TRACE_EVENT, compat.LOWER_EVENT, compat.COMPILE_EVENT} <= events


def test_the_configuration_that_jit_keys_on_changes_under_a_context():
    before = compat.trace_context()
    with jax.default_matmul_precision("highest"):
        inside = compat.trace_context()
    assert before is not None and before != inside


def test_jax_names_functions_as_shapewatch_expects():
    import functools

    assert compat.fun_name(lambda x: x) == "<lambda>"
    assert compat.fun_name(functools.partial(jnp.add, 1)) == "add"


def _unregister(listener):
    from jax._src import monitoring

    remove = getattr(monitoring, "unregister_event_duration_listener", None) or monitoring._unregister_event_duration_listener_by_callback
    remove(listener)


def test_the_ahead_of_time_stages_are_seen_on_the_stack_of_their_lowering_and_compile():
    seen = []

    def listener(event, duration, **kwargs):
        if event in (compat.LOWER_EVENT, compat.COMPILE_EVENT):
            seen.append(compat.ahead_of_time_on_stack(sys._getframe()))

    jitted = jax.jit(lambda x: x / 3)
    nine, ten = jnp.ones(9), jnp.ones(10)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        jitted.trace(nine).lower().compile()
        jitted(ten)
    finally:
        _unregister(listener)
    assert seen == [True, True, False, False]  # lowered and compiled by the stage objects, then a call


AHEAD = {
    "call": lambda f: f(jnp.ones(3)),
    "lower": lambda f: f.lower(jnp.ones(3)),
    "trace": lambda f: f.trace(jnp.ones(3)),
    "eval_shape": lambda f: f.eval_shape(jnp.ones(3)),
    "call inside a lowering": lambda f: jax.jit(lambda x: f(x) + 1).lower(jnp.ones(3)),
}


@pytest.mark.parametrize("how", sorted(AHEAD))
def test_jits_frames_tell_an_ahead_of_time_trace_from_a_call(how):
    seen = []

    def inner(x):
        seen.append(compat.ahead_of_time_call(sys._getframe(1)))
        return x * 2

    AHEAD[how](jax.jit(inner))
    assert seen == [how in ("lower", "trace", "eval_shape")]


def test_a_jitted_objects_function_is_the_one_it_traces():
    def f(x):
        return x

    assert compat.jitted_function(jax.jit(f)) is f


def test_clear_cache_of_every_jitted_object_is_the_evict_function_of_pjit_that_shapewatch_wraps():
    from jax._src import pjit

    import shapewatch

    shapewatch.watched_jit(lambda x: x)  # wraps the evict function (once per process)
    name = next(n for n in compat.CLEAR_CACHE_FUNCTIONS if hasattr(pjit, n))
    assert hasattr(getattr(pjit, name), "__shapewatch_note__")
    assert type(jax.jit(lambda x: x)).clear_cache is getattr(pjit, name)  # jit sets it on its type


def test_the_real_arguments_of_a_jit_call_are_read_from_its_cache_miss_frame():
    from shapewatch._monitor import signature as _signature

    seen = []

    def fun(x, *, y):
        seen.append(compat.call_arguments(sys._getframe(1), hook))
        return x + y

    hook = fun
    x = jax.device_put(jnp.ones(3), jax.devices()[0])
    jax.jit(fun)(x, y=2.0)
    (args, kwargs), = seen
    assert args[0] is x and kwargs == {"y": 2.0}
    assert compat.committed(x) and not compat.committed(jnp.ones(3))
    assert compat.abstract_value(2.0).weak_type and compat.abstract_value(x).shape == (3,)
    assert _signature.Concrete(x).aval == compat.abstract_value(x)
    seen.clear()
    jax.jit(fun).lower(jnp.ones(5), y=2.0)  # ahead of time: no call on the stack
    assert seen == [None]


def test_a_concrete_array_is_the_array_type_placements_read_fast():
    from shapewatch._monitor import placement as _placement

    x, y = jnp.ones(3), jax.device_put(jnp.ones(2), jax.devices()[0])
    assert type(x) is compat.ArrayImpl and type(y) is compat.ArrayImpl
    assert x._sharding is x.sharding and (x._committed, y._committed) == (False, True)
    fast = _placement.placements_of([x, y, x, 1.0, np.ones(2)])
    assert fast == [_placement.placement_of(v) for v in (x, y, x, 1.0, np.ones(2))]
    assert fast[0] is fast[2] and fast[1].committed and fast[3].host


def test_misses_under_jax_tracer_leak_checker_leave_no_tracer_behind():
    # a miss reads JAX's flat tracers from its trace frame; on Python < 3.13 reading a frame's
    # locals leaves a snapshot on it that JAX's leak checker finds after the trace
    f = shapewatch.watched_jit(lambda p, x: x.sum() + p["a"].sum())
    with jax.checking_leaks():
        for n in (2, 3, 4):  # the first miss of a structure, then the short way twice
            assert float(f({"a": jnp.ones(2)}, jnp.ones(n))) == n + 2
    assert len(shapewatch.misses(f)) == 3
