"""The first call and the warm-up, shared by ``bench`` and ``bench.compare``.

Both time the first call (trace, lower, compile and one run) apart from the
steady state, with shapewatch's records splitting its cost when the function is
watched, and both warn through :class:`BenchWarning`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from shapewatch._timing.stats import _compile_count, _last_seq, _records, format_seconds


class BenchWarning(UserWarning):
    """A benchmark measured something other than what it seems to (see ``BenchResult.warnings``)."""


BenchWarning.__module__ = "shapewatch"


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
