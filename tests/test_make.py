"""`make demo` and `make test`: which Python and environment they take (run as `make -n`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _checkout(tmp_path: Path) -> Path:
    """The files make reads, copied into a fresh directory."""
    tmp_path.mkdir(exist_ok=True)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ("tools", "requirements"):
        shutil.copytree(ROOT / name, tmp_path / name)
    return tmp_path


def _make(where: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(where)}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=where, env=env,
                          capture_output=True, text=True, timeout=120)


def _version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def test_make_says_when_the_named_python_does_not_run_as_a_python(tmp_path):
    where = _checkout(tmp_path)
    out = _make(where, "demo", "PYTHON=" + shutil.which("true"))
    assert out.returncode == 2
    assert out.stderr.startswith(f"shapewatch: PYTHON={shutil.which('true')} does not run as a Python")
    assert "is Python ," not in out.stderr


@pytest.mark.skipif(not (ROOT / "requirements" / f"py{_version()}.txt").exists(),
                    reason="no pinned environment for this Python")
def test_make_sets_up_again_an_environment_whose_python_is_gone(tmp_path):
    where = _checkout(tmp_path)
    venv = where / f".venv-py{_version()}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / ".installed").touch()
    assert "-m venv" not in _make(where, "-n", "demo", "PYTHON=" + sys.executable).stdout
    (venv / "bin" / "python").unlink()
    (venv / "bin" / "python").symlink_to(tmp_path / "uninstalled" / "python3")
    out = _make(where, "-n", "demo", "PYTHON=" + sys.executable)
    assert f'"{sys.executable}" -m venv --clear {venv.name}' in out.stdout


def _without_python(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has make and no Python, and whose HOME has no pyenv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").symlink_to(shutil.which("make"))
    return {"PATH": str(bin_dir), "HOME": str(tmp_path)}


def test_make_test_compat_skips_each_point_whose_python_is_missing_and_says_how_to_get_it(tmp_path):
    where = _checkout(tmp_path / "checkout")
    out = subprocess.run(["make", "--no-print-directory", "test-compat"], cwd=where, env=_without_python(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    notes = out.stderr.splitlines()
    assert [note.split(" (")[0] for note in notes] == [
        "shapewatch: skipped the newest point", "shapewatch: skipped the main point",
        "shapewatch: skipped the oldest point"]
    assert all("pyenv install 3." in note for note in notes)


def test_make_test_compat_fails_under_ci_when_a_python_is_missing(tmp_path):
    where = _checkout(tmp_path / "checkout")
    env = {**_without_python(tmp_path), "CI": "true"}
    out = subprocess.run(["make", "--no-print-directory", "test-compat"], cwd=where, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "CI has every Python, so this fails" in out.stderr


def test_make_finds_a_python_when_its_scripts_lost_their_executable_bit(tmp_path):
    where = _checkout(tmp_path / "checkout")
    (where / "tools" / "pick_python.sh").chmod(0o644)  # as some archive tools unpack it
    env = _without_python(tmp_path)
    (Path(env["PATH"]) / f"python{_version()}").symlink_to(sys.executable)
    out = subprocess.run(["make", "--no-print-directory", "-n", "demo"], cwd=where, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"-m venv --clear .venv-py{_version()}" in out.stdout
