"""``bench.compare``: the ratio of two callables' time per call, in alternating blocks.

Each round times one block of calls of the candidate and one of the baseline, the
order alternating, so drift and load hit both alike; the median of the per-round
ratios is precise enough for ~5 us calls. The package
(:mod:`shapewatch._timing`) attaches :func:`compare` to ``bench`` as ``bench.compare``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import jax
import numpy as np

from shapewatch._monitor.env import environment
from shapewatch._timing.calls import _emit, _first_call, _raised, _warm
from shapewatch._timing.stats import (
    Stats,
    _check_callable,
    _check_count,
    _compile_count,
    _gc_paused,
    _host_arguments,
    _last_seq,
    _name,
    _recompile_warning,
    _records,
    unit_for,
)

__all__ = ["CompareResult", "compare"]

COMPARE_BLOCK_S = 0.002
"""``compare(repeat=None)`` picks the calls per block so that a block takes about this long."""
COMPARE_CI_WARN = 0.05
"""``compare`` warns when the 95% interval of its ratio is wider than +-5% of it."""


@dataclass
class CompareResult:
    """What ``bench.compare(candidate, baseline, ...)`` measured.

    Each sample is the mean time per call over one block of ``calls_per_round``
    calls; in each round one block of each runs, back to back. ``ratio`` is the
    median over rounds of candidate block / baseline block (above 1: the candidate
    is slower); pairing the blocks cancels drift, which makes it several times
    steadier than ``ratio_of_medians`` (``candidate.median_s / baseline.median_s``).
    ``ratio_p10`` / ``ratio_p90`` are the spread of the per-round ratios, and
    ``ratio_ci95`` a 95% bootstrap interval of ``ratio`` (its resolution).
    """

    candidate_name: str
    baseline_name: str
    candidate: Stats
    baseline: Stats
    ratio: float
    ratio_of_medians: float
    ratio_p10: float
    ratio_p90: float
    ratio_ci95: tuple[float, float]
    rounds: int
    calls_per_round: int
    warmup: int
    recompiles: int
    candidate_times_s: list[float] = field(default_factory=list)
    baseline_times_s: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return asdict(self)

    def __str__(self) -> str:
        unit = unit_for(min(self.candidate.median_s, self.baseline.median_s))
        lo, hi = self.ratio_ci95
        lines = [
            f"compare {self.candidate_name} (candidate) vs {self.baseline_name} (baseline): "
            f"{self.rounds} rounds x {self.calls_per_round} calls each",
            f"  candidate: {self.candidate.describe(unit)}",
            f"  baseline:  {self.baseline.describe(unit)}",
            f"  ratio {self.ratio:.3f}, 95% interval {lo:.3f}..{hi:.3f} (per-round p10..p90 "
            f"{self.ratio_p10:.3f}..{self.ratio_p90:.3f}; ratio of medians {self.ratio_of_medians:.3f})",
        ]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _imprecise(per_round: np.ndarray) -> tuple[tuple[float, float], str | None]:
    """A 95% bootstrap interval of the median per-round ratio, and a warning if wide."""
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(per_round), size=(400, len(per_round)), dtype=np.int32)
    lo, hi = (float(v) for v in np.percentile(np.median(per_round[picks], axis=1), [2.5, 97.5]))
    med = float(np.median(per_round))
    if len(per_round) < 3 or (hi - lo) / 2 <= COMPARE_CI_WARN * med:
        return (lo, hi), None
    return (lo, hi), (
        f"imprecise: the ratio's 95% interval is {lo:.3f}..{hi:.3f} (wider than "
        f"+-{COMPARE_CI_WARN:.0%}), the per-round ratios vary a lot (other load?): use more "
        "rounds or a quieter machine"
    )


def compare(
    f: Callable[..., Any],
    g: Callable[..., Any],
    *args: Any,
    warmup: int = 10,
    repeat: int | None = None,
    rounds: int = 100,
    **kwargs: Any,
) -> CompareResult:
    """Ratio of the time per call of ``f`` (candidate) to ``g`` (baseline).

    Both are called with the same arguments. Each round times one block of
    ``repeat`` calls of each (blocking on every output), the order alternating
    between rounds, so drift and load hit both alike; a sample is the block time
    divided by ``repeat``. Timing blocks rather than single calls keeps the clock's
    cost out of ~5 us calls. ``compare(watched, plain, x)`` is shapewatch's overhead.
    Warns (host arguments, recompiles, or a 95% interval of the ratio wider than
    +-5%) like :func:`bench`.

    Args:
        f: The candidate.
        g: The baseline.
        *args: Positional arguments for both.
        warmup: Untimed calls of each after its first call (>= 0).
        repeat: Calls per block (>= 1); ``None`` picks enough for a block to take
            about ``COMPARE_BLOCK_S`` (2 ms), at most 10000.
        rounds: Rounds, i.e. samples per function (>= 1).
        **kwargs: Keyword arguments for both.

    Returns:
        A :class:`CompareResult`: ``ratio``, the median of the per-round ratios
        candidate / baseline, their p10/p90, and both sides' statistics.

    Raises:
        TypeError, ValueError: A bad argument.
        RuntimeError: ``f`` or ``g`` raised (chained); nothing is timed.

    >>> import jax, jax.numpy as jnp, warnings
    >>> from shapewatch import BenchWarning, bench
    >>> warnings.simplefilter("ignore", BenchWarning)  # 4 rounds are imprecise
    >>> x = jax.device_put(jnp.ones(8))
    >>> c = bench.compare(jax.jit(jnp.sin), jax.jit(jnp.sin), x, warmup=1, repeat=10, rounds=4)
    >>> c.rounds, c.calls_per_round, c.candidate.samples
    (4, 10, 4)
    """
    _check_callable("f", f)
    _check_callable("g", g)
    _check_count("warmup", warmup, 0)
    if repeat is not None:
        _check_count("repeat", repeat, 1)
    _check_count("rounds", rounds, 1)
    pair = ((f, f"candidate {_name(f)}"), (g, f"baseline {_name(g)}"))
    for fn, who in pair:
        _first_call(fn, who, args, kwargs)
        _warm(fn, who, warmup, args, kwargs)

    def block_of(fn: Callable[..., Any], n: int) -> float:
        block, clock = jax.block_until_ready, time.perf_counter
        start = clock()
        for _ in range(n):
            block(fn(*args, **kwargs))
        return (clock() - start) / n

    times: tuple[list[float], list[float]] = ([], [])
    who = pair[0][1]
    with _gc_paused():
        try:
            if repeat is None:
                probe = max(block_of(fn, 10) for fn, _ in pair)
                repeat = min(10_000, max(1, math.ceil(COMPARE_BLOCK_S / max(probe, 1e-9))))
            records = [_records(fn) for fn, _ in pair]
            seqs, compiles = [_last_seq(r) for r in records], _compile_count()
            for i in range(rounds):
                for k in (0, 1) if i % 2 == 0 else (1, 0):
                    who = pair[k][1]
                    times[k].append(block_of(pair[k][0], repeat))
        except Exception as exc:
            raise _raised(who, exc, "a timed call", "the timings were discarded") from exc
    new = None
    if all(r is not None for r in records):
        new = [
            r
            for (fn, _), s in zip(pair, seqs, strict=True)
            for r in _records(fn) or []
            if r.seq > s
        ]
    recompiles = _compile_count() - compiles if new is None else len(new)

    cand, base = Stats.of(times[0]), Stats.of(times[1])
    per_round = np.asarray(times[0]) / np.maximum(np.asarray(times[1]), 1e-12)
    r10, ratio, r90 = (float(v) for v in np.percentile(per_round, [10, 50, 90]))
    ci95, imprecise = _imprecise(per_round)
    found = [
        w
        for w in (
            _host_arguments(args, kwargs),
            _recompile_warning(recompiles, 2 * rounds * repeat, new),
            imprecise,
        )
        if w
    ]
    names = (_name(f), _name(g))
    _emit("bench.compare", f"{names[0]} vs {names[1]}", found)
    of_medians = cand.median_s / base.median_s if base.median_s > 0 else math.inf
    return CompareResult(
        *names,
        cand,
        base,
        ratio,
        of_medians,
        r10,
        r90,
        ci95,
        rounds,
        repeat,
        warmup,
        recompiles,
        times[0],
        times[1],
        found,
        environment(),
    )
