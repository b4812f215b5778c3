"""Low-level timing pieces for :mod:`shapewatch._timing.bench`: statistics, units, compile counts.

``Stats`` summarises timed samples; ``unit_for`` and ``format_seconds`` print
seconds in the unit that fits; ``_compile_count`` counts backend compiles through
``jax.monitoring`` and ``_records`` reads shapewatch's own miss records. The
argument checks, the GC pause and the texts of the host-argument and recompile
warnings are shared by ``bench`` and ``bench.compare``.
"""

from __future__ import annotations

import gc
import numbers
import reprlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from shapewatch._monitor.access import misses
from shapewatch._monitor.jit import is_watched

__all__ = ["Stats", "format_seconds", "unit_for"]

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


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


# --- shared helpers ----------------------------------------------------------------------


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
    return list(misses(fn)) if is_watched(fn) else None


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
