"""When the HTML report's browser tests skip and when they fail (``tests/_browser.py``).

Each case runs ``tests/test_html_browser.py`` in a real pytest process whose PATH is one
folder: an executable named ``chromium`` (which these runs never start) with or without
one named ``chromedriver``, or neither. The outer run's own CI setting does not leak in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The exit statuses of a run whose only module is skipped whole: pytest says "no tests ran" (5)
#: where nothing else was collected; in the whole suite the skip is one of many and the run passes (0).
PASSED = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)


def _collect(tmp_path: Path, programs: tuple[str, ...], ci: str | None) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in programs:
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST_")}
    env["PATH"] = str(bin_dir)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "tests/test_html_browser.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_chromium_without_chromedriver_skips_with_the_install_command(tmp_path):
    proc = _collect(tmp_path, ("chromium",), ci=None)
    assert proc.returncode in PASSED, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout
    assert f"chromium is at {tmp_path / 'bin' / 'chromium'} but chromedriver is not" in proc.stdout
    assert "apt-get install chromium chromium-driver" in proc.stdout


@pytest.mark.slow
def test_no_chromium_skips_with_the_install_command(tmp_path):
    proc = _collect(tmp_path, (), ci="false")
    assert proc.returncode in PASSED, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout
    assert "no chromium on this machine (apt-get install chromium chromium-driver" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("programs", [("chromium",), ()], ids=["no chromedriver", "no chromium"])
def test_a_missing_browser_fails_under_ci(tmp_path, programs):
    proc = _collect(tmp_path, programs, ci="true")
    assert proc.returncode not in PASSED, proc.stdout + proc.stderr
    assert "1 error" in proc.stdout
    assert "under CI=true the browser tests must run" in proc.stdout
    assert "apt-get install chromium chromium-driver" in proc.stdout
