"""``shapewatch run --fail-on-recompile`` and ``shapewatch show``, in real subprocesses."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TWO_SHAPES = "import jax, jax.numpy as jnp\nf = jax.jit(lambda x: x + 1)\nf(jnp.ones(1)); f(jnp.ones(2))\n"
ONE_SHAPE = "import jax, jax.numpy as jnp\nf = jax.jit(lambda x: x + 1)\nf(jnp.ones(1))\n"

# The worker compiles only once the program's own code has returned, whatever the machine's speed.
LATE_THREAD = textwrap.dedent('''
    import sys, threading, jax, jax.numpy as jnp

    def compile_after_main_code_returns(me=__file__, main=threading.main_thread().ident):
        stop = threading.Event()
        while not stop.wait(0.01):
            frame = sys._current_frames().get(main)
            while frame is not None and frame.f_code.co_filename != me:
                frame = frame.f_back
            if frame is None:
                break
        f = jax.jit(lambda x: x * 2)
        for n in (1, 2, 3):
            f(jnp.ones(n))
        print("worker compiled", flush=True)

    threading.Thread(target=compile_after_main_code_returns).start()
    print("main code done", flush=True)
''')


def run(tmp_path, source, *args):
    script = tmp_path / "prog.py"
    script.write_text(source)
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("SHAPEWATCH_REPORT", None)
    return subprocess.run([sys.executable, "-m", "shapewatch", "run", *args, str(script)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)


def test_fail_on_recompile_counts_compiles_of_threads_that_outlive_the_main_code(tmp_path):
    proc = run(tmp_path, LATE_THREAD, "--fail-on-recompile", "1")
    assert proc.stdout == "main code done\nworker compiled\n"
    assert proc.returncode == 3, proc.stderr
    assert "[shapewatch] --fail-on-recompile 1: compile_after_main_code_returns.<locals>.<lambda> compiled 3 times" \
        in proc.stderr


def test_fail_on_recompile_says_where_the_report_is_in_each_report_mode(tmp_path):
    lines = {}
    for args in (["--report", "off"], ["--report", "off", "--json", "r.json"], ["--report", "summary"]):
        proc = run(tmp_path, TWO_SHAPES, "--fail-on-recompile", "1", *args)
        assert proc.returncode == 3
        lines[args[-1]] = proc.stderr.splitlines()[0]
    assert lines["off"] == ("[shapewatch] --fail-on-recompile 1: <lambda> compiled 2 times "
                            "(the report is off; --report summary or --json PATH shows it)")
    assert lines["r.json"].endswith("(the report is off here; it is saved to r.json)")
    assert lines["summary"].endswith("(see the report below)")
    proc = run(tmp_path, ONE_SHAPE, "--fail-on-recompile", "0")
    assert proc.returncode == 3
    assert proc.stderr == ("[shapewatch] --fail-on-recompile 0: <lambda> compiled 1 time (it compiled once, so "
                           "the summary report is not printed; --report full prints it)\n")


def saved_report(tmp_path):
    run(tmp_path, TWO_SHAPES, "--report", "off", "--json", "r.json")
    return json.loads((tmp_path / "r.json").read_text())


@pytest.mark.parametrize("damage, problem", [
    (lambda d: d["functions"][0].pop("kinds"), 'functions[0] (<lambda>) has no "kinds"'),
    (lambda d: d["functions"][0]["misses"][1].pop("call_site"), 'functions[0] (<lambda>) misses[1] has no "call_site"'),
    (lambda d: d["functions"][0].update(compiles="2"), "functions[0] (<lambda>)[\"compiles\"] is '2', expected an integer"),
    (lambda d: d["functions"].append(7), "functions[1] is int, expected an object"),
])
def test_show_of_a_report_with_missing_fields_names_the_file_and_the_field(tmp_path, damage, problem):
    data = saved_report(tmp_path)
    damage(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    for command in (["show", str(bad)], ["diff", str(bad), str(bad)], ["merge", str(bad)]):
        proc = subprocess.run([sys.executable, "-m", "shapewatch", *command], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == f"[shapewatch] {bad}: not a complete shapewatch.report/2 report: {problem}\n"


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_the_json_report_and_the_trace_follow_the_umask_like_any_file(tmp_path, umask):
    script = tmp_path / "prog.py"
    script.write_text(TWO_SHAPES)
    env = {**os.environ, "PYTHONPATH": ROOT}
    command = f'umask {umask:03o} && exec "$0" -m shapewatch run --report off --json r.json --trace t.json prog.py'
    proc = subprocess.run(["sh", "-c", command, sys.executable], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("r.json", "t.json"):
        assert oct((tmp_path / name).stat().st_mode & 0o777) == oct(0o666 & ~umask)


def test_the_demo_counts_the_compiles_of_the_fix_from_a_cold_cache_as_it_promised():
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "demo"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    promise = next(line for line in lines if "fix: storm: " in line and "; pad to the buckets" in line)
    assert "; pad to the buckets [48, 64, 88, 136] (shapewatch.buckets.propose): 4 compiles instead of 18" in promise
    assert lines[-1] == "[demo] from a cold cache, train_step compiled 4 times (4 padded lengths: [48, 64, 88, 136]) instead of 18."


OPTAX_STEP = textwrap.dedent('''
    import jax, jax.numpy as jnp, optax

    opt = optax.adam(1e-2)

    @jax.jit
    def step(w, state, x):
        g = jax.grad(lambda w: jnp.sum((x @ w) ** 2))(w)
        updates, state = opt.update(g, state, w)
        return optax.apply_updates(w, updates), state

    w = jnp.ones(3)
    state = opt.init(w)
    for n in (4, 5):
        w, state = step(w, state, jnp.ones((n, 3)))
    opt.update(w, state, w)  # optax's own jits, called outside the user's
''')


def test_run_watches_the_programs_jits_not_those_of_an_installed_library(tmp_path):
    proc = run(tmp_path, OPTAX_STEP, "--report", "full", "--json", "r.json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [f["function"] for f in report["functions"]] == ["step"]
    mentions = [line for line in proc.stderr.splitlines() if "tree_bias_correction" in line]
    assert all(line.startswith("Outside watched functions: ") for line in mentions), mentions
