"""The HTML report, built from real records and read as text (no browser here; see test_html_browser)."""

import html
import json
import os
import re
import subprocess
import sys

import jax.numpy as jnp
import pytest
from _html_storm import HOSTILE, HOSTILE_TEXT, LENGTHS, misses_of, record_storm, with_hostile_text

import shapewatch
from shapewatch._integrations.cli import main as cli_main
from shapewatch._reports.html import report_view, to_html
from shapewatch._reports.merge import merge_dicts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def marks(page):
    """The timeline's marks of compiles (the legend's swatch is not one)."""
    return len(re.findall(r'class="mark kind-compile" data-hover', page))


@pytest.fixture
def storm():
    return record_storm()


def test_the_page_is_one_self_contained_document(storm):
    page = to_html(storm)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # Nothing to fetch: no addresses, no external resources, and a policy that forbids any.
    assert "http" not in page.replace('http-equiv="Content-Security-Policy"', "")
    assert not re.search(r"\b(src|href)=|@import|url\(|@font-face", page)
    assert "default-src 'none'" in page
    assert page.count("<script>") == 1


def test_the_pictures_have_a_bar_per_function_a_mark_per_miss_and_the_proposed_boundaries(storm):
    page = to_html(storm)
    assert page.count('class="fn-row"') == len(storm["functions"]) == 3
    assert page.count('class="seg seg-') == 3 * len(storm["functions"])
    assert marks(page) == misses_of(storm)
    axis = next(c for f in storm["functions"] for c in f["causes"] if c["kind"] == "axis")
    # functions are ranked by measured compile seconds: take train_step by name, not by rank
    step = next(f for f in report_view(storm)["functions"] if f["function"] == "train_step")
    boundaries = step["causes"][0]["boundaries"]
    assert boundaries and boundaries[-1] >= max(LENGTHS)
    assert f"pad to the buckets {boundaries}" in axis["fix"]
    card = page[page.index('<div class="cause" data-kind="axis">'):]
    card = card[:card.index("</svg>")]
    assert card.count('class="boundary"') == len(boundaries)
    counted = sum(int(n) for n in re.findall(r'class="hbar" data-hover="1" data-count="(\d+)"', card))
    assert counted == sum(axis["counts"]) == len(set(LENGTHS))
    every_axis = [c for f in report_view(storm)["functions"] for c in f["causes"] if c["kind"] == "axis"]
    assert page.count('class="boundary"') == sum(len(c["boundaries"]) for c in every_axis)


def test_every_section_the_issue_asks_for_is_there(storm):
    page = to_html(storm)
    for section in ("functions", "timeline", "causes", "misses", "unwatched", "environment"):
        assert f'<section id="{section}">' in page
    assert html.escape(storm["summary"].removeprefix("[shapewatch] ")) in page
    assert "pass it as a traced argument" in page  # the static cause's fix, in words
    table = page[page.index('id="miss-table"'):]
    assert table[:table.index("</table>")].count("<tr>") == 1 + misses_of(storm)


def test_html_in_names_explanations_and_paths_is_shown_as_text_never_as_markup(storm):
    page = to_html(with_hostile_text(storm))
    fragment = to_html(storm, fragment=True)
    for text in (page, fragment):
        assert HOSTILE not in text and HOSTILE_TEXT not in text
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text
        assert "&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt;" in text
        assert text.count("<script>") == 1 and "<img" not in text


@pytest.mark.slow
def test_a_report_of_100_misses_is_well_under_a_megabyte():
    f = shapewatch.watched_jit(lambda batch: batch["tokens"].sum())
    for n in range(1, 101):
        f({"tokens": jnp.ones((2, n))})
    data = shapewatch.report().to_dict()
    assert misses_of(data) == 100
    size = len(to_html(data).encode())
    assert size < 1_000_000, size
    assert size < 250_000, size  # about 90 KB: far from the bound


def test_a_report_with_no_misses_says_so_instead_of_drawing_empty_pictures():
    page = shapewatch.report().to_html()
    assert page.count("No misses recorded.") == 2 and "No watched function compiled." in page


def test_merged_reports_put_divergences_first_with_a_column_per_process(storm):
    other = json.loads(json.dumps(storm))
    other["environment"]["process_index"] = 1
    step = next(f for f in other["functions"] if f["function"].endswith("train_step"))
    for a in step["misses"][-1]["signature"]["arrays"]:
        if a["path"] == "batch['tokens']":
            a["shape"][1] += 1
    page = to_html(merge_dicts([("r0.json", storm), ("r1.json", other)]))
    assert page.index('id="divergences"') < page.index('id="per-process"') < page.index('id="processes"')
    assert page.count('class="differs"') == 0  # both compiled train_step 11 times
    assert "<th class=num data-type=num>p0</th><th class=num data-type=num>p1</th>" in page
    assert page.count("<tr>", page.index('id="divergence-table"'), page.index('id="per-process"')) == 3


def test_report_to_html_writes_the_page_and_show_html_writes_it_from_a_saved_report(storm, tmp_path, capsys):
    shapewatch.report().to_json(tmp_path / "r.json")
    shapewatch.report().to_html(tmp_path / "direct.html")
    assert cli_main(["show", str(tmp_path / "r.json"), "--html", str(tmp_path / "shown.html")]) == 0
    assert capsys.readouterr().out == f"[shapewatch] HTML report written to {tmp_path / 'shown.html'}\n"
    shown = (tmp_path / "shown.html").read_text()
    assert marks(shown) == misses_of(storm)
    assert shown.count('class="fn-row"') == (tmp_path / "direct.html").read_text().count('class="fn-row"')


def test_show_html_merges_several_reports_and_reads_a_saved_merged_one(storm, tmp_path, capsys):
    for i in (0, 1):
        data = json.loads(json.dumps(storm))
        data["environment"]["process_index"] = i
        (tmp_path / f"r{i}.json").write_text(json.dumps(data))
    paths = [str(tmp_path / "r0.json"), str(tmp_path / "r1.json")]
    assert cli_main(["show", *paths, "--html", str(tmp_path / "m.html")]) == 0
    assert cli_main(["merge", *paths, "--json", str(tmp_path / "m.json")]) == 0
    assert cli_main(["show", str(tmp_path / "m.json"), "--html", str(tmp_path / "m2.html")]) == 0
    assert cli_main(["show", str(tmp_path / "m.json")]) == 0
    assert "no divergence: all 2 processes" in capsys.readouterr().out
    for name in ("m.html", "m2.html"):
        assert "no divergence: all 2 processes compiled the same signatures" in (tmp_path / name).read_text()


def test_show_html_into_a_missing_folder_is_one_line_and_status_2(storm, tmp_path, capsys):
    shapewatch.report().to_json(tmp_path / "r.json")
    assert cli_main(["show", str(tmp_path / "r.json"), "--html", str(tmp_path / "no" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("[shapewatch] --html ") and "cannot be written" in err and err.count("\n") == 1


PROGRAM = "import jax, jax.numpy as jnp\nf = jax.jit(lambda x: x + 1)\nf(jnp.ones(1)); f(jnp.ones(2))\n"


@pytest.mark.slow
def test_shapewatch_html_and_run_html_write_the_page_at_exit(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM.replace("jax.jit", "shapewatch.watched_jit").replace("import jax,", "import shapewatch,"))
    env = {**os.environ, "PYTHONPATH": ROOT, "SHAPEWATCH_HTML": str(tmp_path / "env-{process}.html"),
           "SHAPEWATCH_REPORT": "off"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert marks((tmp_path / "env-0.html").read_text()) == 2
    script.write_text(PROGRAM)
    env.pop("SHAPEWATCH_HTML")
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "run", "--html", str(tmp_path / "run.html"),
                           str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert (proc.returncode, proc.stderr) == (0, "")
    page = (tmp_path / "run.html").read_text()
    assert marks(page) == 2 and "x.shape[0]: 1 -&gt; 2" in page
