"""Compiles outside watched functions are counted from the start of the watch, as JAX's own log counts them.

``python -m shapewatch run``, ``shapewatch.watch()`` and ``%load_ext shapewatch``
count every compile from the moment they start, also those before the program's
first ``jax.jit`` (data preparation: random numbers, one-hot labels, a
normalisation). Each test runs a real program with ``JAX_LOG_COMPILES=1`` and
compares the report's count with the lines of JAX's log.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "-- watching from here --"

# Array work before the first jax.jit, as data preparation does; then a jitted step.
PROGRAM = textwrap.dedent('''
    x = jax.random.normal(jax.random.PRNGKey(0), (64, 8))
    labels = jax.nn.one_hot(jnp.arange(64) % 4, 4)
    x = (x - x.mean(0)) / x.std(0)

    @jax.jit
    def step(w, x, y):
        return w - 0.1 * jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)

    w = jnp.zeros((8, 4))
    for _ in range(3):
        w = step(w, x, labels)
    print(float(w.sum()))
''')

REPORT = "report = shapewatch.report().to_dict()\nprint('REPORT ' + json.dumps(report))\n"


def environment():
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_LOG_COMPILES": "1", "SHAPEWATCH_REPORT": "off"}
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE"):
        env.pop(name, None)  # a persistent cache hit is logged as a hit, not as a compile
    return env


def jax_logged_compiles(stderr):
    """Backend compiles in JAX's own log (``JAX_LOG_COMPILES=1``), after the mark if there is one."""
    log = stderr.split(MARK, 1)[-1]
    return sum("Finished XLA compilation of " in line for line in log.splitlines())


def reported_compiles(report):
    """Compiles of the report: those of watched functions and those outside them."""
    watched = sum(f["compiles"] for f in report["functions"])
    return watched, watched + sum(entry["compiles"] for entry in report["unwatched"].values())


@pytest.fixture(scope="module")
def run_of_the_program(tmp_path_factory):
    """(stderr, JSON report) of the program under ``python -m shapewatch run --report full``."""
    folder = tmp_path_factory.mktemp("run")
    script = folder / "prog.py"
    script.write_text("import jax\nimport jax.numpy as jnp\n" + PROGRAM)
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "run", "--report", "full", "--json", "r.json",
                           str(script)], capture_output=True, text=True, env=environment(), cwd=folder, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr, json.loads((folder / "r.json").read_text())


@pytest.mark.slow
def test_run_counts_the_compiles_before_the_first_jit_as_jax_logs_them(run_of_the_program):
    stderr, report = run_of_the_program
    logged = jax_logged_compiles(stderr)
    watched, total = reported_compiles(report)
    assert watched == 1 and logged >= 10  # step, and the data preparation's own compiles
    assert total == logged, stderr


@pytest.mark.slow
def test_the_line_of_compiles_outside_names_the_costliest_and_counts_the_rest(run_of_the_program):
    stderr, report = run_of_the_program
    [line] = [line for line in stderr.splitlines() if line.startswith("Outside watched functions: ")]
    outside = sum(entry["compiles"] for entry in report["unwatched"].values())
    assert line.startswith(f"Outside watched functions: {outside} compiles, ")
    inside = line.split(" (", 1)[1].removesuffix(")")
    named, _, rest = inside.partition(", and ")
    # jax >= 0.7 names each compile (jit(_normal), ...); older jax names none (<unnamed>)
    functions = [name for name, entry in report["unwatched"].items() if entry["compiles"]]
    assert [entry.rsplit(" ", 1)[0] for entry in named.split(", ")] == functions[:6]
    more = re.fullmatch(r"(\d+) more in (\d+) other functions?", rest) if rest else None
    assert (more is not None and int(more[2]) == len(functions) - 6) if len(functions) > 6 else not rest
    assert sum(int(entry.rsplit(" ", 1)[1]) for entry in named.split(", ")) + int(more[1] if more else 0) == outside


@pytest.mark.slow
def test_watch_counts_every_compile_from_the_moment_it_is_called(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(f"import json, sys\nimport jax\nimport jax.numpy as jnp\nimport shapewatch\n"
                      f"shapewatch.watch()\nprint({MARK!r}, file=sys.stderr, flush=True)\n{PROGRAM}{REPORT}")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=environment(),
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    logged = jax_logged_compiles(proc.stderr)
    watched, total = reported_compiles(json.loads(proc.stdout.split("REPORT ", 1)[1]))
    assert watched == 1 and logged >= 10
    assert total == logged, proc.stderr


NOTEBOOK = textwrap.dedent('''
    import json, sys
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    def cell(source):
        result = ip.run_cell(source, store_history=True)
        assert result.success, result.error_in_exec or result.error_before_exec

    cell("import json, sys\\nimport jax\\nimport jax.numpy as jnp")
    cell("%load_ext shapewatch")
    print(MARK, file=sys.stderr, flush=True)
    cell(PROGRAM)
    cell("import shapewatch\\n" + REPORT)
''')


@pytest.mark.slow
def test_the_ipython_extension_counts_every_compile_from_load_ext(tmp_path):
    pytest.importorskip("IPython", reason="[shapewatch] IPython is not installed (pip install -e .[test])")
    script = tmp_path / "notebook.py"
    script.write_text(f"MARK = {MARK!r}\nPROGRAM = {PROGRAM!r}\nREPORT = {REPORT!r}\n{NOTEBOOK}")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=environment(),
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    logged = jax_logged_compiles(proc.stderr)
    watched, total = reported_compiles(json.loads(proc.stdout.split("REPORT ", 1)[1]))
    assert watched == 1 and logged >= 10
    assert total == logged, proc.stderr
