"""Reports at exit, JSON, timeline and the command line, on real programs in subprocesses."""

import json
import logging
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import shapewatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "recompile_causes.py")


def run(*args, env=None, cwd=None):
    full_env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    full_env.pop("SHAPEWATCH_REPORT", None) if env is None or "SHAPEWATCH_REPORT" not in env else None
    return subprocess.run([sys.executable, "-m", "shapewatch", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or ROOT, timeout=300)


@pytest.mark.parametrize("cause, expected", [
    ("length", ["batch['tokens'].shape[1] took 12 values in [", "; pad to the buckets ["]),
    ("static_float", ["static argument lr took 4 values (0.1, 0.05, 0.02, 0.01)",
                      "pass it as a traced argument"]),
    ("weak_type", ["s flipped between a Python scalar (weak type) and a typed array",
                   "pass an array of fixed dtype"]),
    ("recreated", ["was re-created 3 times", "hoist the watched_jit"]),
])
def test_run_reports_the_known_cause_of_an_unmodified_program(cause, expected):
    proc = run("run", EXAMPLE, cause)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"ran {cause}\n"
    assert proc.stderr.startswith("[shapewatch] 1 function recompiled")
    for text in expected:
        assert text in proc.stderr


def test_json_records_kinds_threads_and_validates(tmp_path):
    out = tmp_path / "r.json"
    proc = run("run", "--json", str(out), "--report", "off", EXAMPLE, "nested")
    assert proc.returncode == 0 and proc.stderr == ""
    data = json.loads(out.read_text())
    validate(data)
    kinds = {f["function"].rsplit(".", 1)[-1]: f["kinds"] for f in data["functions"]}
    assert kinds["<lambda>"] == {"inlined": 3}
    assert kinds["outer"] == {"compile": 3}
    proc = run("run", "--json", str(out), "--report", "off", EXAMPLE, "threads")
    threads = {m["thread"] for f in json.loads(out.read_text())["functions"] for m in f["misses"]}
    assert threads == {"worker-0", "worker-1", "worker-2"}


def validate(data):
    """The documented schema (README, "JSON schema")."""
    assert data["schema"] == "shapewatch.report/2"
    for key in ("jax", "jaxlib", "backend", "x64", "process_index", "process_count", "hostname", "pid"):
        assert key in data["environment"], key
    assert isinstance(data["environment"]["process_index"], int)
    assert isinstance(data["environment"]["process_count"], int)
    assert isinstance(data["summary"], str)
    for key in ("values", "structures", "signatures"):
        assert isinstance(data[key], list), key
    for f in data["functions"]:
        for key, typ in [("key", str), ("function", str), ("module", str), ("location", str),
                         ("compiles", int), ("kinds", dict), ("signatures", int), ("trace_s", float),
                         ("lower_s", float), ("compile_s", float), ("total_s", float), ("dropped", int),
                         ("misses", list), ("causes", list)]:
            assert isinstance(f[key], typ), (key, f[key])
        for m in f["misses"]:
            for key in ("seq", "kind", "signature", "changes", "explanation", "call_site", "thread",
                        "timestamp", "trace_s", "lower_s", "compile_s", "total_s", "pid", "host",
                        "process_index", "process_count"):
                assert key in m, key
            assert m["kind"] in shapewatch._monitor.records.KINDS
            assert m["signature"] is None or 0 <= m["signature"] < len(data["signatures"])
        for c in f["causes"]:
            assert set(c) == {"kind", "path", "misses", "values", "counts", "text", "fix", "histogram", "paths"}
    for v in data["unwatched"].values():
        assert set(v) == {"compiles", "seconds"}


def test_saved_json_round_trips_through_show(tmp_path):
    out = tmp_path / "r.json"
    proc = run("run", "--json", str(out), EXAMPLE, "length")
    shown = run("show", str(out), "--report", "summary")
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[0] == proc.stderr.splitlines()[0]
    assert "cause: batch['tokens'].shape[1]" in shown.stdout


def test_diff_shows_the_fix_working(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    run("run", "--json", str(a), "--report", "off", EXAMPLE, "length")
    run("run", "--json", str(b), "--report", "off", EXAMPLE, "weak_type")
    proc = run("diff", str(a), str(b))
    assert proc.returncode == 0
    assert "gone: batch['tokens'].shape[1] took 12 values" in proc.stdout
    assert "new:  s flipped between a Python scalar" in proc.stdout


@pytest.mark.parametrize("content, problem", [
    ('{"schema": "shapewatch.report/1", "functions": [', "not valid JSON"),
    ('[1, 2]', "not a shapewatch report"),
    ('{"schema": "shapewatch.report/99", "functions": []}', "schema 'shapewatch.report/99' is not supported"),
])
def test_show_of_a_bad_file_is_one_line_and_status_2(tmp_path, content, problem):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = run("show", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"[shapewatch] {bad}: ") and problem in proc.stderr


def test_run_of_a_missing_script_or_module_is_status_2():
    for args in (["run", "nope.py"], ["run", "-m", "no_such_module_xyz"]):
        proc = run(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.startswith("[shapewatch] run: ")


def test_program_exit_status_passes_through_and_fail_on_recompile_is_3():
    assert run("run", "--report", "off", EXAMPLE, "weak_type", "7").returncode == 7
    proc = run("run", "--fail-on-recompile", "2", EXAMPLE, "length")
    assert proc.returncode == 3
    assert "--fail-on-recompile 2: varying_length.<locals>.train_step compiled 12 times" in proc.stderr
    assert run("run", "--fail-on-recompile", "2", EXAMPLE, "weak_type").returncode == 0


def test_report_at_exit_also_after_an_uncaught_exception(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import jax, jax.numpy as jnp\nf = jax.jit(lambda x: x)\n"
                      "f(jnp.ones(1)); f(jnp.ones(2))\nraise RuntimeError('crash')\n")
    proc = run("run", str(script))
    assert proc.returncode == 1
    assert "RuntimeError: crash" in proc.stderr
    assert "[shapewatch] 1 function recompiled 1 time," in proc.stderr


def test_nothing_is_printed_without_recompiles_and_off_silences(tmp_path):
    script = tmp_path / "calm.py"
    script.write_text("import shapewatch, jax.numpy as jnp\nf = shapewatch.watched_jit(lambda x: x)\n"
                      "f(jnp.ones(1)); f(jnp.ones(1))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""
    proc = run("run", EXAMPLE, "length", env={"SHAPEWATCH_REPORT": "off"})
    assert proc.stderr == ""


def test_shapewatch_json_env_writes_the_report_and_the_timeline(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import shapewatch, jax.numpy as jnp\nf = shapewatch.watched_jit(lambda x: x)\n"
                      "f(jnp.ones(1)); f(jnp.ones(2))\n")
    env = {**os.environ, "PYTHONPATH": ROOT, "SHAPEWATCH_JSON": str(tmp_path / "r-{process}.json"),
           "SHAPEWATCH_TRACE": str(tmp_path / "t.json")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0
    validate(json.loads((tmp_path / "r-0.json").read_text()))
    trace = json.loads((tmp_path / "t.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["name"].split()[0] for e in spans} >= {"trace", "lower", "compile"}
    # each miss's spans lie in order within the run: trace, then lower, then compile
    assert all(e["dur"] >= 0 for e in spans)
    by_kind = {k: sorted(e["ts"] for e in spans if e["name"].split()[0] == k) for k in ("trace", "lower", "compile")}
    assert len(by_kind["trace"]) == len(by_kind["compile"]) == 2
    assert all(t <= lo <= c for t, lo, c in zip(by_kind["trace"], by_kind["lower"], by_kind["compile"]))


def test_every_miss_is_logged_on_the_shapewatch_logger(caplog):
    f = shapewatch.watched_jit(lambda x: x + 1)
    with caplog.at_level(logging.INFO, logger="shapewatch"):
        f(jnp.ones(2))
        f(jnp.ones(3))
    messages = [r.getMessage() for r in caplog.records if r.name == "shapewatch"]
    assert len(messages) == 2 and messages[1].endswith("x.shape[0]: 2 -> 3")


def test_report_ranks_functions_by_cost_and_summarises():
    a = shapewatch.watched_jit(lambda x: x + 1)
    for n in range(1, 4):
        a(jnp.ones(n))
    rep = shapewatch.report()
    assert rep.summary().startswith("[shapewatch] 1 function recompiled 2 times, costing ")
    assert "cause: x.shape[0] took 3 values in [1, 3]" in rep.summary()
    assert rep.to_dict()["functions"][0]["causes"][0]["kind"] == "axis"


def test_help_documents_every_command():
    out = run("--help").stdout
    for command in ("run", "show", "diff", "merge", "buckets", "demo"):
        assert command in out
    assert "--fail-on-recompile" in run("run", "--help").stdout


def test_a_persistent_compilation_cache_hit_is_its_own_kind(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import jax.numpy as jnp, shapewatch\nf = shapewatch.watched_jit(lambda x: jnp.sin(x) * 3)\n"
                      "f(jnp.ones(17))\nprint([m.kind for m in shapewatch.misses(f)])\n")
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
    kinds = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                            timeout=120).stdout.strip() for _ in range(2)]
    assert kinds == ["['compile']", "['persistent_cache_hit']"]


def test_run_dash_m_runs_a_module_with_its_arguments(tmp_path):
    (tmp_path / "mymod.py").write_text(
        "import sys, jax, jax.numpy as jnp\nf = jax.jit(lambda x: x)\n"
        "for n in (1, 2):\n    f(jnp.ones(n))\nprint(sys.argv[1:])\n")
    proc = run("run", "-m", "mymod", "a", "b", cwd=str(tmp_path),
               env={"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "['a', 'b']\n"
    assert "x.shape[0] took 2 values" in proc.stderr


def test_patching_rebinds_jit_names_imported_before_shapewatch_was_loaded():
    import types

    import jax

    from shapewatch._integrations import patch as _patch

    early = types.ModuleType("early_user_module")
    early.jit = jax.jit
    sys.modules["early_user_module"] = early
    try:
        _patch.install()
        f = early.jit(lambda x: x + 1)
        assert shapewatch.is_watched(f) and shapewatch.is_watched(jax.jit(lambda x: x))
        assert shapewatch.is_watched(jax.jit(static_argnames="k")(lambda x, k: x))
    finally:
        _patch.uninstall()
        del sys.modules["early_user_module"]
    assert not shapewatch.is_watched(jax.jit(lambda x: x))


@pytest.mark.alone
def test_report_at_exit_also_after_ctrl_c(tmp_path):
    import signal

    script = tmp_path / "interrupted.py"
    script.write_text("import time, jax.numpy as jnp, shapewatch\nf = shapewatch.watched_jit(lambda x: x)\n"
                      "f(jnp.ones(1)); f(jnp.ones(2))\nprint('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "KeyboardInterrupt" in err
    assert "[shapewatch] 1 function recompiled 1 time," in err


# ---------------------------------------------------------------- found by review


def test_an_output_that_cannot_be_written_at_exit_leaves_the_others_written(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "prog.py"
    script.write_text("import jax.numpy as jnp, shapewatch\n"
                      "f = shapewatch.watched_jit(lambda x: x + 1)\n"
                      "for n in (1, 2, 3): f(jnp.ones(n))\n")
    html = tmp_path / "ok.html"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "SHAPEWATCH_JSON": str(tmp_path / "missing" / "r.json"),
                              "SHAPEWATCH_HTML": str(html), "SHAPEWATCH_TRACE": str(tmp_path / "t-{date}.json")})
    assert out.returncode == 0
    assert f"could not write the JSON report to {tmp_path / 'missing' / 'r.json'}" in out.stderr
    assert "unknown placeholder" in out.stderr
    assert html.exists() and "recompiled" in out.stderr  # the HTML and the text report are still there


def test_merging_files_that_claim_the_same_process_numbers_them_by_file(tmp_path):
    import json

    from shapewatch._reports.merge import merge_dicts, render_merged

    f = shapewatch.watched_jit(lambda x: x * 2)
    f(jnp.ones(4))
    a = json.loads(shapewatch.report().to_json())
    f(jnp.ones(5))
    b = json.loads(shapewatch.report().to_json())
    from shapewatch._reports.load import normalise_report

    merged = merge_dicts([("a.json", normalise_report(a)), ("b.json", normalise_report(b))])
    text = render_merged(merged)
    assert "numbered by their order" in text
    assert "1 divergent compile across 2 processes" in text


@pytest.mark.parametrize("damage", ["spans", "environment", "deep"])
def test_a_report_with_fields_of_the_wrong_type_is_one_line_and_status_2(tmp_path, damage):
    import json
    import subprocess
    import sys

    f = shapewatch.watched_jit(lambda x: x * 2)
    f(jnp.ones(4))
    f(jnp.ones(5))
    data = json.loads(shapewatch.report().to_json())
    if damage == "spans":
        for m in data["functions"][0]["misses"]:
            m["spans"] = [[1]]
    elif damage == "environment":
        data["environment"] = [1]
    path = tmp_path / "bad.json"
    path.write_text("[" * 100000 + "]" * 100000 if damage == "deep" else json.dumps(data))
    for args in (["show", str(path)], ["show", str(path), "--html", str(tmp_path / "x.html")],
                 ["merge", str(path), str(path)]):
        out = subprocess.run([sys.executable, "-m", "shapewatch", *args], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode in (0, 2) and "Traceback" not in out.stderr, (args, out.stderr)
        if out.returncode == 2:
            assert out.stderr.startswith("[shapewatch] ") and str(path) in out.stderr


def _scale_by(i):
    def scale(x):
        return x * i

    scale.__name__ = f"scale{i}"
    return scale


def test_compiles_outside_watched_functions_are_listed_so_that_their_counts_add_up():
    shapewatch.watched_jit(lambda x: x + 1)(jnp.ones(2))  # watching from here on
    x = jnp.ones(3)
    for i in range(9):
        jax.jit(_scale_by(i))(x).block_until_ready()
    text = shapewatch.report().to_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Outside watched functions: "))
    total = int(line.split(": ", 1)[1].split(" compile")[0])
    listed = line.split(" (", 1)[1].rstrip(")").split(", ")
    more = [p for p in listed if p.startswith("and ")]
    named = [int(p.rsplit(" ", 1)[1]) for p in listed if not p.startswith("and ")]
    assert total >= 9 and len(named) <= 6
    assert sum(named) + sum(int(p.split()[1]) for p in more) == total, line
    assert len(more) == (sum(named) < total)


def test_the_summary_costs_only_the_compiles_after_the_first():
    f = shapewatch.watched_jit(lambda x: jnp.sin(x) @ jnp.cos(x).T)
    for n in (5, 6, 7):
        f(jnp.ones((n, 3)))
    first, *later = shapewatch.misses(f)
    summary = shapewatch.report().summary()
    avoidable = sum(m.total_s for m in later)
    assert f"costing {avoidable:.1f} s of tracing and compiling after the first compile (" in summary
    assert f"3 compiles, {first.total_s + avoidable:.1f} s in all;" in summary
