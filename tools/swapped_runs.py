"""A library's own tests run twice, as released and with ``jax.jit`` swapped for ``watched_jit``.

What ``jax_suite.py`` (JAX's tests) and ``flax_nnx_suite.py`` (Flax NNX's) share:
taking test files from a git clone at a tag or commit, the two pytest runs (the
swapped one loads a plugin that sets ``jax.jit = shapewatch.watched_jit`` before
the tests import anything), their JUnit results, and the report of the tests
that fail only with the swap, file by file. A :class:`Suite` says what differs:
which files, which checkout paths, how many host devices, the known differences.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SWAP_PLUGIN = '''\
"""Loaded with -p before the tests are collected: jax.jit is watched_jit from here on."""
import jax

import shapewatch

jax.jit = shapewatch.watched_jit
'''


@dataclasses.dataclass
class Suite:
    """One library's test run.

    Attributes:
      name: the library, in messages (``JAX``, ``Flax NNX``).
      files: the test files, relative to the checkout (those it lacks are left out, and named); or
        empty, and ``find`` lists them in the tests taken (Flax's: those that use jit).
      checkout_paths: what the tests need from the checkout (the files' folder, pytest's configuration).
      devices: host devices (``--xla_force_host_platform_device_count``).
      known: tests that fail only with the swap for a reason that cannot be removed, and that reason.
      default_ref: the tag or commit of the installed version in a clone (exits with advice if none).
      clone: where the library's git repository is, for the message that asks for a clone.
    """

    name: str
    files: tuple[str, ...]
    checkout_paths: tuple[str, ...]
    devices: int
    known: dict[str, str]
    default_ref: Callable[[Path], str]
    clone: str
    find: Callable[[Path], tuple[str, ...]] | None = None


def git(src: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    git_dir = src / ".git" if (src / ".git").exists() else src
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, check=False)


def is_git(src: Path) -> bool:
    return git(src, "rev-parse", "--git-dir").returncode == 0


def extract(src: Path, ref: str, paths: tuple[str, ...], into: Path) -> str:
    """Puts ``paths`` of the clone at ``ref`` into ``into``; returns ``ref (short commit)``."""
    archive = git(src, "archive", "--format=tar", ref, "--", *paths)
    if archive.returncode != 0:
        sys.exit(f"[shapewatch] git archive {ref} failed: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data") if sys.version_info >= (3, 12) else tar.extractall(into)
    commit = git(src, "rev-parse", "--short", f"{ref}^{{commit}}").stdout.decode().strip()
    return f"{ref} ({commit})"


def copy_checkout(src: Path, paths: tuple[str, ...], into: Path) -> None:
    for path in paths:
        if (src / path).is_dir():
            shutil.copytree(src / path, into / path)
        elif (src / path).exists():
            shutil.copy2(src / path, into / path)


def run(suite: Suite, work: Path, files: list[str], swapped: bool, jobs: int,
        extra: list[str]) -> tuple[dict[str, str], float]:
    """Runs the files; returns each test's outcome (passed, failed, skipped) and the seconds taken."""
    name = "swapped" if swapped else "released"
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={suite.devices}").strip()
    paths = [str(REPO)] + ([str(work / "plugins")] if swapped else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    xml = work / f"{name}.xml"
    # A file that cannot be imported at this ref (tests of internals that the installed version renamed)
    # is one failure in both runs, and the other files still run.
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={xml}", "-o",
           "junit_family=xunit1", "--continue-on-collection-errors", *(["-n", str(jobs)] if jobs > 1 else []),
           *(["-p", "shapewatch_jax_swap"] if swapped else []), *extra, *files]
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


def file_of(node: str) -> str:
    return node.split("::", 1)[0]


def chosen_files(listed: tuple[str, ...], names: list[str] | None) -> list[str]:
    """The files to run: all those listed, or those named (``aot_test.py`` or ``tests/aot_test.py``)."""
    if not names:
        return list(listed)
    names_of = [Path(f).name for f in listed]
    by_name = {f: f for f in listed} | {n: f for n, f in zip(names_of, listed) if names_of.count(n) == 1}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        sys.exit(f"[shapewatch] --files {' '.join(unknown)}: not among this program's files; use some of "
                 f"{', '.join(listed)}.")
    return [by_name[n] for n in names]


def report(suite: Suite, files: list[str], released: dict[str, str], swapped: dict[str, str]) -> list[str]:
    """Prints, per file, both runs' tallies and the tests that fail only with the swap; returns the new ones."""
    only = sorted(n for n, o in swapped.items() if o == "failed" and released.get(n) != "failed")
    fixed = sorted(n for n, o in released.items() if o == "failed" and swapped.get(n) == "passed")
    unknown = [n for n in only if n not in suite.known]
    print(f"fail only with the swap: {len(only)} ({len(only) - len(unknown)} known, {len(unknown)} new)")
    for file in files:
        mine = [n for n in only if file_of(n) == file]
        print(f"  {file}: {len(mine)} (released: {tally({n: o for n, o in released.items() if file_of(n) == file})}; "
              f"swapped: {tally({n: o for n, o in swapped.items() if file_of(n) == file})})")
        for node in mine:
            print(f"    {node}" + (f"\n        known: {suite.known[node]}" if node in suite.known else ""))
    if fixed:
        print(f"pass only with the swap: {len(fixed)}")
        for node in fixed:
            print(f"  {node}")
    return unknown


def parser(suite: Suite, description: str, src_flag: str, src_help: str) -> argparse.ArgumentParser:
    """The options both programs take; ``src_flag`` (``--jax-src``) names the checkout, as ``args.src``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(src_flag, dest="src", default=os.environ.get(src_flag[2:].upper().replace("-", "_")),
                   help=src_help)
    p.set_defaults(src_flag=src_flag)
    p.add_argument("--ref", help="the git tag or commit to take the tests from (default: the installed version's)")
    p.add_argument("-n", "--jobs", type=int, default=2, help="pytest-xdist workers (default 2; 1: no xdist)")
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep the tests, logs and JUnit files")
    p.add_argument("--reuse", action="store_true",
                   help="with --keep: a run whose JUnit file is in DIR is not run again (after a change to "
                        "shapewatch, delete swapped.xml and rerun only the swapped run)")
    p.add_argument("--only", choices=("released", "swapped"),
                   help="make only this run (with --keep, for a later --reuse: the two may run at once)")
    p.add_argument("--files", nargs="+", metavar="FILE",
                   help=f"run only these of the files (default: all {len(suite.files) or 'found'})")
    p.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --), e.g. -k lower")
    return p


def main(suite: Suite, args: argparse.Namespace, about: str) -> int:
    """Takes the tests, makes the two runs and prints the report; 1 if a test fails only with the swap, unknown."""
    if (args.reuse or args.only) and not args.keep:
        sys.exit("[shapewatch] --reuse and --only need --keep DIR (where the runs' JUnit files are kept)")
    work = Path(args.keep).resolve() if args.keep else None
    src = None
    if work is None or not (work / suite.checkout_paths[0]).exists():  # the tests are to be taken from a checkout
        if not args.src:
            sys.exit(f"[shapewatch] give a {suite.name} checkout (a git clone with its tags, a bare one will do, or "
                     f"a source tree of the installed version): {args.src_flag} PATH (git clone {suite.clone})")
        src = Path(args.src).expanduser().resolve()
        if not src.exists():
            sys.exit(f"[shapewatch] {src} does not exist")
    work = work or Path(tempfile.mkdtemp(prefix="swapped-runs-"))
    try:
        work.mkdir(parents=True, exist_ok=True)
        if src is not None:
            if is_git(src):
                used = extract(src, args.ref or suite.default_ref(src), suite.checkout_paths, work)
            elif args.ref is not None:
                sys.exit(f"[shapewatch] --ref {args.ref} needs a git clone, and {src} is not one: pass a clone, "
                         "or no --ref.")
            else:
                copy_checkout(src, suite.checkout_paths, work)
                used = f"the checkout at {src}"
            (work / "SOURCE").write_text(used)
        used = (work / "SOURCE").read_text() if (work / "SOURCE").exists() else str(work)
        (work / "plugins").mkdir(exist_ok=True)
        (work / "plugins" / "shapewatch_jax_swap.py").write_text(SWAP_PLUGIN)
        listed = suite.files if suite.find is None else suite.find(work)
        files = chosen_files(listed, args.files)
        absent = [f for f in files if not (work / f).exists()]
        files = [f for f in files if f not in absent]
        print(f"{about} on Python {sys.version.split()[0]}; tests from {used}; {len(files)} files, "
              f"{suite.devices} host devices, {args.jobs} workers", flush=True)
        if absent:
            print(f"not in these tests, left out: {', '.join(absent)}", flush=True)
        if not files:
            sys.exit("[shapewatch] none of the files to run is in these tests: pass a checkout or --ref that has them.")
        results = {}
        for name in ("released", "swapped"):
            if args.only not in (None, name):
                continue
            kept = work / f"{name}.xml"
            if args.reuse and kept.exists():
                results[name] = outcomes(kept)
                print(f"{name + ':':9} {tally(results[name])} (kept in {kept})", flush=True)
                continue
            results[name], seconds = run(suite, work, files, name == "swapped", args.jobs, args.pytest_args)
            print(f"{name + ':':9} {tally(results[name])} ({seconds:.0f} s)", flush=True)
        if args.only:
            return 0
        unknown = report(suite, files, results["released"], results["swapped"])
        if args.keep:
            print(f"logs and JUnit files: {work}")
        return 1 if unknown else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
