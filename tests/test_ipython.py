"""Notebooks: ``Report._repr_html_`` and the IPython extension, through IPython's own tools.

The extension replaces ``jax.jit`` for the whole process, so it runs in a fresh
process, in IPython's own ``InteractiveShell`` (the shell a notebook kernel builds on).
"""

import json
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import pytest

import shapewatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip("IPython", reason="[shapewatch] IPython is not installed (pip install -e .[test])")


def test_a_report_as_the_value_of_a_cell_is_drawn_as_html():
    from IPython.core.formatters import DisplayFormatter

    f = shapewatch.watched_jit(lambda x: x + 1)
    f(jnp.ones(2))
    f(jnp.ones(3))
    data, _ = DisplayFormatter().format(shapewatch.report())
    fragment = data["text/html"]
    assert fragment.startswith('<div class="swr" id="sw-') and fragment.endswith("</div>")
    assert "<html" not in fragment and "<!DOCTYPE" not in fragment  # a fragment, to sit in a notebook
    assert len(fragment.split('class="mark kind-compile" data-hover')) - 1 == 2
    assert "x.shape[0]: 2 -&gt; 3" in fragment


NOTEBOOK = textwrap.dedent('''
    import json, sys
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    ip = InteractiveShell.instance()  # the shell a notebook kernel builds on (rich display on)
    out = {}
    def cell(source):
        result = ip.run_cell(source)
        assert result.success, result.error_in_exec or result.error_before_exec
        return result

    cell("import jax, jax.numpy as jnp\\nfrom jax import jit")      # imported before the extension
    cell("%load_ext shapewatch")
    cell("@jit\\ndef step(x):\\n    return x + 1\\nscale = jax.jit(lambda x: x * 2)\\n"
         "for n in (1, 2, 3):\\n    step(jnp.ones(n)); scale(jnp.ones(n))")
    import jax
    import shapewatch
    out["watched"] = [shapewatch.is_watched(ip.user_ns[n]) for n in ("step", "scale")]
    with capture_output() as cap:
        cell("%shapewatch")
    out["shown"] = [sorted(o.data) for o in cap.outputs]
    out["html"] = cap.outputs[0].data["text/html"]
    out["text"] = cap.outputs[0].data["text/plain"]
    result = cell("import shapewatch\\nshapewatch.report()")            # the last line of a cell
    out["cell_html"] = ip.display_formatter.format(result.result)[0]["text/html"][:40]
    with capture_output() as cap:
        cell("%shapewatch save " + sys.argv[1])
        cell("%shapewatch reset")
        cell("%shapewatch nonsense")
    out["said"] = cap.stdout
    out["after_reset"] = len(shapewatch.report().functions)
    cell("%unload_ext shapewatch")
    out["unloaded"] = [ip.user_ns["jit"] is jax.jit, shapewatch.is_watched(jax.jit(lambda x: x))]
    print("RESULT " + json.dumps(out))
''')


@pytest.mark.slow
def test_load_ext_watches_every_jit_and_the_magic_shows_and_resets_the_report(tmp_path):
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    saved = tmp_path / "saved.html"
    env = {**os.environ, "PYTHONPATH": ROOT, "SHAPEWATCH_REPORT": "off"}
    proc = subprocess.run([sys.executable, str(script), str(saved)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert out["watched"] == [True, True]
    assert out["shown"] == [["text/html", "text/plain"]]
    assert out["html"].startswith('<div class="swr"') and out["html"].count('class="fn-row"') == 2
    assert out["text"].count("3 compiles, 3 signatures") == 2 and "x.shape[0]: 2 -> 3" in out["text"]
    assert out["cell_html"].startswith('<div class="swr" id="sw-')
    assert out["said"].splitlines() == [f"[shapewatch] HTML report written to {saved}",
                                        "[shapewatch] records cleared.",
                                        "[shapewatch] usage: %shapewatch (draw the report) | %shapewatch text | "
                                        "%shapewatch save PATH.html | %shapewatch reset"]
    assert saved.read_text().startswith("<!DOCTYPE html>")
    assert out["after_reset"] == 0
    assert out["unloaded"] == [True, False]
