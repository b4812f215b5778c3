"""Benchmark a JAX function honestly: first call apart, steady state waited for.

``bench(fn, *args)`` times the first call (trace, lower and compile) apart from
the steady state, blocks on every output leaf inside each timed call, and warns
about the usual ways a JAX benchmark lies: host arguments (the transfer is
timed), recompiles inside the timed loop, and noise. ``bench.compare(f, g, ...)``
measures the ratio of two callables in alternating blocks of calls; it is precise
enough for ~5 us calls and is how shapewatch measures its own overhead.
"""

from __future__ import annotations

import gc
import math
import numbers
import reprlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import jax
import numpy as np

from shapewatch._env import environment

__all__ = ["BenchResult", "BenchWarning", "CompareResult", "FirstCall", "Stats", "bench"]

NOISE_MEAN_RATIO = 1.5
"""Warn about noise when the steady-state mean exceeds this multiple of the median..."""
NOISE_P90_RATIO = 3.0
"""...or when p90 exceeds this multiple of the median."""
COMPARE_BLOCK_S = 0.002
"""``compare(repeat=None)`` picks the calls per block so that a block takes about this long."""
COMPARE_CI_WARN = 0.05
"""``compare`` warns when the 95% interval of its ratio is wider than +-5% of it."""

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class BenchWarning(UserWarning):
    """A benchmark measured something other than what it seems to (see ``BenchResult.warnings``)."""


BenchWarning.__module__ = "shapewatch"


# --- backend compiles, counted through jax.monitoring ------------------------------------

_compiles = 0
_compiles_lock = threading.Lock()
_listening = False


def _on_duration_event(event: str, duration: float, **kwargs: Any) -> None:
    global _compiles
    if event == _COMPILE_EVENT:
        with _compiles_lock:
            _compiles += 1


def _compile_count() -> int:
    """Backend compiles seen so far in this process (the listener is registered once)."""
    global _listening
    with _compiles_lock:
        if not _listening:
            jax.monitoring.register_event_duration_secs_listener(_on_duration_event)
            _listening = True
        return _compiles


# --- statistics and units ----------------------------------------------------------------

_UNITS = (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0))


def unit_for(seconds: float) -> str:
    """The unit (``ns``, ``us``, ``ms`` or ``s``) that fits ``seconds``.

    >>> unit_for(5.2e-6), unit_for(0.02), unit_for(3.0)
    ('us', 'ms', 's')
    """
    for unit, scale in _UNITS[:-1]:
        if abs(seconds) < 1000 * scale:
            return unit
    return "s"


def format_seconds(seconds: float, unit: str | None = None) -> str:
    """Three significant digits in the unit that fits (or the one given).

    >>> format_seconds(5.2123e-6), format_seconds(0.41234), format_seconds(0.02, "us")
    ('5.21 us', '412 ms', '20000 us')
    """
    unit = unit or unit_for(seconds)
    value = seconds / dict(_UNITS)[unit]
    digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:.{digits}f} {unit}"


@dataclass(frozen=True)
class Stats:
    """Summary of timed samples, in seconds: min, median, mean and p10/p90 spread."""

    samples: int
    min_s: float
    median_s: float
    mean_s: float
    p10_s: float
    p90_s: float

    @classmethod
    def of(cls, times: list[float]) -> Stats:
        """Summarise ``times`` (seconds, at least one).

        >>> Stats.of([1.0, 2.0, 3.0, 4.0, 100.0]).median_s
        3.0
        """
        a = np.asarray(times, dtype=np.float64)
        p10, med, p90 = np.percentile(a, [10, 50, 90])
        return cls(len(a), float(a.min()), float(med), float(a.mean()), float(p10), float(p90))

    def describe(self, unit: str | None = None) -> str:
        """One line, every time in ``unit`` (default: the one that fits the median)."""
        u = unit or unit_for(self.median_s)
        f = lambda s: format_seconds(s, u)  # noqa: E731
        return (
            f"median {f(self.median_s)}, min {f(self.min_s)}, mean {f(self.mean_s)}, "
            f"p10..p90 {f(self.p10_s)}..{f(self.p90_s)} ({self.samples} samples)"
        )

    def __str__(self) -> str:
        return self.describe()


# --- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstCall:
    """The first call: trace, lower, compile and one run, all in ``total_s``.

    ``trace_s``, ``lower_s`` and ``compile_s`` come from shapewatch's records, as
    does ``misses`` (0: it was compiled before); all four are ``None`` for a
    function that is not watched. ``compiles`` is the number of backend compiles
    JAX reported during the call.
    """

    total_s: float
    trace_s: float | None = None
    lower_s: float | None = None
    compile_s: float | None = None
    compiles: int = 0
    misses: int | None = None

    def __str__(self) -> str:
        text = f"first call {format_seconds(self.total_s)}"
        if self.misses == 0:
            return text + " (no miss: compiled before)"
        if self.trace_s is not None and self.lower_s is not None and self.compile_s is not None:
            rest = max(0.0, self.total_s - self.trace_s - self.lower_s - self.compile_s)
            parts = [("trace", self.trace_s), ("lower", self.lower_s), ("compile", self.compile_s)]
            parts.append(("run", rest))
            return text + " = " + " + ".join(f"{k} {format_seconds(v)}" for k, v in parts)
        plural = "" if self.compiles == 1 else "s"
        return text + f" ({self.compiles} backend compile{plural})"


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
        environment: Where it ran (:func:`shapewatch._env.environment`).
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


# --- helpers ---------------------------------------------------------------------------


def _name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def _check_count(what: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"[shapewatch] bench: {what} must be an int >= {minimum}, got {reprlib.repr(value)}"
        )
    if value < minimum:
        raise ValueError(f"[shapewatch] bench: {what} must be >= {minimum}, got {value!r}")


def _check_callable(what: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(
            f"[shapewatch] bench: {what} must be callable, got {type(fn).__name__} "
            f"{reprlib.repr(fn)}"
        )


def _records(fn: Callable[..., Any]) -> list[Any] | None:
    """shapewatch's miss records of ``fn``, or None when it is not watched."""
    try:
        import shapewatch
        from shapewatch._jit import is_watched

        misses = getattr(shapewatch, "misses", None) or shapewatch._jit.misses
        return list(misses(fn)) if is_watched(fn) else None
    except (ImportError, AttributeError):
        return None


def _last_seq(records: list[Any] | None) -> int:
    return max((int(r.seq) for r in records), default=-1) if records else -1


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Like timeit: no cyclic GC pauses inside the timed loops."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _host_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    found: list[str] = []
    trees = [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
    for label, tree in trees:
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            where = label + jax.tree_util.keystr(path)
            if isinstance(leaf, np.ndarray):
                found.append(f"{where} (NumPy {leaf.dtype}{list(leaf.shape)})")
            elif isinstance(leaf, np.generic):
                found.append(f"{where} (NumPy scalar {leaf!r})")
            elif isinstance(leaf, (bool, int, float, complex)):
                found.append(f"{where} (Python {type(leaf).__name__} {leaf!r})")
    if not found:
        return None
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    return (
        f"host arguments: {shown}; every call converts and transfers them to the device, "
        "so the transfer is timed: pass jax.device_put(x) to time the computation alone "
        "(ignore this for static arguments and values that never reach JAX)"
    )


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


def _recompile_warning(count: int, calls: int, new: list[Any] | None) -> str | None:
    if count <= 0:
        return None
    source = "seen by jax.monitoring"
    if new is not None:
        why = getattr(new[0], "explanation", None) if new else None
        source = "shapewatch.misses(fn) explains them" + (f", e.g. {why}" if why else "")
    return (
        f"recompiled {count} time(s) during the {calls} timed calls ({source}): the shapes "
        "(or static arguments) change between calls, so compiles are timed; keep them fixed "
        "or bucket them"
    )


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


def _emit(kind: str, name: str, found: list[str]) -> None:
    if found:
        text = "\n".join(f"  - {w}" for w in found)
        warnings.warn(f"[shapewatch] {kind} {name}:\n{text}", BenchWarning, stacklevel=3)


def _raised(name: str, exc: BaseException, when: str, after: str) -> RuntimeError:
    return RuntimeError(f"[shapewatch] bench: {name} raised {exc!r} on {when}; {after}")


def _first_call(fn: Callable[..., Any], name: str, args: Any, kwargs: Any) -> FirstCall:
    before = _records(fn)
    seq, compiles = _last_seq(before), _compile_count()
    try:
        start = time.perf_counter()
        jax.block_until_ready(fn(*args, **kwargs))
        total = time.perf_counter() - start
    except Exception as exc:
        raise _raised(name, exc, "its first call", "nothing was timed") from exc
    compiles = _compile_count() - compiles
    if before is None:
        return FirstCall(total, compiles=compiles)
    new = [r for r in (_records(fn) or []) if int(r.seq) > seq]
    return FirstCall(
        total,
        trace_s=float(sum(r.trace_s for r in new)),
        lower_s=float(sum(r.lower_s for r in new)),
        compile_s=float(sum(r.compile_s for r in new)),
        compiles=compiles,
        misses=len(new),
    )


def _warm(fn: Callable[..., Any], name: str, n: int, args: Any, kwargs: Any) -> None:
    for i in range(n):
        try:
            jax.block_until_ready(fn(*args, **kwargs))
        except Exception as exc:
            raise _raised(name, exc, f"warmup call {i + 1} of {n}", "nothing was timed") from exc


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


bench.compare = compare  # type: ignore[attr-defined]
