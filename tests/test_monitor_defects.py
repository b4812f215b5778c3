"""Right counts and names, and a program that never breaks: the monitor's reviewed defects.

Each test is one reproduced defect (issue 18): a correct program that shapewatch
broke, or a count, kind or attribution it got wrong.
"""

import dataclasses
import functools
import gc
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch
from shapewatch import watched_jit


def kinds(fn):
    return [m.kind for m in shapewatch.misses(fn)]


def run_python(code, *args, env=None):
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full, timeout=120)


# ------------------------------------------------------------ the program keeps working


def test_a_bound_method_watched_again_in_a_loop_keeps_working_after_the_first_wrapper_dies():
    class Model:
        def apply(self, x):
            return x * 2

    m = Model()
    for n in (1, 2, 3):
        f = watched_jit(m.apply)
        assert f(jnp.ones(n)).tolist() == [2.0] * n
        del f
        gc.collect()


def test_equal_callable_dataclasses_each_call_their_own_instance():
    @dataclasses.dataclass(frozen=True)
    class Scale:
        k: float

        def __call__(self, x):
            return x * self.k

    for n in (1, 2):
        f = watched_jit(Scale(3.0))
        assert f(jnp.ones(n)).tolist() == [3.0] * n
        del f
        gc.collect()


def test_with_shapewatch_switched_off_the_guards_and_misses_leave_the_program_working():
    out = run_python("""
        import jax.numpy as jnp, shapewatch as sw
        @sw.watched_jit
        def step(x): return x + 1
        step(jnp.ones(2))
        with sw.no_recompiles(step):
            step(jnp.ones(3))
        with sw.expect_compiles(step, 5):
            step(jnp.ones(4))
        print(sw.misses(step), sw.is_watched(step), step(jnp.ones(2)).tolist())
    """, env={"SHAPEWATCH": "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] False [2.0, 2.0]"


def test_the_jitted_object_has_the_functions_attributes_and_annotations_and_no_internals():
    def f(x: jax.Array) -> jax.Array:
        return x + 1

    f.tag = "v1"
    plain, watched = jax.jit(f), watched_jit(f)
    assert watched.tag == plain.tag == "v1"
    assert watched.__annotations__ == plain.__annotations__ == {"x": jax.Array, "return": jax.Array}
    assert set(dir(watched)) == set(dir(plain))


def test_jax_errors_about_a_bad_argument_name_the_function_as_under_jax_jit():
    def f(x):
        return x + 1

    messages = []
    for jit in (jax.jit, watched_jit):
        with pytest.raises(TypeError) as err:
            jit(f)("a")
        messages.append(str(err.value).split(" at 0x")[0])
    assert messages[0] == messages[1]
    assert "Hook" not in str(err.value)


def test_a_pytree_whose_repr_fails_still_records_its_miss_and_never_breaks_under_w_error():
    out = run_python("""
        import jax, jax.numpy as jnp, shapewatch as sw
        class Meta:
            def __eq__(self, o): return isinstance(o, Meta)
            def __hash__(self): return 0
            def __repr__(self): raise RuntimeError("no repr")
        class Box:
            def __init__(self, v): self.v = v
        jax.tree_util.register_pytree_node(Box, lambda b: ((b.v,), Meta()), lambda m, c: Box(*c))
        f = sw.watched_jit(lambda b: b.v * 2)
        print(f(Box(jnp.ones(2))).tolist(), [(m.kind, m.explanation) for m in sw.misses(f)])
    """, "-W", "error", env={"SHAPEWATCH_REPORT": "off"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("[2.0, 2.0] [('compile', 'signature unreadable")
    assert "[shapewatch] internal error while recording a miss" in out.stderr  # logged, not raised


def test_jax_warnings_at_jit_time_appear_once_and_point_at_the_users_line(tmp_path):
    script = tmp_path / "deprecated.py"
    outputs = []
    for jit in ("jax.jit", "shapewatch.watched_jit"):
        script.write_text(f"import jax, shapewatch\nf = {jit}(lambda x: x + 1, backend='cpu')\n")
        out = subprocess.run([sys.executable, "-W", "always", str(script)], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "SHAPEWATCH_REPORT": "off"})
        outputs.append([line for line in out.stderr.splitlines() if "Warning" in line])
    assert len(outputs[1]) == 1 and outputs[1][0].startswith(f"{script}:2: DeprecationWarning")
    # jax.jit's own message, once (jax 0.5 points it at its own pjit.py; shapewatch at the user's line)
    assert [line.split(": ", 1)[1] for line in outputs[0]] == [outputs[1][0].split(": ", 1)[1]]


def test_a_callable_that_cannot_be_weakly_referenced_fails_when_called_as_under_jax_jit():
    class NoRef:
        __slots__ = []

        def __call__(self, x):
            return x

    errors = []
    for jit in (jax.jit, watched_jit):
        with pytest.raises(TypeError) as err:
            jit(NoRef())(jnp.ones(2))
        errors.append(str(err.value))
    assert errors[0] == errors[1] and "weak reference" in errors[0]


# ------------------------------------------------------------ counts, kinds, attribution


@pytest.mark.parametrize("ahead", ["eval_shape", "lower", "trace", "jax.eval_shape", "grad", "vmap"])
def test_the_real_compile_after_an_earlier_trace_is_counted(ahead):
    f = watched_jit(lambda x: x * 2)
    f(jnp.ones(3))
    x = jnp.ones(4)
    if ahead == "jax.eval_shape":
        jax.eval_shape(f, x)
    elif ahead == "grad":
        jax.grad(lambda v: f(v).sum())(x)
    elif ahead == "vmap":
        jax.vmap(f)(jnp.ones((2, 4)))
    else:
        getattr(f, ahead)(x)
    before = shapewatch.report().functions[0].record.compiles
    with shapewatch.expect_compiles(f, 1):
        f(x)
    assert shapewatch.report().functions[0].record.compiles == before + 1


def test_no_recompiles_stops_the_compile_of_a_signature_evaluated_by_shape_before():
    f = watched_jit(lambda x: x * 2)
    f(jnp.ones(3))
    f.eval_shape(jnp.ones(4))
    with pytest.raises(shapewatch.RecompileError, match="traced ahead of time"), shapewatch.no_recompiles(f):
        f(jnp.ones(4))
    assert f(jnp.ones(4)).shape == (4,)


def test_grad_of_a_watched_function_is_one_transform_compile_not_a_placement_change():
    @watched_jit
    def loss(w):
        return jnp.sum(jnp.tanh(w) ** 2)

    w = jnp.ones(3)
    loss(w)
    jax.grad(loss)(w)
    assert kinds(loss) == ["compile", "transform"]
    assert "differentiation" in shapewatch.misses(loss)[1].explanation
    causes = shapewatch.report().functions[0].causes
    assert [c.kind for c in causes] == ["transform"]
    assert "jax.jit(jax.grad(loss))" in causes[0].fix
    assert "committedness" not in shapewatch.report().summary()


def test_an_unwatched_jit_of_the_same_name_is_never_charged_to_a_watched_function():
    w = watched_jit(lambda x: x + 1)
    plain = jax.jit(lambda x: x * 2)
    w(jnp.ones(2))
    plain(jnp.ones(2))
    with shapewatch.expect_compiles(w, 0):
        plain(jax.device_put(jnp.ones(2), jax.devices()[0]))  # only plain compiles again
    assert kinds(w) == ["compile"]


def test_a_compile_without_a_retrace_goes_to_the_function_called_not_one_of_the_same_name():
    class Trainer:
        @staticmethod
        def step(x):
            return x + 1

    class Evaluator:
        @staticmethod
        def step(x):
            return x * 2

    tr, ev = watched_jit(Trainer.step), watched_jit(Evaluator.step)
    ev(jnp.ones(2))
    tr(jnp.ones(2))
    ev(jax.device_put(jnp.ones(2), jax.devices()[0]))
    assert kinds(ev) == ["compile", "no_retrace"] and kinds(tr) == ["compile"]


def test_one_function_watched_twice_with_other_options_counts_both_compiles_as_its_own():
    def f(x, y):
        return x + y

    a, b = watched_jit(f), watched_jit(f, donate_argnums=0)
    a(jnp.ones(2), jnp.ones(2))
    b(jnp.ones(2), jnp.ones(2))
    record = shapewatch.report().functions[0].record
    assert record.compiles == 2 and len(shapewatch.report().functions) == 1
    assert "another watched_jit" in record.misses[1].explanation
    assert not any(compiles for compiles, _ in shapewatch.report().unwatched.values())


def test_closures_of_one_factory_are_distinct_functions_with_distinct_guards():
    def make_step(train):
        def step(x):
            return x * (2.0 if train else 1.0)
        return watched_jit(step)

    train_step, eval_step = make_step(True), make_step(False)
    train_step(jnp.ones(3))
    eval_step(jnp.ones(3))
    with shapewatch.no_recompiles(eval_step):
        train_step(jnp.ones(5))  # not eval_step: no error
    assert [m.explanation for m in shapewatch.misses(eval_step)] == ["first compile"]
    names = sorted(f.record.function for f in shapewatch.report().functions)
    assert names == [
        "test_closures_of_one_factory_are_distinct_functions_with_distinct_guards.<locals>.make_step.<locals>.step",
        "test_closures_of_one_factory_are_distinct_functions_with_distinct_guards.<locals>.make_step.<locals>.step [2]",
    ]


def test_two_lambdas_on_one_line_are_two_functions():
    f, g = watched_jit(lambda x: x + 1), watched_jit(lambda x: x * 2)
    f(jnp.ones(2))
    g(jnp.ones(2))
    assert len(shapewatch.report().functions) == 2
    assert shapewatch.misses(g)[0].explanation == "first compile"


def test_a_callable_object_gets_its_cost_and_location():
    class Model:
        def __call__(self, x):
            return jnp.tanh(x)

    f = watched_jit(Model())
    f(jnp.ones(3))
    f(jnp.ones(4))
    report = shapewatch.report()
    record = report.functions[0].record
    assert record.compile_s > 0 and record.lower_s > 0
    assert record.location.endswith(f"{os.path.basename(__file__)}:{Model.__call__.__code__.co_firstlineno}")
    assert not any(compiles for name, (compiles, _) in report.unwatched.items() if "unnamed" in name)


def test_partials_of_different_ufuncs_are_two_functions_with_costs():
    add, mul = watched_jit(functools.partial(jnp.add, 1.0)), watched_jit(functools.partial(jnp.multiply, 2.0))
    add(jnp.ones(2))
    mul(jnp.ones(2))
    records = [f.record for f in shapewatch.report().functions]
    assert len(records) == 2 and all(r.compile_s > 0 for r in records)


def test_a_second_watched_jit_of_the_same_function_keeps_the_first_ones_budget():
    def f(x, k=1):
        return x * k

    train = watched_jit(f, max_recompiles=0, on_excess="raise")
    watched_jit(f, static_argnames="k")  # another wrapper, no budget
    train(jnp.ones(2))
    with pytest.raises(shapewatch.RecompileError, match="over its budget"):
        train(jnp.ones(3))


def test_call_counts_go_on_after_reset():
    f = watched_jit(lambda x: x + 1, count_calls=True)
    f(jnp.ones(2))
    shapewatch.reset()
    f(jnp.ones(2))
    f(jnp.ones(3))
    assert shapewatch.report().functions[0].record.calls == 2


def test_max_records_applies_to_functions_decorated_before_it_was_set():
    @watched_jit
    def f(x):
        return x + 1

    shapewatch.configure(max_records=2)
    try:
        for n in range(1, 6):
            f(jnp.ones(n))
        record = shapewatch.report().functions[0].record
        assert (len(record.misses), record.dropped, record.compiles) == (2, 3, 5)
    finally:
        shapewatch.configure(max_records=1000)


# ------------------------------------------------------------ identical signatures


def test_a_retrace_after_clear_cache_says_so():
    f = watched_jit(lambda x: x + 1)
    f(jnp.ones(2))
    f.clear_cache()
    f(jnp.ones(2))
    assert shapewatch.misses(f)[1].explanation == "identical signature, traced again after clear_cache()"


def test_a_retrace_under_another_matmul_precision_names_the_configuration():
    f = watched_jit(lambda x: x @ x)
    f(jnp.ones((2, 2)))
    with jax.default_matmul_precision("highest"):
        f(jnp.ones((2, 2)))
    assert "another JAX trace context" in shapewatch.misses(f)[1].explanation


def test_a_lambda_recreated_with_the_same_shapes_is_explained_as_recreated():
    x = jnp.ones(3)
    for _ in range(2):
        g = watched_jit(lambda v: v * 3)
        g(x)
    assert shapewatch.misses(g)[1].explanation.startswith("function re-created")
    assert np.allclose(g(x), 3.0)


# ------------------------------------------------------------ found by review


def _unwatched_namesake():
    def make():
        @jax.jit
        def loss(w):
            return jnp.sum(w ** 3)
        return loss
    return make()


def test_grad_and_vjp_of_an_unwatched_jit_of_the_same_name_never_fire_a_watched_budget():
    @watched_jit(max_recompiles=0, on_excess="raise")
    def loss(w):
        return jnp.sum(w ** 2)

    loss(jnp.ones(3))
    other = _unwatched_namesake()
    jax.grad(other)(jnp.ones(3))
    jax.vjp(other, jnp.ones(3))[1](1.0)
    jax.linearize(other, jnp.ones(3))[1](jnp.ones(3))
    other.lower(jnp.ones(4)).compile()
    assert kinds(loss) == ["compile"]


def test_export_and_lowering_a_trace_are_not_compiles():
    f = watched_jit(lambda x: x * 2, max_recompiles=0, on_excess="raise")
    f(jnp.ones(3))
    f.trace(jnp.ones(4)).lower()
    f.lower(jnp.ones(5)).compile()
    if hasattr(jax, "export"):
        jax.export.export(f)(jax.ShapeDtypeStruct((6,), jnp.float32))
    shapewatch.freeze()
    try:
        f.trace(jnp.ones(7)).lower()
    finally:
        shapewatch.unfreeze()
    assert shapewatch.report().functions[0].record.compiles == 1
    assert set(kinds(f)) == {"compile", "ahead_of_time"}


def test_a_budget_counts_only_the_compiles_made_with_its_own_jit_options():
    def f(x, k):
        return x * k

    a = watched_jit(f)
    for n in (1, 2, 3, 4):
        a(jnp.ones(n), 2)
    b = watched_jit(f, static_argnums=1, max_recompiles=1, on_excess="raise")
    b(jnp.ones(1), 2)
    b(jnp.ones(2), 2)
    with pytest.raises(shapewatch.RecompileError, match="compiled 3 times, over its budget of 2"):
        b(jnp.ones(3), 2)


def test_two_watched_jits_that_differ_only_in_budget_share_one_compile_cache():
    def h(x):
        return x - 1

    lenient, strict = watched_jit(h), watched_jit(h, max_recompiles=0, on_excess="raise")
    lenient(jnp.ones(2))
    strict(jnp.ones(2))  # the same JAX cache: no new compile
    assert shapewatch.report().functions[0].record.compiles == 1
    with pytest.raises(shapewatch.RecompileError, match="over its budget"):
        lenient(jnp.ones(3))  # the strictest budget of the two applies to the shared cache


def test_a_trace_that_jax_rejects_is_not_a_compile_and_keeps_jaxs_error():
    f = watched_jit(lambda x: "not an array" if x.shape[0] == 2 else x, max_recompiles=0, on_excess="raise")
    f(jnp.ones(1))
    with pytest.raises(TypeError) as err:
        f(jnp.ones(2))
    with pytest.raises(TypeError) as plain_err:
        jax.jit(lambda x: "not an array")(jnp.ones(2))
    assert type(err.value) is type(plain_err.value)
    assert shapewatch.report().functions[0].record.compiles == 1


def test_a_function_recreated_many_times_keeps_one_entry_per_live_hook():
    x = jnp.ones(2)
    for _ in range(30):
        g = watched_jit(lambda v: v + 2)
        g(x)
    from shapewatch._monitor.access import state_of

    state = state_of(g)
    assert len(state.hooks) == 1 and len(state.hook_ids) == 1
    assert state.compiles == 30 and state.kinds["compile"] == 30
