"""Runs Flax NNX's own tests that use jit twice: as released, and with ``jax.jit`` replaced by ``watched_jit``.

``nnx.jit`` (and ``nnx.compat.jit``) build their jitted functions with
``jax.jit``: with it swapped for ``shapewatch.watched_jit`` before the tests
import anything, every NNX jit in the tests is watched, its graph nodes merged
and named by the Flax NNX adapter. This program takes ``tests/nnx`` of the
installed flax from a Flax clone (the commit that set the installed version in
``flax/version.py``, else the tag ``v<version>``), runs the files there that use
jit (a file that names ``jit`` as a word; 16 of them at flax 0.12.8) on 4 host
devices, as Flax's own test script does, once as released and once swapped, and
prints, file by file, the tests that fail only with the swap (exit 1 if any).

Usage (from the repository root, with the interpreter whose flax and jax to test)::

    python tools/flax_nnx_suite.py --flax-src path/to/flax [-n 2] [--ref REF] [--keep DIR] [--files mutable_array_test.py ...]

``--flax-src`` defaults to ``$FLAX_SRC``: a git clone of google/flax (a bare one
will do), or a checkout whose ``tests/nnx`` are the installed version's.
Flax's test files need ``absl-py`` and ``optax`` (and ``pytest-xdist`` for ``-n``
above 1); one that imports what is not installed (``orbax``) fails in both runs.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import swapped_runs

TESTS = "tests/nnx"
#: Tests that fail only with the swap for a reason that cannot be removed, and that reason: none.
KNOWN: dict[str, str] = {}
_USES_JIT = re.compile(r"\bjit\b")


def _flax_version() -> str:
    return importlib.metadata.version("flax")


def installed_commit(src: Path) -> str:
    """The commit that set the installed version in ``flax/version.py``, else ``v<version>``; else exits."""
    version = _flax_version()
    quoted = [f"__version__ = '{version}'", f'__version__ = "{version}"']
    for text in quoted:
        log = swapped_runs.git(src, "log", "--all", "--reverse", "--format=%H", "-S", text, "--", "flax/version.py")
        commits = log.stdout.decode().split()
        if commits:
            return commits[0]
    tag = f"v{version}"
    if swapped_runs.git(src, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}").returncode == 0:
        return tag
    tags = swapped_runs.git(src, "tag", "--list", "v*", "--sort=-v:refname").stdout.decode().split()
    sys.exit(f"[shapewatch] {src} has no commit that sets flax {version} in flax/version.py, and no tag {tag}; "
             f"its newest tags: {', '.join(tags[:3]) or 'none'}. Fetch the clone again, or pass --ref with the "
             "commit whose tests/nnx are the installed flax's.")


def files_using_jit(work: Path) -> tuple[str, ...]:
    """The test files under ``tests/nnx`` that name ``jit`` (``nnx.jit``, ``jax.jit``, ``nnx.compat.jit``)."""
    found = sorted(p for p in (work / TESTS).rglob("*_test.py") if _USES_JIT.search(p.read_text(errors="replace")))
    return tuple(str(p.relative_to(work)) for p in found)


SUITE = swapped_runs.Suite(name="Flax", files=(), checkout_paths=(TESTS, "pyproject.toml"), devices=4, known=KNOWN,
                           default_ref=installed_commit, clone="https://github.com/google/flax", find=files_using_jit)


def main(argv: list[str] | None = None) -> int:
    parser = swapped_runs.parser(SUITE, __doc__.split("\n\n")[0], "--flax-src", "a Flax clone or checkout ($FLAX_SRC)")
    args = parser.parse_args(argv)
    about = f"flax {_flax_version()}, jax {importlib.metadata.version('jax')}"
    return swapped_runs.main(SUITE, args, about)


if __name__ == "__main__":
    sys.exit(main())
