"""Helpers shared by the ``benchmarks/bench_*.py`` programs.

Each program prints one Markdown section (``### title``, a sentence, a table) on
stdout; ``benchmarks/run.py`` collects them. Run one alone with
``python benchmarks/bench_x.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a source tree without installing
    sys.path.insert(0, ROOT)

from shapewatch._timing.stats import format_seconds  # noqa: E402

__all__ = ["ROOT", "format_seconds", "jax_label", "parse_args", "table"]


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The common command line: ``--quick`` (a tiny run, for CI and smoke tests)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a tiny, fast run")
    parser.add_argument("--rows-only", action="store_true",
                        help="print only the table's rows (benchmarks/run.py adds them to another jax's table)")
    return parser.parse_args(argv)


def jax_label() -> str:
    """The jax and Python versions this benchmark runs on, for a row of a table over versions."""
    import jax

    return f"{jax.__version__} (Python {sys.version_info.major}.{sys.version_info.minor})"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table; cells are ``str()``-ed and ``|`` escaped.

    >>> print(table(["a", "b"], [[1, "x|y"]]))
    | a | b |
    |---|---|
    | 1 | x\\|y |
    """

    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), "|" + "---|" * len(headers), *map(line, rows)])
