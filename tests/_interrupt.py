"""What the loader tests share to interrupt a loader anywhere and to bound a hang.

:class:`Interrupter` is a trace hook that raises ``KeyboardInterrupt`` at one line event
of shapewatch's loader modules (every line of them can be hit, one run per line);
:func:`drain` takes every batch, calling ``next()`` again after each interrupt;
:func:`alarm` fails a test that runs past its time (a loader that hangs);
:func:`ticking` is a clock that ticks once per read, so that timings, and the decisions
taken from them, are the same on every run.
"""

from __future__ import annotations

import contextlib
import dis
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any


class Hung(Exception):
    pass


def _sweep_share() -> tuple[int, int]:
    """(K, J) of ``SHAPEWATCH_TEST_SWEEP="K:J"``: sweeps take the J-th of each K of their points;
    unset: every point (K=1). CI sets it at each point of the supported window, J another there,
    so that the three points sweep every line event between them, each a third."""
    text = os.environ.get("SHAPEWATCH_TEST_SWEEP", "1:0")
    try:
        k, j = (int(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"SHAPEWATCH_TEST_SWEEP={text!r}: expected K:J, two whole numbers, 0 <= J < K") from None
    if not 0 <= j < k:
        raise ValueError(f"SHAPEWATCH_TEST_SWEEP={text!r}: expected K:J, two whole numbers, 0 <= J < K")
    return k, j


SWEEP_SHARE = _sweep_share()


def share_of(cases: list[Any]) -> list[Any]:
    """This run's share (:data:`SWEEP_SHARE`) of a sweep's cases (each a sweep of one function in a
    job of several processes): every case unless SHAPEWATCH_TEST_SWEEP says otherwise."""
    k, j = SWEEP_SHARE
    return cases[j::k]


def sweep(points: int, every: int = 1, start: int = 0) -> range:
    """The points (line events, after-call points) a test interrupts, of ``points`` counted on a
    clean run: every ``every``-th from ``start``; of those, this run's share (:data:`SWEEP_SHARE`)."""
    k, j = SWEEP_SHARE
    return range(start + j * every, points, every * k)


def buckets_files(*modules: str) -> tuple[str, ...]:
    """The source paths of modules of ``shapewatch.buckets``, named as dotted paths below it
    (``"_loaders.group_by_length"``): what a frame's ``co_filename`` ends with, for the hooks here."""
    return tuple(os.path.join("shapewatch", "buckets", *m.split(".")) + ".py" for m in modules)


@contextlib.contextmanager
def alarm(seconds: int, what: str = "a loader hangs") -> Iterator[None]:
    """Raise :class:`Hung` in the main thread if the block runs past ``seconds``."""
    def hung(signum: int, frame: Any) -> None:
        raise Hung(f"ran past its time limit: {what}")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class Interrupter:
    """A trace hook that raises KeyboardInterrupt at line event ``at`` (counted over every frame
    of the modules ``files``; of their functions named in ``functions`` only, when given) and
    counts the line events it saw."""

    def __init__(self, at: int, files: tuple[str, ...], functions: frozenset[str] | None = None) -> None:
        self.at, self.files, self.functions, self.lines, self.fired = at, files, functions, 0, 0

    @property
    def seen(self) -> int:
        return self.lines

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if self.functions is not None and code.co_name not in self.functions:
            return None
        return self.local if code.co_filename.endswith(self.files) else None

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
            if self.lines - 1 == self.at:
                self.fired += 1
                raise KeyboardInterrupt(f"injected at line event {self.at}")
        return self.local


def drain(loader: Any, hook: Interrupter, calls: int = 200) -> list[Any]:
    """Every batch, calling ``next()`` again after each interrupt (bounded in calls)."""
    return drain_counted(loader, hook, calls)[0]


def ticking() -> Callable[[], float]:
    """A clock that ticks once per read: the same timings, so the same decisions, on every run."""
    ticks = iter(range(10**9))
    return lambda: float(next(ticks))


# -- a KeyboardInterrupt right after a call returns (where Python checks for a pending signal)

_AFTER_CALL: dict[Any, frozenset[int]] = {}


def after_call(code: Any) -> frozenset[int]:
    """Offsets of the instructions that follow a call in ``code`` (where a signal is checked)."""
    if code not in _AFTER_CALL:
        ins = list(dis.get_instructions(code))
        _AFTER_CALL[code] = frozenset(b.offset for a, b in zip(ins, ins[1:]) if a.opname.startswith("CALL"))
    return _AFTER_CALL[code]


class AfterCall:
    """Raise KeyboardInterrupt at the ``at``-th instruction that follows a call in the frames of
    the modules ``files`` (None: only count them), as a signal timer's handler would there."""

    def __init__(self, at: int | None, files: tuple[str, ...]) -> None:
        self.at, self.files, self.seen, self.fired = at, files, 0, False

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode" and not self.fired and frame.f_lasti in after_call(frame.f_code):
            self.seen += 1
            if self.at is not None and self.seen - 1 == self.at:
                self.fired = True
                raise KeyboardInterrupt
        return self.local

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename.endswith(self.files):
            frame.f_trace_opcodes = True
            return self.local
        return None


def drain_after_calls(it: Any, at: int | None, files: tuple[str, ...], calls: int = 400) -> tuple[list[Any], int]:
    """Every batch of ``it`` with one interrupt injected after a call (``at``; None: none), calling
    ``next()`` again after it; (batches, after-call points seen)."""
    return drain_counted(it, AfterCall(at, files), calls)


def drain_counted(it: Any, hook: Any, calls: int, refused: list[str] | None = None) -> tuple[list[Any], int]:
    """As :func:`drain`, counting the hook's points; ``refused``: a list that collects the
    ``ValueError`` s ``next()`` raised (the loop goes on after each), else they propagate."""
    out = []
    for _ in range(calls):
        sys.settrace(hook)
        try:
            out.append(next(it))
        except KeyboardInterrupt:
            continue
        except ValueError as exc:
            if refused is None:
                raise
            refused.append(str(exc))
        except StopIteration:
            return out, hook.seen
        finally:
            sys.settrace(None)
    raise AssertionError(f"the loader did not end within {calls} calls of next()")
