"""`shapewatch buckets LENGTHS_FILE`: strategies side by side, a histogram, clean errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shapewatch.buckets._cli import main

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = [3, 5, 8, 9, 30, 31, 31, 12]


@pytest.fixture
def lengths_file(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("\n".join(map(str, LENGTHS)) + "\n")
    return path


def test_prints_boundaries_a_strategy_table_and_a_histogram(lengths_file, capsys):
    assert main([str(lengths_file), "--max-buckets", "3"]) == 0
    out = capsys.readouterr().out
    assert "8 lengths, 7 distinct, min 3, max 31, mean 16.1" in out
    assert (
        "optimal boundaries (3 buckets, max_buckets=3, multiple_of=1, linear cost):\n  5, 12, 31"
        in out
    )
    assert "| optimal | 3 | 7.2% |" in out
    for name in ("pow2", "quantile", "equal_volume", "multiple"):
        assert f"| {name} |" in out
    bars = [line for line in out.splitlines() if " | " in line and "#" in line]
    assert 3 <= len(bars) <= 20
    assert any(line.endswith("<- 31") for line in out.splitlines())


@pytest.mark.parametrize("suffix", [".npy", ".json"])
def test_reads_npy_and_json_files(tmp_path, capsys, suffix):
    path = tmp_path / f"lengths{suffix}"
    if suffix == ".npy":
        np.save(path, np.array(LENGTHS))
    else:
        path.write_text(json.dumps(LENGTHS))
    assert main([str(path), "--multiple-of", "8", "--cost", "quadratic"]) == 0
    assert "multiple_of=8, quadratic cost" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "args", "problem"),
    [
        ("3\n4\nabc\n", [], "line 3: 'abc' is not an integer length"),
        ("3\n-4\n", [], "lengths must be non-negative integers; got -4"),
        ("", [], "lengths are empty"),
        ("3\n40\n", ["--max-length", "16"], "length 40 is above max_length=16"),
    ],
)
def test_a_bad_file_prints_one_line_naming_it_and_returns_2(
    tmp_path, capsys, content, args, problem
):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    assert main([str(path), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"[shapewatch] {path}: {problem}")


def test_a_missing_file_and_bad_options_return_2(tmp_path, capsys):
    assert main([str(tmp_path / "nope.txt")]) == 2
    assert capsys.readouterr().err == f"[shapewatch] {tmp_path / 'nope.txt'}: no such file\n"
    assert main([str(tmp_path), "--cost", "cubic"]) == 2
    assert capsys.readouterr().err.startswith(
        "[shapewatch] buckets: argument --cost: invalid choice"
    )
    (tmp_path / "x.json").write_text('{"a": 1}')
    assert main([str(tmp_path / "x.json")]) == 2
    assert ("expected a JSON list of ints, a saved loader report() or a LengthObserver.to_dict(); "
            "got a dict with keys ['a']") in capsys.readouterr().err


def test_runs_in_a_subprocess(lengths_file):
    code = (
        "from shapewatch.buckets._cli import main; import sys; raise SystemExit(main(sys.argv[1:]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(
        [sys.executable, "-c", code, str(lengths_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "| optimal |" in ok.stdout and ok.stderr == ""
    bad = subprocess.run(
        [sys.executable, "-c", code, str(lengths_file) + ".missing"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("[shapewatch] ") and "no such file" in bad.stderr


def test_bad_option_values_blame_the_option_not_the_file(lengths_file, capsys):
    assert main([str(lengths_file), "--max-buckets", "0"]) == 2
    assert capsys.readouterr().err == (
        "[shapewatch] buckets: max_buckets must be an integer >= 1; got 0 "
        "(see shapewatch buckets --help)\n"
    )
    assert main([str(lengths_file), "--multiple-of", "8", "--max-length", "30"]) == 2
    assert "max_length=30 is not a multiple of multiple_of=8" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("big.txt", b"3\n99999999999999999999\n", "line 2: 99999999999999999999 is above the "
         "largest length accepted, 2**40 = 1,099,511,627,776"),
        ("big2.txt", b"3\n2199023255552\n", "lengths must be at most 2**40"),
        ("empty.npy", b"", "the file is empty, expected a .npy array of lengths"),
    ],
)
def test_overflowing_lengths_and_an_empty_npy_print_one_line_and_return_2(
    tmp_path, capsys, name, content, problem
):
    path = tmp_path / name
    path.write_bytes(content)
    assert main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"[shapewatch] {path}: {problem}")


def test_a_file_of_only_zeros_prints_a_plan_and_a_histogram(tmp_path, capsys):
    path = tmp_path / "zeros.txt"
    path.write_text("0\n0\n0\n")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "3 lengths, 1 distinct, min 0, max 0" in out
    assert "optimal boundaries (1 bucket, max_buckets=8" in out
    assert out.rstrip().endswith("3  <- 1")


@pytest.mark.parametrize("suffix", [".txt", ".json"])
def test_a_utf8_byte_order_mark_is_accepted(tmp_path, capsys, suffix):
    path = tmp_path / f"bom{suffix}"
    body = json.dumps(LENGTHS) if suffix == ".json" else "\n".join(map(str, LENGTHS))
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert main([str(path)]) == 0
    assert "8 lengths, 7 distinct, min 3, max 31" in capsys.readouterr().out


def _saved_report(tmp_path: Path) -> Path:
    """A real loader report: group_by_length with auto planning, timed by a test clock."""
    from shapewatch.buckets import group_by_length

    t = [0.0]
    seen: set = set()
    rng = np.random.default_rng(0)
    data = [np.arange(int(n)) for n in np.clip(rng.lognormal(3.0, 1.0, 2000), 1, 300)]
    it = group_by_length(data, batch_size=16, clock=lambda: t[0])
    for b in it:
        t[0] += (0.5 if b.data.shape not in seen else 0.0) + 1e-4 * b.data.size
        seen.add(b.data.shape)
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(it.report()))
    return path


def test_a_saved_report_or_observer_is_read_and_auto_uses_its_measured_costs(tmp_path, capsys):
    from shapewatch.buckets import LengthObserver, propose

    report = _saved_report(tmp_path)
    assert main([str(report), "--max-buckets", "auto"]) == 0
    out = capsys.readouterr().out
    saved = json.loads(report.read_text())
    assert "auto: the plan a loader given this report as prior= starts on (measured: 0.5 s per compile" in out
    want = propose(saved, "auto").boundaries
    assert "  " + ", ".join(map(str, want)) + "\n" in out
    assert f"{LengthObserver.from_dict(saved['lengths']).total:,} lengths" in out
    observer = tmp_path / "observer.json"
    observer.write_text(json.dumps(saved["lengths"]))
    assert main([str(observer), "--max-buckets", "2"]) == 0
    assert "  " + ", ".join(map(str, propose(saved, 2).boundaries)) in capsys.readouterr().out


def test_auto_without_measured_costs_names_the_options_it_needs(tmp_path, capsys):
    lengths = tmp_path / "l.txt"
    lengths.write_text("3\n5\n40\n")
    assert main([str(lengths), "--max-buckets", "auto", "--steps", "100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"[shapewatch] {lengths}: --max-buckets auto needs the costs")
    assert err.endswith("a saved loader report that measured them, or --compile-seconds, --step-seconds\n")
    assert main([str(lengths), "--max-buckets", "auto", "--steps", "100", "--compile-seconds",
                 "1", "--step-seconds", "0.5"]) == 0
    assert main([str(lengths), "--max-buckets", "many"]) == 2
    assert "expected an int >= 1 or 'auto'; got 'many'" in capsys.readouterr().err


def test_a_json_file_nested_too_deeply_prints_one_line_and_returns_2(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert main([str(deep)]) == 2
    err = capsys.readouterr().err
    assert err == f"[shapewatch] {deep}: nested too deeply to read, expected a flat list of lengths\n"
