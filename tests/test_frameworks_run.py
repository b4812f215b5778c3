"""The framework examples, unmodified, under ``python -m shapewatch run``: the full report in the user's terms."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests._frameworks import EXAMPLES, line_of

ROOT = os.path.dirname(EXAMPLES)
CASES = {  # example -> (frameworks it needs, its jit decorator)
    "equinox_training": (("equinox", "optax"), "@eqx.filter_jit"),
    "flax_nnx_training": (("flax.nnx", "optax"), "@nnx.jit"),
    "flax_linen_training": (("flax.linen", "optax"), "@jax.jit"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_an_unmodified_training_program_is_reported_at_its_own_function_lines_and_leaves(tmp_path, name):
    needs, decorator = CASES[name]
    for module in needs:
        pytest.importorskip(module)
    source = os.path.join(EXAMPLES, f"{name}.py")
    out = tmp_path / "report.json"
    env = {**os.environ, "SHAPEWATCH_REPORT": "full", "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "run", "--json", str(out), source],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert [f["function"] for f in data["functions"] if f["compiles"]] == ["train_step"]
    step = data["functions"][0]
    assert step["location"] == f"{source}:{line_of(source, decorator)}"
    assert step["compiles"] == 3 and step["signatures"] == 3
    call_site = f"{source}:{line_of(source, '= train_step(')}"
    assert {m["call_site"] for m in step["misses"]} == {call_site}
    assert [m["explanation"] for m in step["misses"]][1:] == [
        "tokens.shape[1]: 8 -> 12; labels.shape[1]: 8 -> 12",
        "tokens.shape[1]: 12 -> 16; labels.shape[1]: 12 -> 16",
    ]
    assert step["causes"][0]["text"] == "tokens.shape[1] and labels.shape[1] took 3 values in [8, 16]"
    for path in ("site-packages", "equinox/_jit.py", "flax/nnx", "dynamic_nodonate", ".states["):
        assert path not in proc.stderr
    assert "0 compiles" not in proc.stderr  # functions only inlined (optax's) are one line, not listed
