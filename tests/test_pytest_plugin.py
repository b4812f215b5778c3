"""The pytest plugin, run through pytester on real JAX (CPU)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os

import pytest

pytest_plugins = ["pytester"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Installed, the plugin loads through its entry point; from a source tree, name it.
_INSTALLED = any(ep.name == "shapewatch" for ep in importlib.metadata.entry_points(group="pytest11"))
PLUGIN = () if _INSTALLED else ("-p", "shapewatch._integrations.pytest_plugin")

MODULE = """
import jax.numpy as jnp
import pytest
import shapewatch

@shapewatch.watched_jit
def step(x):
    return x + 1
"""


@pytest.fixture
def run(pytester):
    def run(tests, *args, subprocess=False):
        pytester.makepyfile(test_it=MODULE + tests)
        runner = pytester.runpytest_subprocess if subprocess else pytester.runpytest_inprocess
        return runner(*PLUGIN, "-p", "no:randomly", "-p", "no:cacheprovider", *args)

    return run


def test_the_summary_shows_the_report_and_the_test_during_which_each_miss_happened(run, pytester):
    result = run("""
def test_first():
    step(jnp.ones(3))

def test_second():
    step(jnp.ones(3))
    step(jnp.ones(4))
""", "--shapewatch", "--shapewatch-json", "out.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*= shapewatch =*",
        "*step*2 compiles*",
        "misses by test:",
        "  test_it.py::test_first",
        "    #* step: first compile ?compile?",
        "  test_it.py::test_second",
        "    #* step: x.shape?0?: 3 -> 4 ?compile?",
    ])
    data = json.loads((pytester.path / "out.json").read_text())
    assert data["schema"] == "shapewatch.report/2"
    assert [(f["function"], f["compiles"]) for f in data["functions"]] == [("step", 2)]


def test_the_markers_fail_a_test_at_the_compile_over_its_limit(run):
    result = run("""
@pytest.mark.shapewatch(max_compiles=1)
def test_two_shapes():
    step(jnp.ones(3))
    step(jnp.ones(5))

@pytest.mark.shapewatch(max_compiles=1)
def test_one_shape():
    step(jnp.ones(7))
    step(jnp.ones(7))

@pytest.mark.shapewatch(no_recompiles=True)
def test_warm_then_hit():
    step(jnp.ones(8))
    step(jnp.ones(8))

@pytest.mark.shapewatch(no_recompiles=True)
def test_warm_then_new_shape():
    step(jnp.ones(2))
    step(jnp.ones(6))

@pytest.mark.shapewatch(max_compile=1)
def test_typo():
    pass
""", "--strict-markers")
    result.assert_outcomes(passed=2, failed=3)
    out = result.stdout.str()
    assert ("RecompileError: [shapewatch] step compiled inside test_it.py::test_two_shapes "
            "(marked shapewatch(max_compiles=1): the test already had its 1).") in out
    assert "this miss: x.shape[0]: 3 -> 5" in out
    assert ("step compiled inside test_it.py::test_warm_then_new_shape (marked shapewatch(no_recompiles=True): "
            "one compile per function, this is its second).") in out
    result.stdout.fnmatch_lines(["*bad marker*use @pytest.mark.shapewatch(max_compiles=N)*"])
    result.stdout.fnmatch_lines(["FAILED test_it.py::test_two_shapes*", "FAILED test_it.py::test_warm_then_new_shape*",
                                 "FAILED test_it.py::test_typo*"])
    assert "misses by test" not in out  # no summary without --shapewatch


def test_the_records_fixture_holds_the_test_misses_and_keeps_the_session_records(run):
    result = run("""
def test_earlier():
    step(jnp.ones(9))

def test_records(shapewatch_records):
    assert shapewatch_records.all() == []
    step(jnp.ones(3))
    step(jnp.ones(3))
    step(jnp.ones(4))
    assert shapewatch_records.compiles == 2
    assert [m.explanation for m in shapewatch_records.misses(step)] == ["x.shape[0]: 9 -> 3", "x.shape[0]: 3 -> 4"]
    assert [m.kind for m in shapewatch_records.all()] == ["compile", "compile"]
    assert shapewatch_records.report().functions[0].record.compiles == 2
    assert shapewatch.report().functions[0].record.compiles == 3

def test_later(shapewatch_records):
    step(jnp.ones(9))
    assert shapewatch_records.all() == [] and shapewatch_records.report().functions == ()
""", "--shapewatch")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*step*3 compiles*", "misses by test:", "  test_it.py::test_earlier",
                                 "    #* step: first compile ?compile?"])


def test_the_session_report_is_printed_once(run, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", REPO)
    monkeypatch.delenv("SHAPEWATCH_REPORT", raising=False)
    result = run("""
def test_two_shapes():
    step(jnp.ones(3))
    step(jnp.ones(4))
""", "--shapewatch", subprocess=True)
    result.assert_outcomes(passed=1)
    printed = result.stdout.str() + result.stderr.str()
    assert printed.count("[shapewatch] 1 function recompiled 1 time,") == 1, printed


@pytest.mark.slow
def test_under_xdist_each_worker_reports_its_own(run, pytester, monkeypatch):
    if importlib.util.find_spec("xdist") is None:
        pytest.skip("pytest-xdist is not installed")
    monkeypatch.setenv("PYTHONPATH", REPO)
    tests = "".join(f"\ndef test_{i}():\n    step(jnp.ones({i + 1}))\n" for i in range(4))
    result = run(tests, "-n", "2", "--shapewatch", "--shapewatch-json", "out.json", subprocess=True)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([
        "under pytest-xdist each worker recorded its own misses (this controller ran no tests); "
        "per-worker reports written to out.gw*.json.",
        "*- shapewatch: worker gw0 -*",
        "*- shapewatch: worker gw1 -*",
    ])
    written = sorted(p.name for p in pytester.path.glob("out*.json"))
    assert written == ["out.gw0.json", "out.gw1.json"]
    compiles = sum(f["compiles"] for p in written for f in json.loads((pytester.path / p).read_text())["functions"])
    assert compiles == 4
