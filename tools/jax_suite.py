"""Runs JAX's own jit tests twice: as released, and with ``jax.jit`` replaced by ``watched_jit``.

``watched_jit`` is meant as a drop-in for ``jax.jit``; JAX's test files say best
whether it is one. This program takes the tests of the installed jax from a JAX
checkout (the tag ``jax-v<version>``), runs five files of them (``api_test.py``,
``pjit_test.py``, ``jax_jit_test.py``, ``checkify_test.py``,
``compilation_cache_test.py``) on 8 host devices once as released and once with
``jax.jit`` swapped for ``shapewatch.watched_jit`` before the tests import it,
and prints the tests that fail only with the swap. Known differences (each with
its reason, also in the README's compatibility section) are marked; any other
one makes the exit status 1.

Usage (from the repository root, with the interpreter of the jax to test)::

    python tools/jax_suite.py --jax-src path/to/jax [-n 2] [--ref REF] [--keep DIR]

``--jax-src`` defaults to ``$JAX_SRC``: a git clone of jax-ml/jax (a bare one
will do) with its tags, or a checkout whose ``tests/`` are the installed
version's (then used as they are). JAX's test files need ``absl-py`` and
``pytest-xdist``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILES = ("tests/api_test.py", "tests/pjit_test.py", "tests/jax_jit_test.py", "tests/checkify_test.py",
         "tests/compilation_cache_test.py")
#: What the tests need from the checkout besides the five files: JAX's pytest configuration
#: (``filterwarnings``, import mode) and root conftest, and the test helpers next to the files.
CHECKOUT_PATHS = ("tests", "conftest.py", "pyproject.toml")
SWAP_PLUGIN = '''\
"""Loaded with -p before the tests are collected: jax.jit is watched_jit from here on."""
import jax

import shapewatch

jax.jit = shapewatch.watched_jit
'''
#: Tests that fail only with the swap for a reason that cannot be removed, and that reason.
KNOWN = {
    "tests/api_test.py::APITest::test_eval_shape_trace_cache_share":
        "watched_jit traces a hook in place of the function; JAX's trace cache is keyed by the function "
        "object, so jax.eval_shape(f) (which traces f itself) is not reused by watched_jit(f)(x): 2 traces, 1 expected",
    "tests/api_test.py::TracebackTest::test_jit_traceback":
        "the hook that records a miss is one Python frame between JAX's trace and the function, while it is "
        "traced (never on a cached call): 7 frames, 6 expected",
}


def _jax_version() -> str:
    return importlib.metadata.version("jax")


def _git(src: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    git_dir = src / ".git" if (src / ".git").exists() else src
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, check=False)


def _is_git(src: Path) -> bool:
    return _git(src, "rev-parse", "--git-dir").returncode == 0


def _checkout_version(src: Path) -> str | None:
    text = (src / "jax" / "version.py").read_text() if (src / "jax" / "version.py").exists() else ""
    found = re.search(r'^_version\s*(?::\s*str\s*)?=\s*"([^"]+)"', text, re.M)
    return found.group(1) if found else None


def materialize(src: Path, ref: str | None, into: Path) -> str:
    """Puts the checkout's tests (at ``ref``, else the installed jax's tag) into ``into``; returns what was used."""
    version = _jax_version()
    if not _is_git(src):
        if ref is not None:
            sys.exit(f"[shapewatch] --ref {ref} needs a git clone, and {src} is not one: pass a clone, or no --ref.")
        found = _checkout_version(src)
        if found is not None and not version.startswith(found):
            print(f"[shapewatch] warning: {src} is jax {found}, the installed jax is {version}: "
                  "tests of another version may fail for reasons of their own (in both runs).")
        for path in CHECKOUT_PATHS:
            if (src / path).is_dir():
                shutil.copytree(src / path, into / path)
            elif (src / path).exists():
                shutil.copy2(src / path, into / path)
        return f"the checkout at {src} (jax {found or 'of unknown version'})"
    tag = f"jax-v{version}"
    if ref is None:
        if _git(src, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}").returncode != 0:
            near = _git(src, "tag", "--list", f"jax-v{'.'.join(version.split('.')[:2])}*").stdout.decode().split()
            sys.exit(f"[shapewatch] {src} has no tag {tag} (the tests of the installed jax {version}); tags of "
                     f"that minor version: {', '.join(near) or 'none'}. Fetch the tags (git fetch --tags) or "
                     "pass --ref with the commit whose tests match the installed jax.")
        ref = tag
    archive = _git(src, "archive", "--format=tar", ref, "--", *CHECKOUT_PATHS)
    if archive.returncode != 0:
        sys.exit(f"[shapewatch] git archive {ref} failed: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data") if sys.version_info >= (3, 12) else tar.extractall(into)
    commit = _git(src, "rev-parse", "--short", f"{ref}^{{commit}}").stdout.decode().strip()
    return f"{ref} ({commit})"


def run(work: Path, swapped: bool, jobs: int, extra: list[str]) -> tuple[dict[str, str], float]:
    """Runs the five files; returns each test's outcome (passed, failed, skipped) and the seconds taken."""
    name = "swapped" if swapped else "released"
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    paths = [str(REPO)] + ([str(work / "plugins")] if swapped else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    xml = work / f"{name}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={xml}", "-o",
           "junit_family=xunit1", *(["-n", str(jobs)] if jobs > 1 else []),
           *(["-p", "shapewatch_jax_swap"] if swapped else []), *extra, *FILES]
    start = time.monotonic()
    with open(work / f"{name}.log", "w") as log:
        subprocess.run(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - start
    if not xml.exists():
        sys.exit(f"[shapewatch] the {name} run wrote no results; its output is in {work / (name + '.log')}.")
    return outcomes(xml), seconds


def outcomes(xml: Path) -> dict[str, str]:
    """``{node id: passed | failed | skipped}`` from a JUnit XML file of pytest."""
    found: dict[str, str] = {}
    for case in ET.parse(xml).iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        file = case.get("file") or ""
        parts = classname.split(".")
        module = next((i for i in range(len(parts), 0, -1) if "/".join(parts[:i]).endswith("_test")), len(parts))
        path = file or "/".join(parts[:module]) + ".py"
        node = "::".join([path, *parts[module:], name])
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        if found.get(node) != "failed":  # a test whose teardown errs is listed twice
            found[node] = outcome
    return found


def tally(results: dict[str, str]) -> str:
    counts = {k: sum(v == k for v in results.values()) for k in ("passed", "failed", "skipped")}
    return ", ".join(f"{n:,} {k}" for k, n in counts.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jax-src", default=os.environ.get("JAX_SRC"), help="a JAX clone or checkout ($JAX_SRC)")
    parser.add_argument("--ref", help="the git commit or tag to take the tests from (default: jax-v<installed>)")
    parser.add_argument("-n", "--jobs", type=int, default=2, help="pytest-xdist workers (default 2)")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep the tests, logs and JUnit files")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: a run whose JUnit file is in DIR is not run again (after a change to "
                             "shapewatch, delete swapped.xml and rerun only the swapped run)")
    parser.add_argument("--only", choices=("released", "swapped"),
                        help="make only this run (with --keep, for a later --reuse: the two may run at once)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --), e.g. -k lower")
    args = parser.parse_args(argv)
    if (args.reuse or args.only) and not args.keep:
        parser.error("--reuse and --only need --keep DIR (where the runs' JUnit files are kept)")
    work = Path(args.keep).resolve() if args.keep else None
    if work is None or not (work / "tests").exists():  # the tests are to be taken from a checkout
        if not args.jax_src:
            parser.error("give a JAX checkout: --jax-src PATH or JAX_SRC=PATH (git clone https://github.com/jax-ml/jax)")
        src = Path(args.jax_src).expanduser().resolve()
        if not src.exists():
            parser.error(f"--jax-src {src} does not exist")
    work = work or Path(tempfile.mkdtemp(prefix="jax-suite-"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        if not (work / "tests").exists():
            (work / "SOURCE").write_text(materialize(src, args.ref, work))
        used = (work / "SOURCE").read_text() if (work / "SOURCE").exists() else f"{work / 'tests'}"
        (work / "plugins").mkdir(exist_ok=True)
        (work / "plugins" / "shapewatch_jax_swap.py").write_text(SWAP_PLUGIN)
        print(f"jax {_jax_version()} on Python {sys.version.split()[0]}; tests from {used}; "
              f"{len(FILES)} files, 8 host devices, {args.jobs} workers", flush=True)
        results = {}
        for name in ("released", "swapped"):
            if args.only not in (None, name):
                continue
            kept = work / f"{name}.xml"
            if args.reuse and kept.exists():
                results[name] = outcomes(kept)
                print(f"{name + ':':9} {tally(results[name])} (kept in {kept})", flush=True)
                continue
            results[name], seconds = run(work, name == "swapped", args.jobs, args.pytest_args)
            print(f"{name + ':':9} {tally(results[name])} ({seconds:.0f} s)", flush=True)
        if args.only:
            return 0
        released, swapped = results["released"], results["swapped"]
        only = sorted(n for n, o in swapped.items() if o == "failed" and released.get(n) != "failed")
        fixed = sorted(n for n, o in released.items() if o == "failed" and swapped.get(n) == "passed")
        unknown = [n for n in only if n not in KNOWN]
        print(f"fail only with the swap: {len(only)} ({len(only) - len(unknown)} known, {len(unknown)} new)")
        for node in only:
            print(f"  {node}" + (f"\n      known: {KNOWN[node]}" if node in KNOWN else ""))
        if fixed:
            print(f"pass only with the swap: {len(fixed)}")
            for node in fixed:
                print(f"  {node}")
        if args.keep:
            print(f"logs and JUnit files: {work}")
        return 1 if unknown else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
