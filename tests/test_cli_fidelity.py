"""``shapewatch run`` gives a program what plain ``python`` gives it: each probe runs both ways."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = textwrap.dedent('''
    import os, sys, warnings
    g = globals()
    print("__file__", __file__)
    print("argv", sys.argv)
    print("path", sys.path)
    print("__name__", __name__, "is sys.modules['__main__']:", sys.modules["__main__"].__dict__ is g)
    print("__spec__", None if __spec__ is None else (__spec__.name, __spec__.origin))
    print("__package__", repr(__package__), "__cached__", g.get("__cached__", "<unset>"))
    print("__loader__", type(g.get("__loader__")).__name__, getattr(g.get("__loader__"), "path", None))
    print("names", sorted(k for k in g if k.startswith("__")))
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print("next to me:", open(os.path.join(os.path.dirname(__file__), "data.txt")).read())
    warnings.warn("a warning from the program")
    import annotated_check
    annotated_check.check()
''')

ANNOTATED = "def check():\n    print('future annotations leaked:', check.__code__.co_flags & 0x1000000 != 0)\n"


def both(args, cwd, module=False):
    """(plain python, shapewatch run) on the same arguments: returncode, stdout, stderr."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("SHAPEWATCH_REPORT", None)
    plain = [sys.executable, *(["-m"] if module else []), *args]
    watched = [sys.executable, "-m", "shapewatch", "run", *(["-m"] if module else []), *args]
    return [(p.returncode, p.stdout, p.stderr) for p in (
        subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
        for cmd in (plain, watched))]


@pytest.fixture
def project(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "probe.py").write_text(PROBE)
    (tmp_path / "sub" / "data.txt").write_text("found")
    (tmp_path / "sub" / "annotated_check.py").write_text(ANNOTATED)
    return tmp_path


def test_a_script_sees_the_same_file_argv_path_and_main_as_under_plain_python(project):
    plain, watched = both(["sub/probe.py", "a", "--b"], cwd=project)
    assert plain[0] == 0, plain[2]
    assert f"__file__ {project / 'sub' / 'probe.py'}" in plain[1]
    assert "next to me: found" in plain[1]
    assert watched == plain


def test_a_module_sees_the_same_file_argv_path_and_main_as_under_plain_python_m(project):
    plain, watched = both(["probe", "a", "--b"], cwd=project / "sub", module=True)
    assert plain[0] == 0, plain[2]
    assert "__spec__ ('probe'," in plain[1]
    assert watched == plain


def test_a_package_runs_its_main_module_as_under_plain_python_m(project):
    pkg = project / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nprint(__name__, __package__, __spec__.name, sys.argv[1:])\n")
    plain, watched = both(["pkg", "x"], cwd=project, module=True)
    assert plain == (0, "__main__ pkg pkg.__main__ ['x']\n", "")
    assert watched == plain


CRASH = textwrap.dedent('''
    import sys

    def inner(kind):
        if kind == "chained":
            try:
                {}["key"]
            except KeyError as e:
                raise ValueError("while looking up") from e
        if kind == "interrupt":
            raise KeyboardInterrupt
        if kind == "message":
            sys.exit("stopped: bad input")
        if kind == "status":
            sys.exit(4)
        raise RuntimeError("crash in " + kind)

    inner(sys.argv[1])
''')


@pytest.mark.parametrize("kind", ["plain", "chained", "message", "status", "interrupt"])
def test_uncaught_exceptions_and_exit_statuses_are_those_of_plain_python(tmp_path, kind):
    (tmp_path / "crash.py").write_text(CRASH)
    plain, watched = both(["crash.py", kind], cwd=tmp_path)
    expected = {"plain": 1, "chained": 1, "message": 1, "status": 4, "interrupt": -signal.SIGINT}[kind]
    assert plain[0] == expected
    assert watched == plain
    if kind in ("plain", "chained", "interrupt"):
        assert watched[2].startswith("Traceback (most recent call last):\n") and "shapewatch" not in watched[2]


def test_a_syntax_error_is_reported_as_plain_python_reports_it(tmp_path):
    (tmp_path / "broken.py").write_text("x = (1,\n")
    plain, watched = both(["broken.py"], cwd=tmp_path)
    assert plain[0] == 1 and "SyntaxError" in plain[2]
    assert watched == plain
