"""Benchmark a JAX function honestly: first call apart, steady state waited for.

``bench(fn, *args)`` times the first call (trace, lower and compile) apart from
the steady state, blocks on every output leaf inside each timed call, and warns
about the usual ways a JAX benchmark lies: host arguments (the transfer is
timed), recompiles inside the timed loop, and noise. ``bench.compare(f, g, ...)``
measures the ratio of two callables in alternating blocks of calls; it is precise
enough for ~5 us calls and is how shapewatch measures its own overhead.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import jax

from shapewatch._monitor.env import environment
from shapewatch._timing.calls import BenchWarning, FirstCall, _emit, _first_call, _raised, _warm
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
)

__all__ = ["BenchResult", "BenchWarning", "FirstCall", "Stats", "bench"]

NOISE_MEAN_RATIO = 1.5
"""Warn about noise when the steady-state mean exceeds this multiple of the median..."""
NOISE_P90_RATIO = 3.0
"""...or when p90 exceeds this multiple of the median."""


@dataclass
class BenchResult:
    """What :func:`bench` measured. Times are in seconds; ``str()`` picks units.

    Attributes:
        name: The function's name.
        first_call: The first call, split into trace/lower/compile when watched.
        steady: Statistics of the timed calls (``min_s``, ``median_s``, ...).
        times_s: Every timed call, in order.
        warmup: Untimed calls between the first call and the timed ones.
        recompiles: Compiles seen during the timed calls (should be 0).
        warnings: Why the numbers may mislead; empty for a clean benchmark.
        environment: Where it ran (the keys of a report's ``environment``: jax and jaxlib
            versions, backend, devices, x64, process, host, pid).
    """

    name: str
    first_call: FirstCall
    steady: Stats
    times_s: list[float]
    warmup: int
    recompiles: int
    warnings: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)

    samples = property(lambda self: self.steady.samples, doc="Number of timed calls.")
    min_s = property(lambda self: self.steady.min_s, doc="Fastest timed call.")
    median_s = property(lambda self: self.steady.median_s, doc="Median timed call.")
    mean_s = property(lambda self: self.steady.mean_s, doc="Mean timed call.")
    p10_s = property(lambda self: self.steady.p10_s, doc="10th percentile.")
    p90_s = property(lambda self: self.steady.p90_s, doc="90th percentile.")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return asdict(self)

    def __str__(self) -> str:
        lines = [
            f"bench {self.name}: {self.first_call}",
            f"  steady: {self.steady} after {self.warmup} warmup",
        ]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# --- helpers ---------------------------------------------------------------------------


def _noise(stats: Stats, who: str) -> str | None:
    med = stats.median_s
    if stats.samples < 3 or med <= 0:
        return None
    if stats.mean_s <= NOISE_MEAN_RATIO * med and stats.p90_s <= NOISE_P90_RATIO * med:
        return None
    return (
        f"noisy{who}: the mean is {stats.mean_s / med:.1f}x the median and p90 is "
        f"{stats.p90_s / med:.1f}x (thresholds {NOISE_MEAN_RATIO}x and {NOISE_P90_RATIO}x); "
        "some calls were much slower (other load, or a cost that varies between calls): "
        "quote the median or the minimum, not the mean"
    )


# --- the public functions --------------------------------------------------------------


def bench(
    fn: Callable[..., Any],
    *args: Any,
    warmup: int = 10,
    repeat: int = 100,
    min_time: float | None = None,
    **kwargs: Any,
) -> BenchResult:
    """Time ``fn(*args, **kwargs)``: the first call apart, then the steady state.

    Each timed call includes ``jax.block_until_ready`` on its whole output. Cyclic
    GC is paused while timing (like ``timeit``). Problems that make the numbers
    mislead (host arguments, recompiles while timing, noise) are listed in
    ``result.warnings`` and emitted once as a :class:`BenchWarning`.

    Args:
        fn: The callable to time; a ``shapewatch.watched_jit`` function also gets
            its first call split into trace, lower and compile.
        *args: Positional arguments for ``fn`` (pass device arrays:
            ``jax.device_put(x)``).
        warmup: Untimed calls after the first call (>= 0).
        repeat: Timed calls (>= 1).
        min_time: If given (seconds, >= 0), keep timing calls until their total
            reaches it, so ``samples`` may exceed ``repeat``.
        **kwargs: Keyword arguments for ``fn``.

    Returns:
        A :class:`BenchResult`; ``str()`` gives a short report.

    Raises:
        TypeError, ValueError: A bad ``fn``, ``warmup``, ``repeat`` or ``min_time``.
        RuntimeError: ``fn`` raised (chained from its exception); nothing is timed.

    >>> import jax, jax.numpy as jnp, warnings
    >>> warnings.simplefilter("ignore", BenchWarning)  # a busy machine may be noisy
    >>> f = jax.jit(lambda x: x * 2.0)
    >>> r = bench(f, jax.device_put(jnp.ones(8)), warmup=1, repeat=5)
    >>> r.samples, r.recompiles
    (5, 0)
    """
    _check_callable("fn", fn)
    _check_count("warmup", warmup, 0)
    _check_count("repeat", repeat, 1)
    if min_time is not None:
        if isinstance(min_time, bool) or not isinstance(min_time, numbers.Real):
            raise TypeError(
                f"[shapewatch] bench: min_time must be seconds >= 0 or None, got {min_time!r}"
            )
        if not min_time >= 0:
            raise ValueError(f"[shapewatch] bench: min_time must be >= 0 seconds, got {min_time!r}")
    name = _name(fn)
    first = _first_call(fn, name, args, kwargs)
    _warm(fn, name, warmup, args, kwargs)

    before = _records(fn)
    seq, compiles = _last_seq(before), _compile_count()
    block, clock = jax.block_until_ready, time.perf_counter
    times: list[float] = []
    todo = repeat
    with _gc_paused():
        try:
            while todo > 0:
                for _ in range(todo):
                    start = clock()
                    block(fn(*args, **kwargs))
                    times.append(clock() - start)
                spent = math.fsum(times)
                todo = 0
                if min_time is not None and spent < min_time:
                    todo = max(1, math.ceil((min_time - spent) / max(spent / len(times), 1e-9)))
        except Exception as exc:
            when = f"timed call {len(times) + 1}"
            raise _raised(name, exc, when, "the timings were discarded") from exc
    new = None if before is None else [r for r in (_records(fn) or []) if int(r.seq) > seq]
    recompiles = _compile_count() - compiles if new is None else len(new)

    steady = Stats.of(times)
    found = [
        w
        for w in (
            _host_arguments(args, kwargs),
            _recompile_warning(recompiles, len(times), new),
            _noise(steady, ""),
        )
        if w
    ]
    _emit("bench", name, found)
    return BenchResult(name, first, steady, times, warmup, recompiles, found, environment())
