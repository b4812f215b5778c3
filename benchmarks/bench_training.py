"""Benchmark: training on variable-length sequences with five padding strategies.

Runs ``examples/variable_length_training.py``'s comparison in this process: plain
jit, pad to the maximum, power-of-two padding, quantile buckets and shapewatch's
``group_by_length(max_buckets="auto")``, each under ``shapewatch.watched_jit``, and
prints one Markdown table (compiles, padding, compile seconds, wall time, ratios to
plain jit). Full: 200 batches of 16, lengths up to 512; ``--quick``: 8 batches of 4,
lengths up to 48.
Usage: ``python benchmarks/bench_training.py [--quick]``
"""

from __future__ import annotations

import os
import sys

from _common import ROOT, parse_args, table

sys.path.insert(0, os.path.join(ROOT, "examples"))

import variable_length_training as example  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    results, note = example.run_all(example.QUICK if args.quick else example.FULL)
    headers, rows = example.table_rows(results)
    print(f"### {example.TITLE}")
    print()
    print(note)
    print()
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
