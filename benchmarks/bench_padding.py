"""Benchmark: ``Buckets.pad`` on numpy vs a plain ``np.copyto`` of the same output bytes.

Prints a Markdown table (medians of alternating runs; ratio = median of paired ratios). Rows marked ``out=buffer`` write
into a preallocated output (no page faults on fresh memory). ``--quick`` runs a tiny version.
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
        rounds = 31
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
        calls = max(1, int(16e6 // nbytes))  # ~16 MB written per timing
        buf = np.empty_like(src)
        pads = {
            "": lambda x=x, axis=axis: PLAN.pad(x, axis=axis),
            ", out=buffer": lambda x=x, axis=axis, buf=buf: PLAN.pad(x, axis=axis, out=buf),
        }
        times: dict[str, list[float]] = {name: [] for name in [*pads, "copyto"]}
        for _ in range(rounds):  # alternate, so drift hits all equally
            for name, fn in pads.items():
                times[name].append(per_call(fn, calls))
            times["copyto"].append(per_call(lambda d=dst, s=src: np.copyto(d, s), calls))
        copy_gbs = nbytes / statistics.median(times["copyto"]) / 1e9
        for name in pads:
            pad_gbs = nbytes / statistics.median(times[name]) / 1e9
            # ratio: median of the per-round ratios (paired runs), robust to load drift
            ratio = statistics.median(c / p for p, c in zip(times[name], times["copyto"]))
            case = f"{' x '.join(map(str, shape))} -> {' x '.join(map(str, out_shape))}{name}"
            print(f"| {case} | {nbytes / 1e6:.1f} | {pad_gbs:.1f} | {copy_gbs:.1f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
