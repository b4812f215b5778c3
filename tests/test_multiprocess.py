"""Real multi-process runs: jax.distributed on the CPU, coordinator on 127.0.0.1."""

import json
import os
import subprocess
import sys

import pytest

import shapewatch
from tests._jobs import free_port, run_processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "_multiprocess_worker.py")


def run_job(lengths, out_dir):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    return run_processes([[sys.executable, WORKER, str(i), str(len(lengths)), str(port), str(n), str(out_dir)]
                          for i, n in enumerate(lengths)], env)


@pytest.mark.parametrize("lengths", [[32, 33], [32, 33, 32]], ids=["2 processes", "3 processes"])
def test_a_process_with_another_batch_length_is_named_on_every_process(tmp_path, lengths):
    outputs = run_job(lengths, tmp_path)
    others = ("process " if len(lengths) == 2 else "processes ") + ", ".join(
        str(i) for i in range(len(lengths)) if i != 1)
    for i, out in enumerate(outputs):
        assert f"process {i}: agreed=False" in out
        assert f"RecompileWarning: [shapewatch] processes compiled different signatures (seen from process {i} of {len(lengths)})" in out
        assert (f"train_step: process 1 compiled (batch['tokens']: float32[4,33]) that {others} did not; "
                "it differs in batch['tokens'].shape[1]: 33 (the others: 32)") in out
    reports = [str(tmp_path / f"report-{i}.json") for i in range(len(lengths))]
    merged = shapewatch.merge_reports(reports)
    assert [p["process_index"] for p in merged["processes"]] == list(range(len(lengths)))
    for i, path in enumerate(reports):
        with open(path) as fh:
            misses = [m for f in json.load(fh)["functions"] for m in f["misses"]]
        assert {(m["process_index"], m["process_count"]) for m in misses} == {(i, len(lengths))}
    odd = [d for d in merged["divergences"] if d["compiled_by"] == [1]]
    assert odd and odd[0]["difference"] == "batch['tokens'].shape[1]: 33 (the others: 32)"
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "merge", *reports], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"[shapewatch] {len(odd) + (len(merged['divergences']) - len(odd))} divergent compiles")


def test_equal_shapes_pass_silently(tmp_path):
    outputs = run_job([32, 32], tmp_path)
    for i, out in enumerate(outputs):
        assert out == f"process {i}: agreed=True\n"


def test_without_jax_distributed_the_check_is_a_no_op():
    assert shapewatch.check_hosts_agree() is True
    with pytest.raises(ValueError, match="'raise', 'warn'"):
        shapewatch.check_hosts_agree(on_divergence="ignore")


def test_merge_of_a_truncated_or_foreign_file_names_it(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(shapewatch.report().to_json())
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "shapewatch.report/1", "funct')
    with pytest.raises(ValueError, match=f"{bad}: not valid JSON"):
        shapewatch.merge_reports([str(good), str(bad)])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "shapewatch.report/3", "functions": []}))
    with pytest.raises(ValueError, match=f"{other}: schema 'shapewatch.report/3' is not supported"):
        shapewatch.merge_reports([str(good), str(other)])
