"""Placement: a leaf whose sharding, device or committedness changed is named, with both placements
and the fix, on 8 host CPU devices (each case in its own process: the device count is fixed at JAX start)."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch
from shapewatch._monitor.placement import HOST, placement_of

WORKER = pathlib.Path(__file__).with_name("_placement_worker.py")
MESH = "on mesh {data: 2, model: 4}"


def run(case: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(WORKER.parent.parent)}
    done = subprocess.run([sys.executable, str(WORKER), case], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def kinds(result: dict) -> list[str]:
    return [m["kind"] for m in result["misses"]]


def test_a_leaf_the_step_returns_with_another_sharding_is_named_with_both_shardings_and_the_pinning_fix():
    r = run("carried")
    assert kinds(r) == ["compile", "no_retrace"]  # exact: the third call hits the cache
    second = r["misses"][1]
    assert second["explanation"] == f"params['w2'] sharding: P() -> P('model',) {MESH}"
    assert second["call_site"].endswith("_placement_worker.py:38")
    assert second["location"].endswith("_placement_worker.py:30")
    (cause,) = r["causes"]
    assert cause["kind"] == "placement" and cause["path"] == "params['w2']"
    assert cause["fix"].startswith(f"params is returned by the step, so P('model',) {MESH} is most likely")
    assert "out_shardings" in cause["fix"] and "with_sharding_constraint" in cause["fix"]
    placed = [{k: v[3][k] for k in ("sharding", "mesh", "committed")} for v in r["json"]]  # the saved report
    assert {"sharding": "P('model',)", "mesh": "{data: 2, model: 4}", "committed": True} in placed


def test_a_state_placed_after_the_first_step_is_one_cause_with_one_fix_for_all_its_leaves():
    r = run("state_placed_after_the_first_step")
    assert len(r["misses"]) == 2  # the third call hits the cache
    (cause,) = r["causes"]
    assert cause["path"] == "state"
    assert cause["text"] == (
        f"state: the placement of 3 leaves changed (1 compile): uncommitted -> 2 shardings {MESH}: "
        "P() (2 leaves), P(None, 'model') (1 leaf); leaves: state['params']['b'], state['params']['w'], state['step']")
    assert cause["fix"].startswith("state is returned by the step with other shardings than it was given: "
                                   "place the state once, before the loop, with the shardings the step gives it "
                                   "(NamedSharding(mesh, P()), NamedSharding(mesh, P(None, 'model')))")


def test_an_nnx_model_and_its_optimizer_placed_after_the_first_step_are_one_cause_named_as_the_user_reads_them():
    nnx = pytest.importorskip("flax.nnx")
    if hasattr(nnx, "List") and not hasattr(nnx, "ModelAndOptimizer"):
        pytest.skip("this flax has no nnx.ModelAndOptimizer (and its nnx.Optimizer holds no model)")
    r = run("nnx_model_and_optimizer")
    assert len(r["misses"]) == 2
    (cause,) = r["causes"]
    assert cause["path"] == "model, optimizer"
    assert cause["text"].startswith("model and optimizer: the placement of 8 leaves changed (1 compile): uncommitted -> ")
    assert cause["text"].endswith("; leaves: model.{w1, w2}, optimizer.opt_state[0].count, "
                                  "optimizer.opt_state[0].mu.{w1, w2}, optimizer.opt_state[0].nu.{w1, w2}, optimizer.step")
    assert "place the state once, before the loop" in cause["fix"]


def test_a_sharding_along_another_mesh_axis_is_named():
    r = run("another_axis")
    assert kinds(r) == ["compile", "no_retrace"]
    assert r["misses"][1]["explanation"] == f"x sharding: P('data',) -> P('model',) {MESH}"
    assert r["causes"][0]["fix"].startswith("place x the same way every call")


def test_committed_to_uncommitted_is_named_with_the_device_put_fix():
    r = run("uncommitted")
    assert kinds(r) == ["compile", "no_retrace"]
    assert r["misses"][1]["explanation"] == "x: committed to cpu:0 -> uncommitted"
    assert "jax.device_put" in r["causes"][0]["fix"]


def test_another_device_is_named():
    r = run("another_device")
    assert kinds(r) == ["compile", "no_retrace"]
    assert r["misses"][1]["explanation"] == "x: committed to cpu:0 -> committed to cpu:1"


def test_a_host_numpy_input_then_a_sharded_array_is_named_and_the_host_input_compiles_no_more():
    r = run("host")
    assert len(r["misses"]) == 2  # the third call, NumPy again, reuses the first executable
    assert r["misses"][1]["explanation"] == (
        f"x: from the host (NumPy array or Python scalar) -> P('model',) {MESH}")
    assert r["causes"][0]["fix"].startswith("x comes from the host or uncommitted on some calls")


@pytest.mark.parametrize("framework,case,path", [("flax", "nnx", "state['w'].value"),
                                                 ("equinox", "equinox", "model.weight")])
def test_a_framework_step_with_sharded_parameters_names_the_parameter(framework, case, path):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    r = run(case)
    assert kinds(r) == ["compile", "no_retrace"]
    assert r["misses"][1]["explanation"] == f"{path} sharding: P() -> P('model',) {MESH}"
    assert r["causes"][0]["fix"].startswith(f"{path.split('.')[0].split('[')[0]} is returned by the step")


def test_placements_are_interned_and_read_only_from_concrete_arguments():
    a, b = jnp.ones(3), jnp.ones(5)
    assert placement_of(a) is placement_of(b) and not placement_of(a).committed
    assert placement_of(jax.device_put(a, jax.devices()[0])).describe() == "committed to cpu:0"
    assert placement_of(jnp.ones(3).__array__()) is HOST and placement_of(2.0) is HOST
    seen = []
    jax.jit(lambda x: seen.append(placement_of(x)) or x)(a)
    assert seen == [None]  # a tracer has no placement of its own


def test_placements_read_in_bulk_are_the_placements_read_one_by_one():
    from shapewatch._monitor.placement import placements_of

    one = [jnp.ones(2) for _ in range(50)]
    committed = jax.device_put(jnp.ones(2), jax.devices()[0])
    cases = {"one sharding": one, "one committed": one[:25] + [committed] + one[25:],
             "a host array": one + [np.ones(2)], "a scalar first": [3.0] + one, "empty": [],
             "all committed": [committed] * 3}
    for name, leaves in cases.items():
        assert placements_of(leaves) == [placement_of(x) for x in leaves], name
    assert placements_of(cases["one committed"])[25].committed
    assert not placements_of(cases["one committed"])[26].committed


def test_a_cached_call_reads_no_placement():
    f = shapewatch.watched_jit(lambda x: x * 2)
    x = jnp.ones(3)
    f(x)
    f(x)
    (only,) = shapewatch.misses(f)
    assert only.signature.arrays[0].placement.describe() == "uncommitted"
