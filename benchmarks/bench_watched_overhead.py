"""Overhead of watched_jit against jax.jit: the cached call and the miss.

Cached call: ``bench.compare(watched, plain, x, y)`` on a tiny function (two
4-element arrays added), alternating blocks of calls; the bar is 1.02x.
Miss: the first call (trace + lower + compile) of a function taking a 200-leaf
parameter pytree, a fresh shape each time, watched and plain alternating in
pairs; the bar is 2% of the miss's own cost.

``make bench`` also runs this program with the oldest and the most installed
supported jax (``benchmarks/run.py --python ...``), which add their rows.
"""

from __future__ import annotations

import statistics
import time
import warnings

import _common
import jax
import jax.numpy as jnp

import shapewatch
from shapewatch._timing.bench import BenchWarning, bench

PER_JAX_VERSION = True  # benchmarks/run.py runs it with every interpreter given by --python

def add(x, y):
    return x + y


def cached_rows(quick: bool) -> list[list[str]]:
    x = jax.device_put(jnp.ones(4, jnp.float32))
    y = jax.device_put(jnp.ones(4, jnp.float32))
    plain = jax.jit(add)
    per_signature = shapewatch.watched_jit(add, count_calls=True)
    per_signature(jnp.ones(5, jnp.float32), jnp.ones(5, jnp.float32))  # a recompile on a shape: counting
    per_signature(x, y)  # per signature starts (the counter's cost, not the first call's, is timed)
    rows = []
    for name, cand in [
        ("watched_jit (default)", shapewatch.watched_jit(add)),
        ("watched_jit(count_calls=True)", shapewatch.watched_jit(add, count_calls=True)),
        ("watched_jit(count_calls=True), recompiled on a shape: counted per signature", per_signature),
        ("jax.jit (a second copy: the method's noise floor)", jax.jit(add)),
    ]:
        c = bench.compare(cand, plain, x, y, warmup=20, rounds=20 if quick else 400)
        rows.append([name, _common.format_seconds(c.candidate.median_s),
                     _common.format_seconds(c.baseline.median_s), f"{c.ratio:.3f}",
                     f"{c.ratio_p10:.2f}..{c.ratio_p90:.2f}", f"{c.rounds} x {c.calls_per_round}"])
    return rows


def make_step():
    def step(params, x):
        acc = x
        for k in sorted(params):
            acc = jnp.tanh(acc * params[k]["w"] + params[k]["b"])
        return acc.sum()

    return step


def miss_rows(quick: bool) -> list[list[str]]:
    params = {f"layer{i:03d}": {"w": jnp.ones(()), "b": jnp.zeros(())} for i in range(100)}  # 200 leaves
    pairs = 3 if quick else 30
    plain_t, watched_t, ratios = [], [], []
    for i in range(pairs):
        timings = {}
        order = ("plain", "watched") if i % 2 == 0 else ("watched", "plain")
        for which in order:
            fn = jax.jit(make_step()) if which == "plain" else shapewatch.watched_jit(make_step())
            n = 2 * i + (1 if which == "plain" else 2) + 8
            x = jax.device_put(jnp.ones(n))
            start = time.perf_counter()
            jax.block_until_ready(fn(params, x))
            timings[which] = time.perf_counter() - start
        plain_t.append(timings["plain"])
        watched_t.append(timings["watched"])
        ratios.append(timings["watched"] / timings["plain"])
        shapewatch.reset()
    q = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else [ratios[0]] * 9
    return [["first call, 200-leaf params (trace + lower + compile)",
             _common.format_seconds(statistics.median(watched_t)),
             _common.format_seconds(statistics.median(plain_t)), f"{statistics.median(ratios):.3f}",
             f"{q[0]:.2f}..{q[-1]:.2f}", f"{pairs} pairs"]]


def own_work_rows(quick: bool) -> list[list[str]]:
    """Times shapewatch's own work on each miss directly: the paired ratio above cannot resolve 2%."""
    from shapewatch._monitor import events as _events
    from shapewatch._monitor import miss as _miss

    spent = [0.0]

    def timed(fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        return wrapper

    originals = _miss.begin, _miss.commit, _events._attribute
    _miss.begin, _miss.commit, _events._attribute = (timed(f) for f in originals)
    params = {f"layer{i:03d}": {"w": jnp.ones(()), "b": jnp.zeros(())} for i in range(100)}
    own, fractions = [], []
    try:
        for i in range(3 if quick else 20):
            spent[0] = 0.0
            fn = shapewatch.watched_jit(make_step())
            jax.block_until_ready(fn(params, jax.device_put(jnp.ones(100 + i))))
            miss = shapewatch.misses(fn)[-1]
            own.append(spent[0])
            fractions.append(spent[0] / miss.total_s)
            shapewatch.reset()
    finally:
        _miss.begin, _miss.commit, _events._attribute = originals
    return [["shapewatch's own work per miss (signature, stack, record, attribution), 200-leaf params",
             _common.format_seconds(statistics.median(own)), "-",
             f"{1 + statistics.median(fractions):.4f}", f"max {1 + max(fractions):.4f}",
             f"{len(own)} misses"]]


def main() -> None:
    args = _common.parse_args(__doc__.splitlines()[0])
    warnings.simplefilter("ignore", BenchWarning)
    headers = ["jax", "case", "watched", "jax.jit", "ratio", "p10..p90", "samples"]
    rows = [[_common.jax_label(), *row]
            for row in cached_rows(args.quick) + miss_rows(args.quick) + own_work_rows(args.quick)]
    if args.rows_only:
        print(_common.table(headers, rows).split("\n", 2)[2])
        return
    print("### watched_jit overhead against jax.jit\n")
    print("Cached call: median of per-round ratios of alternating blocks of calls of `x + y` on two "
          "f32[4] device arrays (bar: 1.02). Miss: median of per-pair ratios of first-call times, "
          "watched and plain alternating (bar: 1.02); compile times vary by tens of percent between "
          "runs, so this ratio cannot resolve 2%. The last row times shapewatch's own work inside each "
          "miss directly: its ratio is 1 + (that time / the miss's trace + lower + compile time).\n")
    print(_common.table(headers, rows))


if __name__ == "__main__":
    main()
