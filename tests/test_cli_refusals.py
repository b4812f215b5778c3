"""The command line refuses an output path that is a directory and a report missing a field
`show` needs: one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAKE_REPORT = """
import shapewatch, jax.numpy as jnp, sys
shapewatch.configure(report="off")
@shapewatch.watched_jit
def double(x):
    return x * 2
double(jnp.ones(3)); double(jnp.ones(4))
shapewatch.report().to_json(sys.argv[1])
"""


def shapewatch(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "shapewatch", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("reports") / "report.json"
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", MAKE_REPORT, str(path)], check=True, env=env, timeout=120)
    return path


def test_merge_into_a_directory_is_one_line_and_status_2(report, tmp_path):
    (tmp_path / "out").mkdir()
    done = shapewatch("merge", str(report), str(report), "--json", "out", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "[shapewatch] merge --json out: cannot be written: Is a directory\n"


@pytest.mark.parametrize("module", [None, "missing"])
def test_show_refuses_a_report_whose_function_has_no_module(report, tmp_path, module):
    data = json.loads(report.read_text())
    if module is None:
        data["functions"][0]["module"] = None
    else:
        del data["functions"][0]["module"]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    done = shapewatch("show", "bad.json", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("[shapewatch] bad.json: not a complete report: functions[0] (double) has \"module\" "
                           "None, expected a string\n")


def test_show_reads_the_complete_report(report, tmp_path):
    done = shapewatch("show", str(report), cwd=tmp_path)
    assert done.returncode == 0 and "double" in done.stdout


@pytest.mark.parametrize("flag", ["--json", "--trace", "--html"])
def test_run_into_a_directory_is_one_line_and_status_2_before_the_program_runs(tmp_path, flag):
    (tmp_path / "out").mkdir()
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    done = shapewatch("run", flag, "out", "prog.py", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"[shapewatch] run {flag} out: is a directory; name a file to write")
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "ran").exists()


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--expect", "--warm"])
def test_run_with_a_manifest_nested_too_deeply_is_one_line_and_status_2(tmp_path, option):
    # it was a RecursionError traceback from json.load, status 1
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "prog.py").write_text("print('ran')\n")
    done = shapewatch("run", option, "deep.json", "prog.py", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (f"[shapewatch] run {option}: deep.json: not a readable shapewatch manifest (JSON nested "
                           "too deeply to read)\n")
    assert done.stdout == ""  # refused before the program ran


@pytest.mark.slow
@pytest.mark.parametrize("args, said", [
    (["merge", "{r}", "{r}", "--json", "out/"], "merge --json out/"),
    (["merge", "{r}", "{r}", "--html", "out/"], "--html out/"),
    (["show", "{r}", "--html", "out/"], "--html out/"),
])
def test_an_output_directory_named_with_a_slash_is_said_to_be_a_directory(report, tmp_path, args, said):
    # "out/" (as a shell completes a directory's name) was refused as "cannot be written: Not a directory"
    (tmp_path / "out").mkdir()
    done = shapewatch(*[a.format(r=report) for a in args], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"[shapewatch] {said}: cannot be written: Is a directory\n"


@pytest.mark.slow
def test_merge_writes_nothing_when_one_of_its_outputs_is_a_directory(report, tmp_path):
    # the --json file was written, then --html refused
    (tmp_path / "out").mkdir()
    done = shapewatch("merge", str(report), str(report), "--json", "merged.json", "--html", "out", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "[shapewatch] --html out: cannot be written: Is a directory\n"
    assert not (tmp_path / "merged.json").exists()
