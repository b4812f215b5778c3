"""A signature an earlier run compiled, compiled again without a persistent-cache hit, is explained by
the key part that changed (one part changed at a time, each in two real runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests._across import PROGRAM, environment, run
from tests._jobs import free_port, run_processes

pytestmark = pytest.mark.filterwarnings("error")
WRITES = {"MIN_COMPILE": 0}


def across(proc: subprocess.CompletedProcess) -> list[str]:
    lines = proc.stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Across runs:")), None)
    return [] if start is None else [line.strip() for line in lines[start + 1:] if line.startswith("  ")]


def test_a_second_run_that_changes_nothing_hits_and_explains_nothing(tmp_path):
    run(tmp_path / "cache", **WRITES)
    proc = run(tmp_path / "cache", **WRITES)
    assert "1 hit" in proc.stderr
    assert across(proc) == []


def test_an_added_xla_flag_is_named(tmp_path):
    run(tmp_path / "cache", **WRITES)
    [line] = across(run(tmp_path / "cache", XLA_FLAGS="--xla_cpu_enable_fast_math=false", **WRITES))
    assert line == "step(x: float32[2,8]): [xla_flags] XLA_FLAGS gained --xla_cpu_enable_fast_math=false"


def test_a_changed_device_count_is_named(tmp_path):
    run(tmp_path / "cache", XLA_FLAGS="--xla_force_host_platform_device_count=2", **WRITES)
    [line] = across(run(tmp_path / "cache", XLA_FLAGS="--xla_force_host_platform_device_count=1", **WRITES))
    # XLA removes the flags it parses from XLA_FLAGS when the backend starts: JAX's key never sees this one
    assert line == "step(x: float32[2,8]): [devices] 2 -> 1 devices"


def test_a_changed_function_body_names_the_first_differing_line_of_the_lowered_program(tmp_path):
    run(tmp_path / "cache", BODY=1, **WRITES)
    [line] = across(run(tmp_path / "cache", BODY=2, **WRITES))
    assert line.startswith("step(x: float32[2,8]): [program] the lowered program of step changed: "
                           "first differing line ")
    assert "dense<1.000000e+00>" in line  # the earlier run's line holds the constant that changed


def test_a_compile_under_the_write_threshold_is_named_as_never_written_with_the_setting(tmp_path):
    run(tmp_path / "cache", MIN_COMPILE=30)
    [line] = across(run(tmp_path / "cache", MIN_COMPILE=30))
    assert line.startswith("step(x: float32[2,8]): [never_written] never written by the earlier run: compiled in ")
    assert "under jax_persistent_cache_min_compile_time_secs=30; set it lower (0 writes every compile)" in line


def test_an_entry_removed_from_the_cache_directory_is_named_as_evicted(tmp_path):
    run(tmp_path / "cache", **WRITES)
    for entry in (tmp_path / "cache").iterdir():
        if entry.name.startswith("jit_step"):
            entry.unlink()
    [line] = across(run(tmp_path / "cache", **WRITES))
    assert line.startswith("step(x: float32[2,8]): [evicted] written by the earlier run with this same key, "
                           f"and no longer in {tmp_path / 'cache'}")


def test_a_changed_setting_that_left_the_key_as_it_was_is_not_blamed_for_an_evicted_entry(tmp_path):
    run(tmp_path / "cache", **WRITES)
    for entry in (tmp_path / "cache").iterdir():
        if entry.name.startswith("jit_step"):
            entry.unlink()
    # step has no matmul: its program, and so JAX's key, are the same under another matmul precision
    [line] = across(run(tmp_path / "cache", JAX_DEFAULT_MATMUL_PRECISION="highest", **WRITES))
    assert line.startswith("step(x: float32[2,8]): [evicted] written by the earlier run with this same key, ")


def _job(cache, reports, port):
    env = environment(cache, SHAPEWATCH_JSON=str(reports) + "-{process}.json", SHAPEWATCH_REPORT="off", **WRITES)
    run_processes([[sys.executable, PROGRAM, str(i), "2", str(port)] for i in range(2)], env)


def test_a_second_process_is_named_as_never_written_in_the_merged_report(tmp_path):
    _job(tmp_path / "cache", tmp_path / "first", free_port())
    _job(tmp_path / "cache", tmp_path / "second", free_port())
    merged = subprocess.run([sys.executable, "-m", "shapewatch", "merge", str(tmp_path / "second-0.json"),
                             str(tmp_path / "second-1.json")], env=environment(tmp_path / "cache"),
                            capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0, merged.stderr
    assert "  p0: 1 hit\n" in merged.stdout  # one hit; two would read "2 hits"
    assert "  p1: 1 not written (not_written: not process 0 (only process 0 writes) x1)" in merged.stdout
    assert ("  p1 step(x: float32[2,8]): [never_written] never written by the earlier run: only process 0 writes "
            "the persistent cache (this is process 1)") in merged.stdout


def test_shapewatch_diff_of_two_manifests_names_the_changed_key_part(tmp_path):
    manifest = tmp_path / "cache.shapewatch" / "_across_program.p0.json"
    run(tmp_path / "cache", **WRITES)
    first = tmp_path / "first.json"
    first.write_bytes(manifest.read_bytes())
    run(tmp_path / "cache", XLA_FLAGS="--xla_cpu_enable_fast_math=false", LENGTHS="8,9", **WRITES)
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "diff", str(first), str(manifest)],
                          env=environment(tmp_path / "cache"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "key parts: XLA_FLAGS gained --xla_cpu_enable_fast_math=false" in out
    assert ("  step(x: float32[2,8]): [xla_flags] XLA_FLAGS gained --xla_cpu_enable_fast_math=false") in out
    assert "new:  step(x: float32[2,9])" in out


MOVED_PROGRAM = '''
import jax.numpy as jnp
import shapewatch
{blank}
@shapewatch.watched_jit
def step(x):
    return (x * 2).sum()

step(jnp.ones((2, 8)))
'''


def test_a_function_moved_by_a_line_is_named_where_jax_keys_on_the_programs_locations(tmp_path):
    program = tmp_path / "moved.py"
    keyed = {"JAX_COMPILATION_CACHE_DIR": tmp_path / "cache", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": 0,
             "JAX_COMPILATION_CACHE_INCLUDE_METADATA_IN_KEY": 1}
    program.write_text(MOVED_PROGRAM.format(blank=""))
    run(tmp_path / "cache", program=str(program), **keyed)
    program.write_text(MOVED_PROGRAM.format(blank="\n"))
    [line] = across(run(tmp_path / "cache", program=str(program), **keyed))
    assert line.startswith("step(x: float32[2,8]): [program] the lowered program of step changed: "
                           "first differing line ")
