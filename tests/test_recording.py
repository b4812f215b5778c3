"""What watched_jit records for each cache miss: signature, kind, cost, cause, call site."""

import gc
import sys
import threading
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch
from shapewatch import watched_jit


def texts(fn):
    return [m.explanation for m in shapewatch.misses(fn)]


def test_a_cache_hit_records_nothing():
    f = watched_jit(lambda x: x + 1)
    x = jnp.ones(3)
    f(x)
    f(x)
    f(jnp.zeros(3))
    assert len(shapewatch.misses(f)) == 1


def test_shape_change_on_axis_1_is_named_in_the_explanation():
    @watched_jit
    def step(batch):
        return batch["tokens"].sum()

    step({"tokens": jnp.ones((8, 128))})
    step({"tokens": jnp.ones((8, 131))})
    assert texts(step) == ["first compile", "batch['tokens'].shape[1]: 128 -> 131"]
    change = shapewatch.misses(step)[1].changes[0]
    assert (change.path, change.field, change.axis, change.old, change.new) == (
        "batch['tokens']", "shape", 1, "128", "131")


def test_signature_names_every_leaf_by_argument_and_pytree_path():
    @watched_jit
    def f(params, xs, *rest, scale=1.0):
        return params["dense"]["kernel"].sum() + xs[1].sum() + rest[0].sum() * scale

    f({"dense": {"kernel": jnp.ones((2, 3))}}, [jnp.ones(1), jnp.ones(2, jnp.int32)], jnp.ones(4))
    sig = shapewatch.misses(f)[0].signature
    assert [(a.path, a.shape, a.dtype, a.weak_type) for a in sig.arrays] == [
        ("params['dense']['kernel']", (2, 3), "float32", False),
        ("xs[0]", (1,), "float32", False),
        ("xs[1]", (2,), "int32", False),
        ("rest[0]", (4,), "float32", False),
    ]
    assert [(s.path, s.value) for s in sig.statics] == [("scale", "1.0")]  # a default is a constant


def test_dtype_change_is_explained():
    f = watched_jit(lambda x: x * 2)
    f(jnp.ones(3, jnp.float32))
    f(jnp.ones(3, jnp.int32))
    assert texts(f)[1] == "x dtype: float32 -> int32"


def test_python_scalar_to_array_is_a_weak_type_flip():
    @watched_jit
    def f(x, scale):
        return x * scale

    f(jnp.ones(2), 2.0)
    f(jnp.ones(2), jnp.float32(2.0))
    assert texts(f)[1] == "scale: Python scalar (weak_type) -> float32 array"


def test_static_argument_values_are_recorded_and_diffed():
    @watched_jit(static_argnames="mode")
    def f(x, mode="train"):
        return x if mode == "train" else -x

    f(jnp.ones(2))
    f(jnp.ones(2), mode="eval")
    miss = shapewatch.misses(f)[1]
    assert miss.explanation == "mode (static): 'train' -> 'eval'"
    assert miss.signature.statics[0].hashed_by == "value"


def test_new_dict_key_is_a_structure_change():
    @watched_jit
    def f(batch):
        return sum(v.sum() for v in batch.values())

    f({"a": jnp.ones(1), "b": jnp.ones(1)})
    f({"a": jnp.ones(1), "b": jnp.ones(1), "c": jnp.ones(1)})
    assert texts(f)[1] == "batch: keys {'a','b'} -> {'a','b','c'}"


def test_explanation_uses_the_nearest_signature_not_the_latest():
    f = watched_jit(lambda x: x + 1)
    f(jnp.ones((4, 10)))
    f(jnp.ones((7, 99)))
    f(jnp.ones((4, 11)))
    assert texts(f)[2] == "x.shape[1]: 10 -> 11"


def test_a_lambda_recreated_in_a_loop_is_recognised():
    x = jnp.ones(3)
    for _ in range(3):
        g = watched_jit(lambda v: v * 3)
        g(x)
    ms = shapewatch.misses(g)
    assert len(ms) == 3
    assert [m.recreated for m in ms] == [False, True, True]
    assert "function re-created" in ms[2].explanation


def test_kinds_top_level_inlined_transform_and_ahead_of_time():
    f = watched_jit(lambda x: jnp.sin(x))
    f(jnp.ones(2))
    jax.jit(lambda y: f(y) * 2)(jnp.ones(3))
    jax.grad(lambda y: f(y).sum())(jnp.ones(4))
    f.lower(jnp.ones(5))
    assert [m.kind for m in shapewatch.misses(f)] == ["compile", "inlined", "transform", "ahead_of_time"]


def test_costs_are_split_and_only_compiles_carry_lowering_and_backend_time():
    f = watched_jit(lambda x: jnp.tanh(x) @ x.T)
    f(jnp.ones((8, 8)))
    jax.jit(lambda y: f(y))(jnp.ones((3, 3)))
    top, inlined = shapewatch.misses(f)
    assert top.lower_s > 0 and top.compile_s > 0
    assert top.total_s == pytest.approx(top.trace_s + top.lower_s + top.compile_s)
    assert inlined.lower_s == 0 and inlined.compile_s == 0
    assert [p for p, _, _ in top.spans][-2:] == ["lower", "compile"]


def test_two_watched_functions_with_the_same_name_are_kept_apart():
    def make(k):
        def step(x):
            return x * k

        return step

    a = watched_jit(make(2))
    b = watched_jit(lambda x: x - 1)
    b.__wrapped__.__name__ = "step"
    a(jnp.ones(2))
    b(jnp.ones(2))
    b(jnp.ones(3))
    assert len(shapewatch.misses(a)) == 1 and len(shapewatch.misses(b)) == 2
    assert all(m.compile_s > 0 for m in shapewatch.misses(a) + shapewatch.misses(b))


def test_unwatched_compiles_in_between_are_not_charged_to_the_watched_function():
    from shapewatch._monitor.registry import registry

    f = watched_jit(lambda x: x + 1)
    f(jnp.ones(2))
    jax.jit(lambda x: x * 7)(jnp.ones(9))
    assert len(shapewatch.misses(f)) == 1
    assert sum(entry[0] for entry in registry.unwatched.values()) >= 1


def test_call_site_is_the_user_line_that_called():
    f = watched_jit(lambda x: x + 1)
    line = sys._getframe().f_lineno + 1
    f(jnp.ones(2))
    assert shapewatch.misses(f)[0].call_site.endswith(f"test_recording.py:{line}")


def test_user_errors_propagate_unchanged_and_leave_no_record():
    @watched_jit
    def f(x):
        if x.shape[0] == 3:
            raise KeyError("user's own")
        return x

    f(jnp.ones(2))
    with pytest.raises(KeyError, match="user's own"):
        f(jnp.ones(3))
    assert len(shapewatch.misses(f)) == 1


def test_an_internal_failure_warns_once_and_the_result_is_still_right(monkeypatch):
    from shapewatch._monitor import errors
    from shapewatch._monitor import miss as _miss

    def broken(*a, **k):
        raise RuntimeError("injected")

    monkeypatch.setattr(_miss, "signature_of", broken)
    monkeypatch.setattr(errors, "_warned", set())
    f = watched_jit(lambda x: x * 2)
    with pytest.warns(shapewatch.ShapewatchWarning, match="internal error while recording a miss"):
        out = f(jnp.ones(2))
        out2 = f(jnp.ones(3))
    assert out.tolist() == [2.0, 2.0] and out2.tolist() == [2.0] * 3


class _Static:
    def __hash__(self):
        return 1

    def __eq__(self, other):
        return isinstance(other, _Static)


def _alive_after_use(jit):
    f = jit(lambda x, s: x * 2, static_argnums=1)
    x, s = np.ones(5, np.float32), _Static()
    refs = weakref.ref(x), weakref.ref(s)
    f(x, s)
    f.clear_cache()
    jax.clear_caches()
    del x, s
    gc.collect()
    return [r() is not None for r in refs]


def test_no_reference_to_user_arrays_is_kept():
    # jax 0.5 itself keeps static arguments alive; shapewatch must add nothing.
    assert _alive_after_use(watched_jit) == _alive_after_use(jax.jit)
    assert _alive_after_use(watched_jit)[0] is False
    assert shapewatch.misses(watched_jit(lambda x, s: x * 2, static_argnums=1)) == []


def _freed_at_once_after_a_compile(compile_with):
    """Whether an array given to a compiling jit call is freed by ``del``, with no garbage collection."""
    x = jax.device_put(np.float32(1.0))
    ref = weakref.ref(x)
    gc.collect()
    gc.disable()  # a reference cycle would keep x until the next collection
    try:
        compile_with(x)
        del x
        return ref() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("jit", ["unwatched", "watched"])
def test_an_array_given_to_a_compile_is_freed_at_once_when_the_program_drops_it(jit):
    shapewatch.watched_jit(lambda v: v)  # shapewatch listens to every compile from now on
    make = jax.jit if jit == "unwatched" else watched_jit
    assert _freed_at_once_after_a_compile(lambda x: make(lambda v: v * 3)(x).block_until_ready())


def test_records_are_capped_and_drops_are_counted():
    old = shapewatch.configure(max_records=3)
    try:
        f = watched_jit(lambda x: x + 1)
        for n in range(1, 6):
            f(jnp.ones(n))
        from shapewatch._monitor.access import function_record

        rec = function_record(f)
        assert (len(rec.misses), rec.dropped, rec.compiles, rec.signatures) == (3, 2, 5, 5)
        from shapewatch._monitor.registry import code_key, registry

        state = registry.functions[code_key(f.__wrapped__)[0]]
        assert len(state.signatures) == 3  # the signatures kept for diffs are capped too
    finally:
        shapewatch.configure(**old)


def test_eight_threads_with_mixed_shapes_lose_and_duplicate_no_record():
    f = watched_jit(lambda x: x * 2)
    errors = []

    def work(i):
        try:
            for n in range(1, 7):
                f(jnp.ones(n + 10 * i))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ms = shapewatch.misses(f)
    shapes = sorted(m.signature.arrays[0].shape[0] for m in ms)
    assert shapes == sorted(n + 10 * i for i in range(8) for n in range(1, 7))
    assert len({m.seq for m in ms}) == len(ms)
    assert all(m.compile_s > 0 for m in ms)


def test_count_calls_counts_every_call():
    f = watched_jit(lambda x: x + 1, count_calls=True)
    for _ in range(4):
        f(jnp.ones(2))
    from shapewatch._monitor.access import function_record

    assert function_record(f).calls == 4
    assert f.__wrapped__.__name__ == "<lambda>"


def test_count_calls_keeps_the_jitted_functions_cache_size():
    f = watched_jit(lambda x: x + 1, count_calls=True)
    f(jnp.ones(2))
    f(jnp.ones(3))
    assert f._cache_size() == 2  # as jax.jit's object answers it


def test_disabled_shapewatch_returns_plain_jit():
    old = shapewatch.configure(enabled=False)
    try:
        f = watched_jit(lambda x: x)
        assert not shapewatch.is_watched(f)
    finally:
        shapewatch.configure(**old)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_a_bad_budget_is_a_value_error_at_decoration(bad):
    with pytest.raises(ValueError, match="max_recompiles="):
        watched_jit(lambda x: x, max_recompiles=bad)


def test_an_unknown_on_excess_lists_the_valid_values():
    with pytest.raises(ValueError, match="'warn', 'raise', 'log'"):
        watched_jit(lambda x: x, on_excess="explode")


def test_misses_of_an_unwatched_function_is_a_type_error():
    with pytest.raises(TypeError, match="not a watched function"):
        shapewatch.misses(jax.jit(lambda x: x))


def test_a_compile_without_retrace_is_recorded_and_explained():
    f = watched_jit(lambda x: x * 3)
    f(jnp.ones(3))  # uncommitted
    f(jax.device_put(jnp.ones(3), jax.devices()[0]))  # committed: same trace, new executable
    assert [m.kind for m in shapewatch.misses(f)] == ["compile", "no_retrace"]
    assert shapewatch.misses(f)[1].explanation == "x: uncommitted -> committed to cpu:0"


def test_an_argument_of_another_kind_than_an_array_is_a_leaf_named_by_its_kind():
    @watched_jit
    def f(x, token):
        return x.sum()

    f(jnp.ones(3), jax.lax.create_token())
    f(jnp.ones(4), jax.lax.create_token())
    misses = shapewatch.misses(f)
    assert [(a.path, a.describe()) for a in misses[0].signature.arrays] == [("x", "float32[3]"), ("token", "Token[]")]
    assert [m.explanation for m in misses] == ["first compile", "x.shape[0]: 3 -> 4"]
