"""Warm start: an earlier run's signatures compiled ahead of time, in background threads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import shapewatch
from shapewatch._integrations.warm import abstract_arguments
from tests._across import compiles, run

MANIFEST = "_across_program.p0.json"


def _jax_at_least(major, minor):
    return tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (major, minor)


def test_a_warm_started_run_finds_its_compiles_already_done(tmp_path):
    run(tmp_path / "cache", LENGTHS="8,9", MIN_COMPILE=0)
    manifest = tmp_path / "first.json"
    manifest.write_bytes((tmp_path / "cache.shapewatch" / MANIFEST).read_bytes())
    seen = compiles(run(tmp_path / "cache", LENGTHS="8,9", MIN_COMPILE=0, WARM=manifest))
    warm = [c for c in seen if c["thread"].startswith("shapewatch-warm")]
    calls = [c for c in seen if c["thread"] == "MainThread"]
    assert sorted(c["signature"] for c in warm) == ["x: float32[2,8]", "x: float32[2,9]"]
    assert all(c["kind"] == "ahead_of_time" for c in warm)
    if _jax_at_least(0, 6):  # the call reuses the ahead-of-time executable: nothing compiles on it
        assert calls == []
    else:  # jax 0.5 compiles again on the call: the persistent cache has it
        assert [c["cache"]["status"] for c in calls] == ["hit", "hit"]


def test_warm_compiles_a_function_made_after_warm_was_called(tmp_path):
    @shapewatch.watched_jit
    def first(x, batch):
        return x.sum() + batch["t"][0].sum()

    first(jnp.ones(3), {"t": (jnp.ones((2, 2), jnp.int32),)})
    manifest = shapewatch.write_manifest(tmp_path / "m.json")
    shapewatch.reset()
    warmup = shapewatch.warm(manifest)
    try:
        @shapewatch.watched_jit
        def first(x, batch):  # noqa: F811  (the same function, made again: as in the next run)
            return x.sum() + batch["t"][0].sum()

        assert warmup.wait(60)
        assert [(f.rsplit(".", 1)[-1], s) for f, s, _ in warmup.warmed] == [
            ("first", "x: float32[3], batch['t'][0]: int32[2,2]")]
        assert [m.kind for m in shapewatch.misses(first)] == ["ahead_of_time"]
    finally:
        warmup.stop()


def test_a_tree_warm_cannot_rebuild_is_skipped_with_the_reason():
    sig = {"arrays": [], "statics": [], "structure": {"x": "PyTreeDef(CustomNode(Foo[()], [*]))"},
           "keywords": [], "defaults": []}
    with pytest.raises(ValueError, match=r"its tree PyTreeDef\(CustomNode.* is not made of dicts, lists, tuples"):
        abstract_arguments(sig)


def test_warm_rejects_a_bad_thread_count(tmp_path):
    with pytest.raises(ValueError, match=r"warm\(threads=0\): use an integer >= 1"):
        shapewatch.warm({"functions": []}, threads=0)


def test_shapewatch_run_warm_compiles_ahead_and_exits(tmp_path):
    import subprocess
    import sys

    from tests._across import PROGRAM, environment

    run(tmp_path / "cache", LENGTHS="8", MIN_COMPILE=0)
    manifest = tmp_path / "cache.shapewatch" / MANIFEST
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "run", "--warm", str(manifest), PROGRAM],
                          env=environment(tmp_path / "cache", LENGTHS="8", MIN_COMPILE=0, SHAPEWATCH_MANIFEST="off"),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert [c["thread"].startswith("shapewatch-warm") for c in compiles(proc) if c["kind"] == "ahead_of_time"] == [
        True]
