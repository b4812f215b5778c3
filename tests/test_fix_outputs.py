"""Fixes and output shapes (issue 38): the output shapes a miss records and the verdicts built on them.

Real watched functions on real JAX (CPU); each watched call is checked against ``jax.jit``.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch
from shapewatch import watched_jit
from shapewatch._reports.axis_fix import axis_fix

CURRICULUM = (10, 20, 40, 80)
Solution = collections.namedtuple("Solution", "ys total")


def _run(fn, lengths, make=lambda n: jnp.linspace(0.0, 1.0, n)):
    watched, plain = watched_jit(fn), jax.jit(fn)
    for n in lengths:
        got, want = watched(make(n)), plain(make(n))
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b))
    return watched


def _axis_fix_text():
    (function,) = shapewatch.report().functions
    return next(c for c in function.causes if c.kind == "axis").fix


def test_a_tuple_with_none_records_the_array_leaves_and_names_the_following_axis():
    watched = _run(lambda t: (None, jnp.cumsum(t), t.sum()), CURRICULUM)
    assert [m.outputs for m in shapewatch.misses(watched)] == [
        (("out[1]", (n,)), ("out[2]", ())) for n in CURRICULUM]
    assert "the output's length follows this one (out[1].shape[0] had it on every compile)" in _axis_fix_text()


def test_an_output_that_returns_nothing_records_no_leaves_and_gets_no_intent_caveat():
    watched = _run(lambda t: None, CURRICULUM)
    assert [m.outputs for m in shapewatch.misses(watched)] == [()] * 4
    fix = _axis_fix_text()
    assert fix.startswith("bounded: 4 lengths") and "what the program asks for" not in fix


def test_an_output_that_follows_on_some_compiles_only_is_not_named():
    watched = _run(lambda t: jnp.cumsum(t) if t.shape[0] < 30 else t.sum(), CURRICULUM)
    assert [m.outputs for m in shapewatch.misses(watched)][2:] == [(("out", ()),)] * 2
    assert "had it on every compile" not in _axis_fix_text()


def test_a_fixed_output_of_one_seen_length_is_not_taken_for_one_that_follows():
    watched = _run(lambda t: (jnp.ones(16), t[:8]), (8, 16))
    assert "had it on every compile" not in _axis_fix_text()
    assert len(shapewatch.misses(watched)) == 2


def test_symbolic_output_dims_of_an_export_are_recorded_as_unknown():
    if not hasattr(jax, "export") or not hasattr(jax.export, "symbolic_shape"):
        pytest.skip("jax.export shape polymorphism needs a newer JAX")
    watched = watched_jit(jnp.cumsum)
    (b,) = jax.export.symbolic_shape("b")
    exported = jax.export.export(watched)(jax.ShapeDtypeStruct((b,), jnp.float32))
    np.testing.assert_allclose(np.asarray(exported.call(jnp.ones(3))), [1.0, 2.0, 3.0])
    assert [m.outputs for m in shapewatch.misses(watched)] == [(("out", (-1,)),)]


def test_a_namedtuple_output_is_walked_like_a_tuple():
    watched = _run(lambda t: Solution(jnp.cumsum(t), t.sum()), CURRICULUM)
    assert all(m.outputs is not None for m in shapewatch.misses(watched))
    fix = _axis_fix_text()
    assert "unknown here" not in fix
    assert "had it on every compile" in fix


def test_an_empty_last_batch_gets_a_fix_not_an_exception():
    _run(lambda x: x.sum(0), (64, 0), make=lambda n: jnp.ones((n, 3)))
    fix = _axis_fix_text()
    assert fix.startswith("bounded: 2 lengths")


def test_axis_fix_of_a_full_and_an_empty_batch():
    assert axis_fix([0, 64], [64, 0], "batch", 0.1).startswith("bounded: 2 lengths")


def test_a_python_scalar_in_the_output_does_not_hide_the_array_leaves():
    from shapewatch._monitor.signature import output_shapes

    assert output_shapes((jnp.ones(3), 0)) == (("out[0]", (3,)), ("out[1]", ()))


PROGRAM = '''
import collections, functools
import haiku as hk
import jax, jax.numpy as jnp

State = collections.namedtuple("State", "h total")
net = hk.without_apply_rng(hk.transform(lambda x: hk.Linear(4)(x)))
params = net.init(jax.random.PRNGKey(0), jnp.ones((2, 3)))

def loss(p, x, k):
    return (net.apply(p, x) ** 2).mean() * k

def scanned(xs):
    def body(c, x):
        return c + x, c * x
    return State(*jax.lax.scan(body, jnp.zeros(3), xs))

apply = jax.jit(net.apply)
grad = jax.jit(jax.value_and_grad(functools.partial(loss, k=2.0)))
rows = jax.jit(jax.vmap(lambda x: State(x * 2, x.sum())))
scan = jax.jit(scanned)
for n in (2, 5, 7, 2, 9, 5):
    x = jnp.ones((n, 3))
    print(apply(params, x).shape, float(grad(params, x)[0]), rows(x).h.shape, scan(x).total.shape)
'''


def test_shapewatch_run_counts_the_compiles_jax_logs_and_keeps_stdout(tmp_path):
    import json
    import os
    import re
    import subprocess
    import sys

    pytest.importorskip("haiku")
    source = tmp_path / "program.py"
    source.write_text(PROGRAM)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    plain = subprocess.run([sys.executable, str(source)], capture_output=True, text=True, timeout=300,
                           env={**env, "JAX_LOG_COMPILES": "1"}, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    logged = re.findall(r"Finished XLA compilation of jit\(([^)]*)\)", plain.stderr)
    out = tmp_path / "report.json"
    ran = subprocess.run([sys.executable, "-m", "shapewatch", "run", "--json", str(out), str(source)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout == plain.stdout
    compiles = {f["function"].rsplit(".", 1)[-1]: f["compiles"] for f in json.loads(out.read_text())["functions"]}
    assert compiles["apply_fn"] == logged.count("apply_fn") == 4
    assert compiles["loss"] == logged.count("loss") == 4
    assert compiles["scanned"] == logged.count("scanned") == 4
    assert compiles["<lambda>"] == logged.count("<lambda>") == 4  # jit of a vmap returning a namedtuple
    assert len(compiles) == 4


def test_an_output_of_one_more_point_than_the_length_still_gets_the_intent_caveat():
    def solve_with_start(ts):
        return jnp.concatenate([jnp.zeros(1), jnp.cumsum(ts)])  # the start and one point per save time

    _run(solve_with_start, CURRICULUM)
    assert "padding changes" in _axis_fix_text()


def test_a_predict_steps_partial_batch_is_not_told_its_rows_may_be_an_ode_solves_save_times():
    weights = jnp.ones((3, 5))
    _run(lambda x: x @ weights, (64, 64, 40), make=lambda n: jnp.ones((n, 3)))
    fix = _axis_fix_text()
    assert fix.startswith("bounded: 2 lengths (a full and a short batch: a last, partial one)")
    assert "pad_batch" in fix
    assert "the save times of an ODE solve" not in fix
