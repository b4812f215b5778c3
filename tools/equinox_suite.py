"""Runs Equinox's own tests twice: as released, and with ``jax.jit`` replaced by ``watched_jit``.

``eqx.filter_jit`` builds its jitted functions with ``jax.jit``: with it swapped
for ``shapewatch.watched_jit`` before the tests import anything, every filtered
jit in the tests is watched. This program takes ``tests`` of the installed
equinox from an Equinox clone (the tag ``v<version>``), runs every
``tests/test_*.py`` there once as released and once swapped, and prints, file by
file, the tests that fail only with the swap (exit 1 if any).

Usage (from the repository root, with the interpreter whose equinox and jax to test)::

    python tools/equinox_suite.py --equinox-src path/to/equinox [-n 2] [--ref REF] [--keep DIR] [--files test_jit.py ...]

``--equinox-src`` defaults to ``$EQUINOX_SRC``: a git clone of
patrick-kidger/equinox (a bare one will do), or a checkout whose ``tests`` are the
installed version's. Equinox's pytest configuration runs jaxtyping's checks with
beartype; without beartype installed, that option (``addopts``) is dropped, in
both runs, and said so. Tests that import what is not installed (``torch``)
fail in both runs. Equinox's conftest sets 2 CPU devices itself.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import swapped_runs

TESTS = "tests"
#: Tests that fail only with the swap for a reason that cannot be removed, and that reason: none.
KNOWN: dict[str, str] = {}


def _equinox_version() -> str:
    return importlib.metadata.version("equinox")


def installed_tag(src: Path) -> str:
    """``v<installed version>``, if the clone has it; else exits naming its newest tags."""
    tag = f"v{_equinox_version()}"
    if swapped_runs.git(src, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}").returncode == 0:
        return tag
    tags = swapped_runs.git(src, "tag", "--list", "v*", "--sort=-v:refname").stdout.decode().split()
    sys.exit(f"[shapewatch] {src} has no tag {tag}; its newest tags: {', '.join(tags[:3]) or 'none'}. Fetch the "
             "clone again, or pass --ref with the commit whose tests are the installed equinox's.")


def test_files(work: Path) -> tuple[str, ...]:
    return tuple(str(p.relative_to(work)) for p in sorted((work / TESTS).glob("test_*.py")))


SUITE = swapped_runs.Suite(name="Equinox", files=(), checkout_paths=(TESTS, "pyproject.toml"), devices=2,
                           known=KNOWN, default_ref=installed_tag, clone="https://github.com/patrick-kidger/equinox",
                           find=test_files)


def main(argv: list[str] | None = None) -> int:
    parser = swapped_runs.parser(SUITE, __doc__.split("\n\n")[0], "--equinox-src",
                                 "an Equinox clone or checkout ($EQUINOX_SRC)")
    args = parser.parse_args(argv)
    about = f"equinox {_equinox_version()}, jax {importlib.metadata.version('jax')}"
    if importlib.util.find_spec("beartype") is None:
        print("[shapewatch] beartype is not installed: Equinox's addopts (jaxtyping checks with beartype) dropped")
        args.pytest_args = ["-o", "addopts=", *args.pytest_args]
    return swapped_runs.main(SUITE, args, about)


if __name__ == "__main__":
    sys.exit(main())
