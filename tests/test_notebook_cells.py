"""Notebook cells are named as Jupyter names them (``In [3]:2``), not by the kernel's temporary files.

A notebook runs in a real Jupyter kernel (nbclient drives ipykernel, started from
this interpreter), and cells run in IPython's own ``InteractiveShell``; each in a
fresh process, since both replace parts of the interpreter for the whole process.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISSING = [name for name in ("IPython", "ipykernel", "nbclient", "nbformat", "jupyter_client")
           if importlib.util.find_spec(name) is None]
needs_kernel = pytest.mark.skipif(bool(MISSING), reason=f"[shapewatch] the notebook tests run a real Jupyter "
                                  f"kernel: {', '.join(MISSING)} not installed (pip install -e .[test])")

CELLS = [
    "%load_ext shapewatch\nimport json\nimport jax, jax.numpy as jnp\nimport shapewatch",  # In [1]
    "@jax.jit\ndef f(x):\n    return (x * 2).sum()",                                       # In [2]
    "for n in (3, 4, 5):\n    f(jnp.ones(n))",                                              # In [3]
    "%shapewatch text",                                                                     # In [4]
    "%shapewatch",                                                                          # In [5]
    "jax.clear_caches()",                                                                   # In [6]
    "for n in (3, 4, 5):\n    f(jnp.ones(n))",                                              # In [7]: cell 3 again
    "print(json.dumps([m.call_site for m in shapewatch.misses(f)]))",                       # In [8]
]

# Executes the notebook in a kernel of this interpreter (a kernel spec of its own, in a temporary
# folder) and prints each cell's outputs as JSON.
RUN_NOTEBOOK = textwrap.dedent('''
    import json, os, sys, tempfile
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    cells, root = json.loads(sys.argv[1]), sys.argv[2]
    kernels = tempfile.mkdtemp()
    os.makedirs(os.path.join(kernels, "shapewatch-test"))
    with open(os.path.join(kernels, "shapewatch-test", "kernel.json"), "w") as fh:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "shapewatch test", "language": "python",
                   "env": {"PYTHONPATH": root, "SHAPEWATCH_REPORT": "off"}}, fh)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    km = KernelManager(kernel_name="shapewatch-test", kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels]))
    NotebookClient(nb, km=km, timeout=300, allow_errors=False).execute()
    print("RESULT " + json.dumps([[dict(o) for o in c.outputs] for c in nb.cells]))
''')


@pytest.fixture(scope="module")
def kernel_outputs(tmp_path_factory):
    """The outputs of each cell of :data:`CELLS`, run in a real Jupyter kernel."""
    proc = subprocess.run([sys.executable, "-c", RUN_NOTEBOOK, json.dumps(CELLS), ROOT], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": ROOT},
                          cwd=tmp_path_factory.mktemp("notebook"), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


@needs_kernel
@pytest.mark.slow
def test_the_text_report_of_a_kernel_names_each_cell_by_its_execution_count(kernel_outputs):
    text = kernel_outputs[3][0]["text"]
    assert "f  (In [2]:1)" in text
    assert [line.split()[2:4] for line in text.splitlines() if line.startswith("    #")] == [["In", "[3]:2"]] * 3
    assert "ipykernel" not in text


@needs_kernel
@pytest.mark.slow
def test_the_html_report_of_a_kernel_names_each_cell_by_its_execution_count(kernel_outputs):
    html = kernel_outputs[4][0]["data"]["text/html"]
    assert html.startswith('<div class="swr"')
    assert "In [2]:1" in html and html.count("In [3]:2") >= 3
    assert "ipykernel" not in html


@needs_kernel
@pytest.mark.slow
def test_a_cell_run_again_names_its_new_misses_by_the_new_count_and_keeps_the_old_ones(kernel_outputs):
    assert json.loads(kernel_outputs[7][0]["text"]) == ["In [3]:2"] * 3 + ["In [7]:2"] * 3


SHELL = textwrap.dedent('''
    import json, warnings
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()  # the shell a notebook kernel builds on; no %load_ext
    def cell(source):
        result = ip.run_cell(source, store_history=True)
        assert result.success, result.error_in_exec or result.error_before_exec

    cell("import jax.numpy as jnp\\nimport shapewatch")
    cell("@shapewatch.watched_jit\\ndef f(x):\\n    return x * 2")
    cell("for n in (1, 2):\\n    f(jnp.ones(n))")
    cell("report = shapewatch.report().to_dict()")
    [function] = ip.user_ns["report"]["functions"]
    print("RESULT " + json.dumps([function["location"], *(m["call_site"] for m in function["misses"])]))
''')


@pytest.mark.slow
def test_a_watched_function_in_ipython_cells_is_named_by_cell_without_the_extension(tmp_path):
    pytest.importorskip("IPython", reason="[shapewatch] IPython is not installed (pip install -e .[test])")
    script = tmp_path / "shell.py"
    script.write_text(SHELL)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": ROOT, "SHAPEWATCH_REPORT": "off"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.split("RESULT ", 1)[1]) == ["In [2]:1", "In [3]:2", "In [3]:2"]


MAGICS = textwrap.dedent('''
    import json
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    def cell(source):
        result = ip.run_cell(source, store_history=True)
        assert result.success, result.error_in_exec or result.error_before_exec

    cell("import jax, jax.numpy as jnp\\nimport shapewatch\\n%load_ext shapewatch")  # In [1]
    cell("@jax.jit\\ndef f(x):\\n    return x * 2")                                  # In [2]
    cell("%%time\\nx = 1\\nf(jnp.ones(1))")                                         # In [3]
    cell("x = 2\\n%time f(jnp.ones(2))")                                            # In [4]
    cell("%%timeit -n1 -r1\\nf(jnp.ones(3))")                                        # In [5]
    cell("%%capture\\nf(jnp.ones(4))")                                               # In [6]
    cell("f(jnp.ones(5))")                                                          # In [7]
    cell("def helper(n):\\n    return f(jnp.ones(n))")                              # In [8]
    cell("%%time\\nhelper(6)")                                                      # In [9]
    cell("helper(7)")                                                               # In [10]
    cell("sites = [m.call_site for m in shapewatch.misses(f)]")
    print("RESULT " + json.dumps(ip.user_ns["sites"]))
''')


@pytest.mark.slow
def test_code_run_by_a_magic_is_named_by_the_cell_that_ran_the_magic(tmp_path):
    pytest.importorskip("IPython", reason="[shapewatch] IPython is not installed (pip install -e .[test])")
    script = tmp_path / "magics.py"
    script.write_text(MAGICS)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": ROOT, "SHAPEWATCH_REPORT": "off"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.split("RESULT ", 1)[1]) == ["In [3]:3", "In [4]:2", "In [5]:2", "In [6]:2",
                                                             "In [7]:1", "In [8]:2", "In [8]:2"]
