"""How precise is ``shapewatch.bench.compare``? Compare identical functions.

Two separately jitted copies of the same function should have a ratio of 1.00;
how far the measured ratio strays from it (and the per-round p10..p90 spread) is
the resolution of the overhead ratios the other benchmarks report.
"""

from __future__ import annotations

import warnings

import _common
import jax
import jax.numpy as jnp

from shapewatch._timing.bench import BenchWarning, bench


def cases() -> list[tuple[str, object, object, jax.Array]]:
    def add(x):
        return x + 1.0

    def tanh_mm(x):
        return jnp.tanh(x @ x)

    small = jax.device_put(jnp.ones(8, jnp.float32))
    big = jax.device_put(jnp.ones((128, 128), jnp.float32))
    f_add, g_add = jax.jit(add), jax.jit(add)
    f_mm, g_mm = jax.jit(tanh_mm), jax.jit(tanh_mm)
    return [
        ("x + 1, f32[8]: two jitted copies", f_add, g_add, small),
        ("x + 1, f32[8]: one function with itself", f_add, f_add, small),
        ("tanh(x @ x), f32[128,128]: two copies", f_mm, g_mm, big),
    ]


def main() -> None:
    args = _common.parse_args(__doc__.splitlines()[0])
    warnings.simplefilter("ignore", BenchWarning)  # flagged in the table instead
    rounds, repeats = (10, 2) if args.quick else (200, 5)
    fmt = _common.format_seconds
    rows = []
    for name, f, g, x in cases():
        results = []
        for _ in range(repeats):
            results.append(bench.compare(f, g, x, warmup=5, rounds=rounds))
        r = results[-1]
        ratios = sorted(c.ratio for c in results)
        noisy = " (imprecise)" if any(c.warnings for c in results) else ""
        rows.append(
            [
                name,
                f"{r.rounds} x {r.calls_per_round}",
                fmt(r.candidate.median_s),
                fmt(r.baseline.median_s),
                f"{r.ratio:.3f}{noisy}",
                f"{r.ratio_ci95[0]:.3f}..{r.ratio_ci95[1]:.3f}",
                f"{r.ratio_p10:.2f}..{r.ratio_p90:.2f}",
                f"{ratios[0]:.3f}..{ratios[-1]:.3f}",
            ]
        )
    print("### bench.compare resolution: identical functions\n")
    print(
        f"`bench.compare(f, g, x, rounds={rounds})` on two identical functions; the ratio "
        f"should be 1.000. *Ratio* is the median of the per-round ratios (one block of calls "
        f"of each per round, order alternating), with its 95% bootstrap interval; then the "
        f"spread of the per-round ratios, and the range of the ratio over {repeats} "
        f"independent compares.\n"
    )
    headers = ["case", "rounds x calls", "median f", "median g", "ratio", "95% interval"]
    headers += ["per-round p10..p90", f"ratio over {repeats} runs"]
    print(_common.table(headers, rows))


if __name__ == "__main__":
    main()
