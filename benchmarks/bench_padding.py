"""Benchmark: ``Buckets.pad`` on numpy vs a plain ``np.copyto`` of the same output bytes.

Prints a Markdown table (median of alternating runs). ``--quick`` runs a tiny version.
Usage: ``python benchmarks/bench_padding.py [--quick]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from shapewatch.buckets import Buckets

PLAN = Buckets((1024, 2048, 4096, 8192, 16384), multiple_of=1024)


def per_call(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small arrays, few runs")
    args = parser.parse_args(argv)
    if args.quick:
        shapes, rounds = [(8, 1000), (64, 4000)], 3
    else:
        shapes = [(64, 4000), (256, 4000), (64, 16000), (1024, 4000), (64, 3000, 40)]
        rounds = 15
    print("### Padding: Buckets.pad (numpy, float32) vs np.copyto of the same output bytes")
    print()
    print("| case | MB | pad GB/s | copyto GB/s | ratio |")
    print("|---|---:|---:|---:|---:|")
    for shape in shapes:
        axis = 1
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        out_shape = list(shape)
        out_shape[axis] = PLAN.bucket_of(shape[axis])
        src = np.ones(out_shape, dtype=np.float32)
        dst = np.empty_like(src)
        nbytes = src.nbytes
        calls = max(1, int(64e6 // nbytes))  # ~64 MB written per timing
        pad_t, copy_t = [], []
        for _ in range(rounds):  # alternate, so drift hits both equally
            pad_t.append(per_call(lambda x=x, axis=axis: PLAN.pad(x, axis=axis), calls))
            copy_t.append(per_call(lambda d=dst, s=src: np.copyto(d, s), calls))
        pad_gbs = nbytes / statistics.median(pad_t) / 1e9
        copy_gbs = nbytes / statistics.median(copy_t) / 1e9
        case = f"{' x '.join(map(str, shape))} -> {' x '.join(map(str, out_shape))}"
        print(
            f"| {case} | {nbytes / 1e6:.1f} | {pad_gbs:.1f} | {copy_gbs:.1f} "
            f"| {pad_gbs / copy_gbs:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
