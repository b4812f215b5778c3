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
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any


class Hung(Exception):
    pass


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
    of the modules ``files``) and counts the line events it saw."""

    def __init__(self, at: int, files: tuple[str, ...]) -> None:
        self.at, self.files, self.lines, self.fired = at, files, 0, 0

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        return self.local if frame.f_code.co_filename.endswith(self.files) else None

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
            if self.lines - 1 == self.at:
                self.fired += 1
                raise KeyboardInterrupt(f"injected at line event {self.at}")
        return self.local


def drain(loader: Any, hook: Interrupter, calls: int = 200) -> list[Any]:
    """Every batch, calling ``next()`` again after each interrupt (bounded in calls)."""
    batches = []
    for _ in range(calls):
        sys.settrace(hook)
        try:
            batches.append(next(loader))
        except KeyboardInterrupt:
            continue
        except StopIteration:
            return batches
        finally:
            sys.settrace(None)
    raise AssertionError(f"the loader did not end within {calls} calls of next()")


def ticking() -> Callable[[], float]:
    """A clock that ticks once per read: the same timings, so the same decisions, on every run."""
    ticks = iter(range(10**9))
    return lambda: float(next(ticks))
