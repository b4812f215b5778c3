"""Placement explanations (issue 17): cases that break them, on 8 host CPU devices.

Each case runs in its own process (the device count is fixed at JAX start), with real JAX and
no mocks; the multi-process cases run a real jax.distributed job on 127.0.0.1 (2 processes of 2
host devices each), as tests/test_multiprocess.py does.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests._jobs import free_port, run_processes

ROOT = pathlib.Path(__file__).resolve().parent.parent
MESH = "on mesh {data: 2, model: 4}"

PRELUDE = """
import json, os, sys, warnings
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["SHAPEWATCH_REPORT"] = "off"
warnings.simplefilter("ignore", DeprecationWarning)
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import shapewatch

devs = jax.devices()
mesh = Mesh(np.array(devs).reshape(2, 4), ("data", "model"))

def on(spec, m=None):
    return NamedSharding(mesh if m is None else m, spec)

def pinned_put(x, spec, m=None):  # in pinned_host memory; where there is none, say "skip" and exit
    try:
        return jax.device_put(x, NamedSharding(mesh if m is None else m, spec, memory_kind="pinned_host"))
    except ValueError:  # jax 0.5 on CPU: no pinned_host memory
        print(json.dumps({"skip": jax.__version__}))
        sys.exit(0)

COMPILES = [0]
def _count(event, duration, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        COMPILES[0] += 1

def done(fn):
    report = shapewatch.report()
    print(json.dumps({
        "jax": jax.__version__,
        "real": COMPILES[0],
        "misses": [{"kind": m.kind, "explanation": m.explanation} for m in shapewatch.misses(fn)],
        "causes": [{"kind": c.kind, "path": c.path, "text": c.text, "fix": c.fix}
                   for f in report.functions for c in f.causes],
    }))
"""


def run(body: str) -> dict:
    """Runs ``body`` after PRELUDE in a fresh process; it counts the backend compiles made after
    ``jax.monitoring.register_event_duration_secs_listener(_count)`` and ends with ``done(fn)``."""
    code = PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compiling(r: dict) -> int:
    return sum(m["kind"] in ("compile", "persistent_cache_hit", "transform", "no_retrace") for m in r["misses"])


# --- one process -------------------------------------------------------------------------------


@pytest.mark.parametrize("second_mesh", ["Mesh(np.array(devs[::-1]).reshape(2, 4), ('data', 'model'))",
                                         "Mesh(np.array(devs[4:] + devs[:4]).reshape(2, 4), ('data', 'model'))"],
                         ids=["devices reversed", "devices rotated"])
def test_a_mesh_of_the_same_shape_and_names_on_other_devices_is_a_placement_change_not_an_identical_retrace(
        second_mesh):
    # JAX compiles again (another device assignment) without a retrace; shapewatch says
    # "identical signature: retraced for a reason outside the arguments", which is false (nothing was
    # retraced) and names neither x nor the mesh, and its cause's fix is about cleared caches.
    r = run(f"""
        m2 = {second_mesh}
        f = shapewatch.watched_jit(lambda x: x * 2)
        a = jax.device_put(jnp.ones((8, 8)), on(P("data")))
        b = jax.device_put(jnp.ones((8, 8)), on(P("data"), m2))
        jax.monitoring.register_event_duration_secs_listener(_count)
        f(a); f(b); f(a); f(b)
        done(f)
    """)
    assert r["real"] == 2 and compiling(r) == 2
    second = r["misses"][1]["explanation"]
    assert "identical signature" not in second
    assert second.startswith("x")
    assert [c["kind"] for c in r["causes"]] == ["placement"]


def test_a_sharding_without_a_mesh_is_named_on_one_line_and_not_called_a_device():
    # A multi-device sharding that is not a NamedSharding (GSPMDSharding on every supported JAX,
    # PositionalSharding where it exists) is named by its repr: PositionalSharding's spans several
    # lines, which land in the one-line explanation, and the fix calls it "the device ...".
    r = run("""
        from jax._src.sharding_impls import GSPMDSharding
        try:
            from jax.sharding import PositionalSharding
            other = PositionalSharding(devs).reshape(8, 1)
        except ImportError:
            other = GSPMDSharding.get_replicated(devs)
        f = shapewatch.watched_jit(lambda x: x * 2)
        a = jax.device_put(jnp.ones((8, 8)), on(P("data")))
        b = jax.device_put(jnp.ones((8, 8)), other)
        jax.monitoring.register_event_duration_secs_listener(_count)
        f(a); f(b); f(b)
        done(f)
    """)
    assert r["real"] == compiling(r) == 2
    second = r["misses"][1]["explanation"]
    assert "\n" not in second and second.startswith(f"x: P('data',) {MESH} -> ")
    (cause,) = r["causes"]
    assert "\n" not in cause["text"] and "\n" not in cause["fix"]
    assert "the device" not in cause["fix"]


def test_a_memory_kind_change_gets_a_fix_that_names_the_memory_kind():
    # "x memory kind: device -> pinned_host" is right, but the fix was "place x the same way every
    # call (one jax.device_put with NamedSharding(mesh, P('data',)), ...)": that sharding is in the
    # default memory kind, and nothing says that the memory kind is what to keep fixed.
    r = run("""
        b = pinned_put(jnp.ones((8, 8)), P("data"))
        f = shapewatch.watched_jit(lambda x: x * 2)
        a = jax.device_put(jnp.ones((8, 8)), on(P("data")))
        jax.monitoring.register_event_duration_secs_listener(_count)
        f(a); f(b); f(b)
        done(f)
    """)
    if "skip" in r:
        pytest.skip(f"no pinned_host memory on CPU with jax {r['skip']}")
    assert r["real"] == compiling(r) == 2
    assert r["misses"][1]["explanation"] == "x memory kind: device -> pinned_host"
    (cause,) = r["causes"]
    assert "memory kind" in cause["fix"] and "with_memory_kind" in cause["fix"]
    assert "pinned_host" in cause["fix"]


def test_a_single_array_that_the_step_returns_with_another_sharding_gets_the_returned_by_the_step_fix():
    # x = f(x) with out_shardings: the step itself gives x P('model',) and the next call compiles
    # again. README: "The step returned it" is inferred when "the argument's tree structure is one of
    # the step's outputs and the new placement is committed" -- both hold, yet a single array
    # (tree structure "*") never counts, and the fix is "place x the same way every call".
    r = run("""
        f = shapewatch.watched_jit(lambda x: x * 2, out_shardings=on(P("model")))
        x = jax.device_put(jnp.ones((8, 8)), on(P()))
        jax.monitoring.register_event_duration_secs_listener(_count)
        for _ in range(3):
            x = f(x)
        done(f)
    """)
    assert r["real"] == compiling(r) == 2
    assert r["misses"][1]["explanation"] == f"x sharding: P() -> P('model',) {MESH}"
    (cause,) = r["causes"]
    assert cause["fix"].startswith("x is returned by the step")


# --- many processes ----------------------------------------------------------------------------

WORKER = """
import os, sys, warnings
pid, count, port, mode, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid,
                           initialization_timeout=60)
import jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import shapewatch
shapewatch.configure(json_path=os.path.join(out, "report-{process}.json"), report="off")
f = shapewatch.watched_jit(lambda x: x * 2)
local = jax.local_devices()
if mode == "alike":  # every process: an array on its own default device, the same shape
    x = jnp.ones((4, 4))
else:  # process 1 shards x along the local mesh, process 0 replicates it
    x = jax.device_put(jnp.ones((4, 4)), NamedSharding(Mesh(np.array(local), ("d",)), P("d") if pid else P()))
f(x)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    agreed = shapewatch.check_hosts_agree(on_divergence="warn", timeout_ms=60_000)
print(f"process {pid}: agreed={agreed}")
for w in caught:
    print(f"{w.category.__name__}: {w.message}")
sys.stdout.flush()
jax.distributed.shutdown()
"""


def run_job(mode: str, out: pathlib.Path) -> list[str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    return run_processes([[sys.executable, "-c", WORKER, str(i), "2", str(port), mode, str(out)]
                          for i in range(2)], env)


def test_merging_the_reports_of_processes_that_placed_alike_on_their_own_devices_finds_no_divergence(tmp_path):
    # Every process passes jnp.ones((4, 4)): uncommitted, on its own default device. check_hosts_agree
    # agrees ("each process has its own devices"), but `shapewatch merge` of the same processes'
    # reports says 2 divergent compiles: "x placed cpu:0 (uncommitted) (the others: cpu:2048
    # (uncommitted))" -- the same spurious divergence for arrays committed to each process's device.
    import shapewatch

    outputs = run_job("alike", tmp_path)
    assert outputs == ["process 0: agreed=True\n", "process 1: agreed=True\n"]
    merged = shapewatch.merge_reports([str(tmp_path / "report-0.json"), str(tmp_path / "report-1.json")])
    assert merged["divergences"] == []


def test_check_hosts_agree_on_processes_that_sharded_a_leaf_differently_gives_a_placement_fix(tmp_path):
    # The leaf and both placements are named, but the fix line is the one for shapes: "give every
    # process batches of the same shapes (pad to fixed buckets; ...)", which does not fit.
    outputs = run_job("sharded", tmp_path)
    for i, out in enumerate(outputs):
        assert f"process {i}: agreed=False" in out
        assert ("process 1 compiled (x: float32[4,4]) that process 0 did not; it differs in x placed "
                "P('d',) on mesh {d: 2} (the others: P() on mesh {d: 2})") in out
        fix = next(line for line in out.splitlines() if line.strip().startswith("fix:"))
        assert "same shapes" not in fix and "pad" not in fix
        assert "sharding" in fix or "device_put" in fix


def test_a_change_of_mesh_devices_and_memory_kind_in_one_call_names_both():
    r = run("""
        other = Mesh(np.array(devs[::-1]).reshape(2, 4), ("data", "model"))
        b = pinned_put(jnp.ones((8, 8)), P("data"), other)
        f = shapewatch.watched_jit(lambda x: x * 2)
        a = jax.device_put(jnp.ones((8, 8)), on(P("data")))
        jax.monitoring.register_event_duration_secs_listener(_count)
        f(a); f(b)
        done(f)
    """)
    if "skip" in r:
        pytest.skip(f"no pinned_host memory on CPU with jax {r['skip']}")
    assert r["real"] == compiling(r) == 2
    assert r["misses"][1]["explanation"] == (
        "x memory kind: device -> pinned_host; x mesh devices: cpu:0..7 -> cpu:[7, 6, 5, 4, 3, 2, 1, 0]")
