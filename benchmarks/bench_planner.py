"""Benchmark: observing 10M lengths and planning 32 optimal buckets.

Prints Markdown tables. ``--quick`` runs a tiny version (for CI). No assertions on time.
Usage: ``python benchmarks/bench_planner.py [--quick]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from shapewatch.buckets import STRATEGIES, LengthObserver, propose


def long_tailed_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Lognormal lengths clipped to [1, 8192] (median ~400, a long tail to the cap)."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(400), 1.1, n), 1, 8192).astype(np.int64)


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def distinct_after_rounding(obs: LengthObserver, multiple_of: int) -> int:
    return int(np.unique(-(-obs.lengths // multiple_of) * multiple_of).size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100k lengths, one repeat")
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else 10_000_000
    repeats = 1 if args.quick else 3
    lengths = long_tailed_lengths(n)

    def observe() -> LengthObserver:
        obs = LengthObserver()
        obs.update(lengths)
        return obs

    observe_s, obs = timed(observe, repeats)
    auto = dict(compile_seconds=5.0, steps=100_000, step_seconds=0.05)
    cases = [
        ("optimal, linear", dict(cost="linear", multiple_of=1)),
        ("optimal, quadratic", dict(cost="quadratic", multiple_of=1)),
        ("optimal, linear, multiple_of=8", dict(cost="linear", multiple_of=8)),
        ("optimal, quadratic, multiple_of=8", dict(cost="quadratic", multiple_of=8)),
        ("optimal, linear, auto (5 s compiles, 100k steps x 0.05 s)", dict(cost="linear", **auto)),
    ]
    print(f"### Planner: {n:,} lognormal lengths in [1, 8192], max_buckets=32")
    print()
    print("| case | distinct lengths | buckets | observe s | plan s | padding % |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, kwargs in cases:
        k = "auto" if "steps" in kwargs else 32
        plan_s, plan = timed(lambda kw=kwargs, k=k: propose(obs, k, **kw), repeats)
        distinct = distinct_after_rounding(obs, kwargs.get("multiple_of", 1))
        print(
            f"| {name} | {distinct:,} | {len(plan)} | {observe_s:.3f} | {plan_s:.3f} "
            f"| {100 * plan.stats['waste']:.1f} |"
        )
    print()
    print("### Strategies compared (same lengths, max_buckets=32, linear cost)")
    print()
    print(
        "| strategy | buckets (mult. 1) | padding % (mult. 1) | buckets (mult. 8) | padding % (mult. 8) |"
    )
    print("|---|---:|---:|---:|---:|")
    for strategy in STRATEGIES:
        cells = []
        for multiple_of in (1, 8):
            plan = propose(obs, 32, strategy=strategy, multiple_of=multiple_of)
            cells += [f"{len(plan):,}", f"{100 * plan.stats['waste']:.1f}"]
        print(f"| {strategy} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
