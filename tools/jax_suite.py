"""Runs JAX's own jit tests twice: as released, and with ``jax.jit`` replaced by ``watched_jit``.

``watched_jit`` is meant as a drop-in for ``jax.jit``; JAX's test files say best
whether it is one. This program takes the tests of the installed jax from a JAX
checkout (the tag ``jax-v<version>``), runs fourteen files of them on 8 host
devices once as released and once with ``jax.jit`` swapped for
``shapewatch.watched_jit`` before the tests import it, and prints, file by file,
the tests that fail only with the swap. The files: jit itself (``api_test.py``,
``pjit_test.py``, ``jax_jit_test.py``, ``checkify_test.py``,
``compilation_cache_test.py``) and the features that jit carries (mutable array
refs: ``mutable_array_test.py``, ``stateful_rng_test.py``; hijax types:
``hijax_test.py``; ahead-of-time and export: ``aot_test.py``, ``export_test.py``;
``debug_info_test.py``, ``memories_test.py``, ``layout_test.py``,
``cache_key_test.py``); a file that the checkout lacks is named and left out.
Known differences (each with its reason, also in docs/compatibility.md) are
marked; any other one makes the exit status 1.

Usage (from the repository root, with the interpreter of the jax to test)::

    python tools/jax_suite.py --jax-src path/to/jax [-n 2] [--ref REF] [--keep DIR] [--files aot_test.py ...]

``--jax-src`` defaults to ``$JAX_SRC``: a git clone of jax-ml/jax (a bare one
will do) with its tags, or a checkout whose ``tests/`` are the installed
version's (then used as they are). A jax newer than the clone's newest tag (jax
0.12 against a clone whose newest tag is jax-v0.11.0) takes ``--ref`` with the
newest tag or commit whose tests it passes as released. JAX's test files need
``absl-py`` (and ``pytest-xdist`` for ``-n`` above 1).
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import swapped_runs

FILES = ("tests/api_test.py", "tests/pjit_test.py", "tests/jax_jit_test.py", "tests/checkify_test.py",
         "tests/compilation_cache_test.py",
         "tests/mutable_array_test.py", "tests/hijax_test.py", "tests/aot_test.py", "tests/export_test.py",
         "tests/debug_info_test.py", "tests/memories_test.py", "tests/layout_test.py", "tests/cache_key_test.py",
         "tests/stateful_rng_test.py")
#: What the tests need from the checkout besides the files: JAX's pytest configuration
#: (``filterwarnings``, import mode) and root conftest, and the test helpers next to the files.
CHECKOUT_PATHS = ("tests", "conftest.py", "pyproject.toml")
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


def _checkout_version(src: Path) -> str | None:
    text = (src / "jax" / "version.py").read_text() if (src / "jax" / "version.py").exists() else ""
    found = re.search(r'^_version\s*(?::\s*str\s*)?=\s*"([^"]+)"', text, re.M)
    return found.group(1) if found else None


def installed_tag(src: Path) -> str:
    """``jax-v<installed version>``, if the clone has it; else exits naming the tags it has."""
    version = _jax_version()
    tag = f"jax-v{version}"
    if swapped_runs.git(src, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}").returncode == 0:
        return tag
    tags = swapped_runs.git(src, "tag", "--list", "jax-v*", "--sort=-v:refname").stdout.decode().split()
    minor = f"jax-v{'.'.join(version.split('.')[:2])}"
    near = [t for t in tags if t == minor or t.startswith(minor + ".")]
    sys.exit(f"[shapewatch] {src} has no tag {tag} (the tests of the installed jax {version}); tags of "
             f"that minor version: {', '.join(near) or 'none'}; its newest: {', '.join(tags[:3]) or 'none'}. "
             "Fetch the tags (git fetch --tags) or pass --ref with the tag or commit whose tests the "
             "installed jax passes as released (a jax newer than the clone: its newest tag, or HEAD).")


def outcomes(xml: Path) -> dict[str, str]:
    """``{node id: passed | failed | skipped}`` from a JUnit XML file, each test named by its test file.

    pytest's ``file`` attribute is where the test function is defined, and for a test that JAX's
    ``jtu`` decorators wrap (``pjit_test.py``'s parameterized tests among them) that is
    ``jax/_src/test_util.py`` of the installed jax; the file is taken from the class name instead
    (``tests.pjit_test.PJitTest``: every file here is ``tests/*_test.py``).
    """
    found: dict[str, str] = {}
    for case in ET.parse(xml).iter("testcase"):
        parts = case.get("classname", "").split(".")
        module = next((i for i in range(len(parts), 0, -1) if parts[i - 1].endswith("_test")), None)
        if module is None:
            path, rest = case.get("file") or "/".join(parts) + ".py", []
        else:
            path, rest = "/".join(parts[:module]) + ".py", parts[module:]
        node = "::".join([path, *rest, case.get("name", "")])
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        if found.get(node) != "failed":  # a test whose teardown errs is listed twice
            found[node] = outcome
    return found


swapped_runs.outcomes = outcomes  # what swapped_runs.main reads the JUnit files with

SUITE = swapped_runs.Suite(name="JAX", files=FILES, checkout_paths=CHECKOUT_PATHS, devices=8, known=KNOWN,
                           default_ref=installed_tag, clone="https://github.com/jax-ml/jax")


def main(argv: list[str] | None = None) -> int:
    parser = swapped_runs.parser(SUITE, __doc__.split("\n\n")[0], "--jax-src", "a JAX clone or checkout ($JAX_SRC)")
    args = parser.parse_args(argv)
    src = Path(args.src).expanduser().resolve() if args.src else None
    if src is not None and src.exists() and not swapped_runs.is_git(src):
        found = _checkout_version(src)
        if found is not None and not _jax_version().startswith(found):
            print(f"[shapewatch] warning: {src} is jax {found}, the installed jax is {_jax_version()}: "
                  "tests of another version may fail for reasons of their own (in both runs).")
    return swapped_runs.main(SUITE, args, f"jax {_jax_version()}")


if __name__ == "__main__":
    sys.exit(main())
