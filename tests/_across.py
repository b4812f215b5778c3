"""Runs tests/_across_program.py (or another program) in a fresh process, as a user's run would be."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "tests", "_across_program.py")


def environment(cache_dir: object, **variables: object) -> dict[str, str]:
    """The environment of one run: the persistent cache at ``cache_dir``, the report at exit full."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHAPEWATCH", "XLA_FLAGS", "JAX_"))}
    env.update(PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", CACHE_DIR=str(cache_dir), SHAPEWATCH_REPORT="full")
    env.update({k: str(v) for k, v in variables.items()})
    return env


def run(cache_dir: object, *args: str, program: str = PROGRAM, **variables: object) -> subprocess.CompletedProcess:
    """One run of ``program`` (exit status 0 asserted); its stdout and stderr as text."""
    proc = subprocess.run([sys.executable, *args, program], env=environment(cache_dir, **variables),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def compiles(proc: subprocess.CompletedProcess) -> list[dict]:
    """The program's printed compiles of ``step`` (kind, cache truth, signature)."""
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
