"""The run manifest: what a run compiled and the cache-key parts it compiled under, written at exit."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import shapewatch
from shapewatch._reports.manifest import MAX_RUNS, build_manifest
from tests._across import environment, run

MANIFEST = "_across_program.p0.json"


def test_the_manifest_is_written_at_exit_beside_the_persistent_cache(tmp_path):
    run(tmp_path / "cache", MIN_COMPILE=0, XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    data = json.loads((tmp_path / "cache.shapewatch" / MANIFEST).read_text())
    [f] = data["functions"]
    [s] = f["signatures"]
    key = data["runs"][0]["key"]
    assert (data["schema"], f["module"], f["qualname"], s["text"]) == (
        "shapewatch.manifest/1", "__main__", "step", "x: float32[2,8]")
    assert (key["jax"], key["backend"], key["device_count"], key["xla_flags"]) == (
        jax.__version__, "cpu", 1, ["--xla_cpu_enable_fast_math=false"])
    assert key["config"]["jax_persistent_cache_min_compile_time_secs"] == 0
    assert s["cache"]["status"] == "written" and len(s["program"]["fingerprint"]) == 32
    assert [p.name for p in (tmp_path / "cache.shapewatch").iterdir()] == [MANIFEST]  # no temporary file left


def test_the_manifest_keeps_the_signatures_of_recent_earlier_runs(tmp_path):
    run(tmp_path / "cache", LENGTHS="8")
    run(tmp_path / "cache", LENGTHS="9")
    data = json.loads((tmp_path / "cache.shapewatch" / MANIFEST).read_text())
    runs = [r["id"] for r in data["runs"]]
    by_text = {s["text"]: s["run"] for s in data["functions"][0]["signatures"]}
    assert by_text == {"x: float32[2,9]": runs[0], "x: float32[2,8]": runs[1]}


def test_no_manifest_is_written_when_it_is_off(tmp_path):
    run(tmp_path / "cache", SHAPEWATCH_MANIFEST="off")
    assert not (tmp_path / "cache.shapewatch").exists()


def test_write_manifest_writes_on_request_to_a_path(tmp_path):
    f = shapewatch.watched_jit(lambda x: x + 1)
    f(jnp.ones(3))
    path = shapewatch.write_manifest(tmp_path / "m.json")
    data = shapewatch.load_manifest(path)
    assert [s["text"] for fn in data["functions"] for s in fn["signatures"]] == ["x: float32[3]"]


def test_a_manifest_drops_runs_older_than_the_last_few_and_their_signatures():
    f = shapewatch.watched_jit(lambda x: x + 1)
    f(jnp.ones(3))
    snap = shapewatch.report()
    old = {"runs": [{"id": f"run{i}", "key": {}} for i in range(MAX_RUNS + 2)],
           "functions": [{"module": __name__, "qualname": "<lambda>", "function": "<lambda>", "location": "?",
                          "signatures": [{"id": f"sig{i}", "text": f"x: float32[{i}]", "run": f"run{i}"}
                                         for i in range(MAX_RUNS + 2)]}]}
    data = build_manifest(snap, old)
    assert len(data["runs"]) == MAX_RUNS
    kept = {s["text"] for fn in data["functions"] for s in fn["signatures"]}
    assert kept == {"x: float32[3]"} | {f"x: float32[{i}]" for i in range(MAX_RUNS - 1)}


def test_a_file_that_is_not_a_manifest_is_named(tmp_path):
    (tmp_path / "r.json").write_text('{"schema": "shapewatch.report/2"}')
    with pytest.raises(shapewatch.ManifestError, match=r"r.json: not a shapewatch manifest \(schema "
                                                       r"'shapewatch.report/2', expected 'shapewatch.manifest/1'\)"):
        shapewatch.load_manifest(tmp_path / "r.json")


def test_a_corrupted_manifest_is_named_and_replaced_while_the_program_runs(tmp_path):
    manifest = tmp_path / "cache.shapewatch" / MANIFEST
    manifest.parent.mkdir()
    manifest.write_text('{"schema": "shapewatch.manifest/1", "runs": [')
    proc = run(tmp_path / "cache", MIN_COMPILE=0)
    assert f"[shapewatch] {manifest}: not a readable shapewatch manifest (" in proc.stderr
    assert "this run is not compared with it, and this run's manifest replaces it" in proc.stderr
    assert shapewatch.load_manifest(manifest)["functions"][0]["qualname"] == "step"


def test_a_manifest_of_a_newer_schema_is_named_and_left_as_it_is(tmp_path):
    run(tmp_path / "cache", MIN_COMPILE=0)
    manifest = tmp_path / "cache.shapewatch" / MANIFEST
    newer = {**json.loads(manifest.read_text()), "schema": "shapewatch.manifest/2"}
    manifest.write_text(json.dumps(newer))
    proc = run(tmp_path / "cache", MIN_COMPILE=0)
    assert (f"[shapewatch] {manifest}: a manifest of another shapewatch version (schema 'shapewatch.manifest/2'; "
            "this one reads 'shapewatch.manifest/1')") in proc.stderr
    assert f"[shapewatch] {manifest} holds another shapewatch version's manifest and is not replaced" in proc.stderr
    assert json.loads(manifest.read_text()) == newer


def test_a_manifest_entry_of_the_wrong_shape_is_named_by_its_place(tmp_path):
    (tmp_path / "m.json").write_text('{"schema": "shapewatch.manifest/1", "runs": [], "functions": [{"module": 1}]}')
    with pytest.raises(shapewatch.ManifestError, match=r"m.json: functions\[0\] is \{'module': 1\}, expected "):
        shapewatch.load_manifest(tmp_path / "m.json")


LONG_RUN = '''
import sys
import jax.numpy as jnp
import shapewatch

step = shapewatch.watched_jit(lambda x: x * 2)
step(jnp.ones(5))
shapewatch.report()  # a report during the run reads the manifest as it is now
print("ready", flush=True)
sys.stdin.readline()  # another run of the program writes the manifest meanwhile
'''


def test_a_run_that_ends_while_a_longer_run_goes_on_keeps_its_signatures_in_the_manifest(tmp_path):
    manifest, program = tmp_path / "m.json", tmp_path / "long.py"
    program.write_text(LONG_RUN)
    longer = subprocess.Popen([sys.executable, str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=environment(tmp_path / "cache", SHAPEWATCH_MANIFEST=manifest))
    try:
        assert longer.stdout.readline().strip() == "ready"
        short = tmp_path / "short.py"
        short.write_text(LONG_RUN.replace("jnp.ones(5)", "jnp.ones(3)").split("shapewatch.report()")[0])
        run(tmp_path / "cache", program=str(short), SHAPEWATCH_MANIFEST=manifest)
    finally:
        longer.communicate("\n", timeout=240)
    texts = {s["text"] for f in shapewatch.load_manifest(manifest)["functions"] for s in f["signatures"]}
    assert texts == {"x: float32[5]", "x: float32[3]"}
