"""Mutable array references (``jax.Ref``) and NNX ref-mode Variables under ``watched_jit``.

A Ref passed to a jitted function must reach the trace only as its argument: a read
of the concrete Ref while the trace is active (``ref[...]``) makes JAX see it as
closed over as well, and JAX rejects that. Each behaviour is run under ``jax.jit``
and under ``watched_jit`` and compared; the signatures name Ref arguments by path
with their shape and dtype.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

import shapewatch


def _ref_maker():
    """``jax.new_ref`` (jax >= 0.8), else ``jax.experimental.mutable_array``, else None."""
    if hasattr(jax, "new_ref"):
        return jax.new_ref
    try:
        from jax.experimental import mutable_array
    except ImportError:
        return None
    return mutable_array


new_ref = _ref_maker()
pytestmark = pytest.mark.skipif(
    new_ref is None,
    reason=f"jax {jax.__version__} has no public mutable array reference (jax.new_ref or jax.experimental.mutable_array)")

JITS = {"jax.jit": jax.jit, "watched_jit": shapewatch.watched_jit}


def _both(run):
    """``run(jit)`` under jax.jit and under watched_jit: each outcome, or the error it raised."""
    outcomes = {}
    for name, jit in JITS.items():
        try:
            outcomes[name] = ("returned", run(jit))
        except Exception as e:  # compared below: watched_jit must raise what jax.jit raises
            outcomes[name] = ("raised", type(e).__name__, str(e))
    return outcomes


def test_a_ref_argument_is_updated_as_under_jax_jit():
    def run(jit):
        @jit
        def accumulate(ref, x):
            ref[...] += x
            return x * 2

        ref = new_ref(jnp.zeros(3))
        out = [accumulate(ref, jnp.arange(3.0)).tolist() for _ in range(2)]
        return out, ref[...].tolist()

    outcomes = _both(run)
    assert outcomes["watched_jit"] == outcomes["jax.jit"] == ("returned", ([[0.0, 2.0, 4.0]] * 2, [0.0, 2.0, 4.0]))


def test_a_closed_over_ref_is_updated_as_under_jax_jit():
    def run(jit):
        ref = new_ref(jnp.zeros(3))

        @jit
        def accumulate(x):
            ref[...] += x
            return ref[...] * 1

        out = [accumulate(jnp.ones(3)).tolist() for _ in range(2)]
        return out, ref[...].tolist()

    outcomes = _both(run)
    assert outcomes["watched_jit"] == outcomes["jax.jit"] == ("returned", ([[1.0] * 3, [2.0] * 3], [2.0] * 3))


def test_a_ref_created_inside_the_function_is_used_as_under_jax_jit():
    def run(jit):
        @jit
        def cumulative(x):
            ref = new_ref(jnp.zeros(()))
            out = []
            for i in range(x.shape[0]):
                ref[...] += x[i]
                out.append(ref[...])
            return jnp.stack(out)

        return cumulative(jnp.arange(4.0)).tolist()

    outcomes = _both(run)
    assert outcomes["watched_jit"] == outcomes["jax.jit"] == ("returned", [0.0, 1.0, 3.0, 6.0])


def test_returning_a_ref_does_what_it_does_under_jax_jit():
    def run(jit):
        @jit
        def make(x):
            return new_ref(x)

        ref = make(jnp.ones(2))
        return type(ref).__name__, ref[...].tolist()

    outcomes = _both(run)
    assert outcomes["watched_jit"] == outcomes["jax.jit"]  # jax 0.10 to 0.12: both raise, "cannot be returned"


def test_a_ref_passed_both_as_an_argument_and_closed_over_is_rejected_as_by_jax_jit():
    def run(jit):
        ref = new_ref(jnp.zeros(1))

        @jit
        def read_both(r):
            return r[...] + ref[...]

        return read_both(ref).tolist()

    outcomes = _both(run)
    assert outcomes["jax.jit"][0] == "raised"
    assert outcomes["watched_jit"] == outcomes["jax.jit"]


def test_a_ref_argument_is_named_by_its_path_with_its_shape_and_dtype():
    @shapewatch.watched_jit
    def step(state, x):
        state["acc"][...] += x
        return x

    step({"acc": new_ref(jnp.zeros((2, 3)))}, jnp.ones((2, 3)))
    (miss,) = shapewatch.misses(step)
    assert [(a.path, a.shape, a.dtype) for a in miss.signature.arrays] == [
        ("state['acc']", (2, 3), "Ref float32"), ("x", (2, 3), "float32")]


def test_a_ref_shape_change_is_the_named_cause():
    @shapewatch.watched_jit
    def step(ref, x):
        ref[...] += x.sum().astype(ref.dtype)
        return x

    step(new_ref(jnp.zeros(3)), jnp.ones(2))
    step(new_ref(jnp.zeros(4)), jnp.ones(2))
    step(new_ref(jnp.zeros(4, jnp.int32)), jnp.ones(2))
    assert [m.explanation for m in shapewatch.misses(step)] == [
        "first compile", "ref.shape[0]: 3 -> 4", "ref dtype: Ref float32 -> Ref int32"]


def test_a_call_with_the_same_ref_shape_is_a_cache_hit():
    @shapewatch.watched_jit
    def bump(ref):
        ref[...] += 1

    refs = [new_ref(jnp.zeros(2)) for _ in range(3)]
    for ref in refs:
        bump(ref)
    assert [r[...].tolist() for r in refs] == [[1.0, 1.0]] * 3
    assert len(shapewatch.misses(bump)) == 1


def test_a_ref_argument_of_a_function_jitted_under_watch_is_recorded():
    with shapewatch.watch():
        bump = jax.jit(lambda ref, x: ref.__setitem__(..., ref[...] + x))
    ref = new_ref(jnp.zeros(2))
    bump(ref, jnp.ones(2))
    bump(ref, jnp.ones(2))
    assert ref[...].tolist() == [2.0, 2.0]
    assert shapewatch.is_watched(bump)
    assert [a.path for a in shapewatch.misses(bump)[0].signature.arrays] == ["ref", "x"]


# Flax NNX's ref mode: Variables held as jax.Refs (``nnx.Param(..., ref=True)``, ``nnx.with_vars``).

def _nnx():
    try:
        from flax import nnx
    except ImportError:
        return None
    return nnx if hasattr(nnx, "with_vars") else None


nnx = _nnx()
needs_ref_mode = pytest.mark.skipif(nnx is None, reason="flax is missing or has no ref-mode Variables (nnx.with_vars: flax >= 0.12)")


def _wrappers():
    if nnx is None:
        return {}
    found = {"nnx.jit": nnx.jit, "nnx.jit(graph=True)": lambda f: nnx.jit(f, graph=True),
             "nnx.jit(graph=False)": lambda f: nnx.jit(f, graph=False)}
    if hasattr(getattr(nnx, "compat", None), "jit"):
        found["nnx.compat.jit"] = nnx.compat.jit
    return found


WRAPPERS = _wrappers()


if nnx is not None:
    class Counter(nnx.Module):
        def __init__(self, n, ref):
            self.w = nnx.Param(jnp.full(n, 2.0), ref=ref)
            self.count = nnx.BatchStat(jnp.zeros((), jnp.int32), ref=ref)


def _ref_mode_module(n, via_with_vars):
    """A module whose Variables are Refs: made so (``ref=True``), or made plain and then ``with_vars``."""
    if via_with_vars:
        return nnx.with_vars(Counter(n, ref=False), ref=True)
    return Counter(n, ref=True)


def _step(m, x):
    m.count[...] += 1
    return (m.w[...] * x).sum()


def _run_nnx(wrapper, via_with_vars, sizes=(3, 3, 4)):
    step = wrapper(_step)
    out = []
    for n in sizes:
        m = _ref_mode_module(n, via_with_vars)
        out.append((float(step(m, jnp.ones(n))), int(m.count[...])))
    return out, step


@needs_ref_mode
@pytest.mark.parametrize("via_with_vars", [False, True], ids=["Param(ref=True)", "with_vars(ref=True)"])
@pytest.mark.parametrize("how", ["watch()", "jax.jit swapped"])
@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_a_ref_mode_module_under_an_nnx_jit_runs_as_under_jax_jit(monkeypatch, wrapper, how, via_with_vars):
    expected, _ = _run_nnx(WRAPPERS[wrapper], via_with_vars)
    if how == "watch()":
        with shapewatch.watch():
            got, step = _run_nnx(WRAPPERS[wrapper], via_with_vars)
    else:  # as tools' test runs do: nnx builds its jitted function with jax.jit, now watched_jit
        monkeypatch.setattr(jax, "jit", shapewatch.watched_jit)
        got, step = _run_nnx(WRAPPERS[wrapper], via_with_vars)
        monkeypatch.undo()
    assert got == expected == [(6.0, 1), (6.0, 1), (8.0, 1)]
    assert len(shapewatch.misses(step)) == 2


@needs_ref_mode
@pytest.mark.parametrize("wrapper", sorted(w for w in WRAPPERS if w != "nnx.jit(graph=False)"))
def test_ref_mode_variables_are_named_by_graph_path(wrapper):
    with shapewatch.watch():
        _, step = _run_nnx(WRAPPERS[wrapper], via_with_vars=True)
    misses = shapewatch.misses(step)
    assert [(a.path, a.shape, a.dtype) for a in misses[0].signature.arrays] == [
        ("m.count", (), "Ref int32"), ("m.w", (3,), "Ref float32"), ("x", (3,), "float32")]
    assert [m.explanation for m in misses] == ["first compile", "m.w.shape[0]: 3 -> 4; x.shape[0]: 3 -> 4"]


@needs_ref_mode
def test_a_ref_mode_module_under_nnx_jit_in_tree_mode_is_named_by_its_pytree_path():
    with shapewatch.watch():
        _, step = _run_nnx(WRAPPERS["nnx.jit(graph=False)"], via_with_vars=True)
    assert [m.explanation for m in shapewatch.misses(step)] == [
        "first compile", "m.w.value.shape[0]: 3 -> 4; x.shape[0]: 3 -> 4"]


@needs_ref_mode
@pytest.mark.slow
def test_a_ref_mode_module_under_shapewatch_run_is_reported(tmp_path):
    program = tmp_path / "ref_mode.py"
    program.write_text(textwrap.dedent("""\
        import jax.numpy as jnp
        from flax import nnx

        class Counter(nnx.Module):
            def __init__(self, n):
                self.w = nnx.Param(jnp.ones(n))

        @nnx.jit
        def step(m, x):
            m.w[...] += x
            return m.w[...].sum()

        for n in (3, 3, 5):
            m = nnx.with_vars(Counter(n), ref=True)
            assert float(step(m, jnp.ones(n))) == 2.0 * n
            assert m.w[...].tolist() == [2.0] * n
        print("done")
        """))
    out = tmp_path / "report.json"
    env = {**os.environ, "SHAPEWATCH_REPORT": "0", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "run", "--json", str(out), str(program)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    (function,) = [f for f in json.loads(out.read_text())["functions"] if f["function"] == "step"]
    assert function["compiles"] == 2
    assert [m["explanation"] for m in function["misses"]] == ["first compile", "m.w.shape[0]: 3 -> 5; x.shape[0]: 3 -> 5"]
