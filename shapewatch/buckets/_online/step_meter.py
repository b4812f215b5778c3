"""``StepMeter``: the cost of a step through asynchronous dispatch, for the online planner (private).

JAX returns from a jitted call before the device has run it; the time shows up where the
loop waits (``float(loss)``, every N steps, the end). A loader that times the consumer from
a yield to the next request sees the dispatch, not the step, in a loop that does not wait.

A compile runs on the host at dispatch, so JAX's compile events time it wherever the loop
waits: a new shape's first batch is not waited for; its compile is the seconds the
consumer's thread spent in JAX's compile stages (trace, lower, compile) between the yield
and the next request, and its compile overlaps the device's finishing earlier steps, as it
does without shapewatch. Its steps are measured on the shape's next batches:
on a few batches of each shape (its first :data:`MEASURE_FIRST`, then one in
:data:`MEASURE_EVERY`), the planner waits for the device itself, from the loader's thread:
``jax.block_until_ready`` on every live array (what the steps dispatched so far produced),
once when it yields the batch (the device is idle: the clock starts on this step alone) and
once when the next one is asked for (the step has run). The batch's time is then the step's
whatever the loop does.
Nothing is added to a step's call (watched or not): the waits are in the loader's ``next()``.
A loop that waits on each step loses no device time to them (the device is idle already); one that
does not loses the overlap of one batch's host work with the device at each, counted in
``waited_s`` and the loader's report. With no JAX in the process (a NumPy step), there is
nothing to wait for: the consumer's own time is the step.

A loader consumed by another thread (a prefetching thread feeding a queue) cannot be
measured so: the time between its batches is the queue's. JAX's compile events say on
which thread a step compiles; when the steps compile only on threads that never ask the
loader for a batch, or the thread asking now compiled nothing while another did (the first
batch taken on the loop's thread, the rest by a prefetching thread), the meter says so, once,
in a warning; from then on nothing it timed plans (the plan is kept, extended only for a
longer example; a ``prior=``'s costs plan where given). What JAX compiles inside a loader's
own ``next()`` (padding JAX arrays) is not counted as a step's compile.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["MEASURE_EVERY", "MEASURE_FIRST", "StepMeter", "loader_work"]

#: Batches of each shape measured first: a compile plus a step, then steps.
MEASURE_FIRST = 3
#: After those, one batch of a shape in this many is measured (costs drift: a warm cache, a busy host).
MEASURE_EVERY = 16


class StepMeter:
    """Decides which batches to measure and waits for the device around them.

    Attributes:
        syncs: waits made (each ``block_until_ready`` on the live arrays).
        waited_s: seconds spent in them (the device finishing work already dispatched).
        unmeasured: why a step could not be measured (the first failure), else None.
    """

    def __init__(self, name: str, clock: Callable[[], float] | None = None) -> None:
        self.name = name
        self.clock = clock if clock is not None else time.perf_counter
        self.syncs = 0
        self.waited_s = 0.0
        self.idle_syncs = 0  # waits that found the device idle already (the loop waits itself)
        self.unmeasured: str | None = None
        self.event_compiles = 0  # new shapes' compiles timed by JAX's events (not waited for)
        self.records = False  # linked compile records time those compiles instead (see CostModel)
        self.jax_seen = False
        self.threads: set[int] = set()  # threads that asked for batches
        self._counts: Counter = Counter()
        self._retries: Counter = Counter()  # measurements of a shape given up for a compile
        # compile events before this loader's first wait are not its steps' (an eval function or
        # a precompile on a worker thread before the loop)
        self._since: int | None = None
        self._unwarned: str | None = None  # a failure not yet warned about (see announce)
        self._beside: bool | None = None  # see beside()
        self.resumed = False  # the state was loaded and no step measured since: the costs are the saved run's

    def wants(self, shape: Any, count: bool = True, before: dict[str, Any] | None = None) -> bool:
        """Whether to measure the next batch of ``shape`` (counts it unless ``count`` is False).
        ``before``: a step's journal (``_distributed.schedulers.Taking.before``): counted once, undone by
        :meth:`unwant`."""
        n = self._counts[shape]
        if before is None:
            self._counts[shape] += count
        elif "meter" not in before:
            self._counts[shape] = n + count; before["meter"] = (shape, n)  # noqa: E702
        return n < MEASURE_FIRST or (n - MEASURE_FIRST) % MEASURE_EVERY == MEASURE_EVERY - 1

    def mark(self) -> tuple[Any, ...]:
        """The counts a charge changes (waits, compiles timed, shapes' measurements), for :meth:`rewind`."""
        return (self.syncs, self.waited_s, self.idle_syncs, self.event_compiles, Counter(self._counts),
                Counter(self._retries))

    def rewind(self, mark: tuple[Any, ...]) -> None:
        """Back to the counts of ``mark`` (:meth:`mark`)."""
        syncs, waited, idle, events, counts, retries = mark
        self.syncs, self.waited_s, self.idle_syncs, self.event_compiles, self._counts, self._retries = (
            syncs, waited, idle, events, Counter(counts), Counter(retries))

    def unwant(self, before: dict[str, Any]) -> None:
        """Take back the count :meth:`wants` made into ``before``."""
        old = before.get("meter")
        if old is not None:
            self._counts[old[0]] = old[1]; del before["meter"]  # noqa: E702

    def again(self, shape: Any) -> bool:
        """Measure the next batch of ``shape`` in place of the last one (its window held a
        compile, so it was not a step); False once ``shape`` was measured again
        :data:`MEASURE_FIRST` times (a step that compiles on every call: take what there is)."""
        if self._retries[shape] >= MEASURE_FIRST:
            return False
        self._retries[shape] += 1
        self._counts[shape] -= 1
        return True

    def _jax(self) -> Any:
        """JAX, when its backends are up (so steps may run asynchronously), else None."""
        self.threads.add(threading.get_ident())
        jax = sys.modules.get("jax")
        if jax is None or not _backends_up():
            return None  # nothing can run asynchronously: the consumer's time is the step
        self.jax_seen = True
        _install()
        if self._since is None:
            self._since = _compiles.seen
        self._check_thread()
        return jax

    def beside(self) -> bool:
        """Whether a new shape's compile (on this thread) can run beside the steps dispatched
        before it: not where JAX runs them on the CPU and this process may use one core only,
        where the compile and the steps take turns on that core (a compile timed there beside
        queued steps took twice its time, and the loop's wall grew). Found on the first miss with
        JAX's backends up (before them nothing runs on a device: the first batches of a loop
        whose first JAX work is its step), and kept."""
        if self._beside is None:
            jax = self._jax()
            if jax is None:
                return True  # not known yet (and nothing is dispatched): asked again on the next miss
            try:
                cpu = jax.default_backend() == "cpu"
                cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
            except Exception:  # noqa: BLE001 - never break the user's loop: assume a device beside
                cpu, cores = False, None
            self._beside = not (cpu and cores == 1)
        return self._beside

    def compile_mark(self) -> float | None:
        """Where this thread's compile seconds stand (JAX's compile events), or None when they
        cannot time a compile (no JAX, no listener, or the step is not measured)."""
        if self._jax() is None or not _compiles.listening or self.unmeasured is not None:
            return None
        return _compiles.seconds.get(threading.get_ident(), 0.0)

    def compiled_since(self, mark: float, count: bool = True) -> float:
        """Seconds this thread spent compiling (trace, lower, compile) since ``mark``; counted
        as a new shape's compile unless ``count`` is False."""
        self.event_compiles += count
        return max(_compiles.seconds.get(threading.get_ident(), 0.0) - mark, 0.0)

    def sync(self) -> bool:
        """Wait for every live array of the process; True when the device was waited for."""
        jax = self._jax()
        if jax is None:
            return False
        t0 = self.clock()
        try:
            arrays = jax.live_arrays()
        except Exception as exc:  # noqa: BLE001 - never break the user's loop
            self._fail(f"jax.live_arrays() raised {type(exc).__name__}: {exc}")
            return False
        try:
            jax.block_until_ready(arrays)
        except Exception:  # noqa: BLE001 - one array deleted meanwhile (donated): wait on the rest
            for a in arrays:
                try:
                    a.block_until_ready()
                except Exception:  # noqa: BLE001, S112
                    continue
        waited = max(self.clock() - t0, 0.0)
        self.syncs += 1
        self.waited_s += waited
        self.idle_syncs += waited < 1e-4
        return True

    def _check_thread(self) -> None:
        """Fail once when the steps compile on another thread than the one asking for batches:
        every compile since this loader started ran on a thread that never asked it for a
        batch, or the thread that asks now has compiled nothing since then while another has
        (the first batch taken on the loop's thread, the rest through a prefetching thread).
        The loaders' own compiles (padding JAX arrays in ``next()``) are not counted."""
        if self.unmeasured is not None:
            return
        threads = _compiles.threads_since(self._since or 0)
        # the asker is among self.threads: a compile only on threads that never asked is a case
        if threads and threading.get_ident() not in threads:
            self._fail("the batches are used on another thread than the one that asks for them "
                       "(a prefetching thread?), so the time between batches is the queue's")

    def _fail(self, why: str) -> None:
        """Give up measuring (``why``); :meth:`announce` warns, once."""
        if self.unmeasured is not None:
            return
        self.unmeasured = self._unwarned = why

    def announce(self) -> None:
        """Warn, once, that the step could not be measured. The loaders call it where a warning
        made an error loses nothing (before a batch is taken, or after the last one was charged),
        never between taking a batch and returning it."""
        why, self._unwarned = self._unwarned, None
        if why is None:
            return
        warnings.warn(
            f"[shapewatch] {self.name}: the step's cost could not be measured ({why}); the plan "
            "is kept as it is (extended only for a longer example): learn it in a run that asks "
            "for the batches on the loop's own thread, save loader.report() and pass it as prior=",
            stacklevel=_user_stacklevel(),
        )

    def how(self) -> str:
        """What the step costs were measured by, in words (for decisions and the report)."""
        if self.unmeasured is not None:
            return (f"not measured ({self.unmeasured}): the plan is kept, extended only for a longer "
                    "example (a prior='s costs plan where given): a blind estimate")
        if not self.syncs and self.resumed:  # nothing measured here yet: not what measured the costs
            return "the run this loader's state was saved from (no step measured since it was loaded)"
        if not self.syncs:
            return ("the consumer's time between batches (no JAX arrays in the process: "
                    "nothing runs asynchronously)")
        how = f"waiting for the device (jax.live_arrays()) at {self.syncs} point(s)"
        if self.event_compiles:
            source = "the step's compile records" if self.records else "JAX's compile events"
            how += f"; {self.event_compiles} new shape(s)' compiles by {source}"
        return how

    def to_dict(self) -> dict[str, Any]:
        return {"how": self.how(), "syncs": self.syncs, "waited_s": self.waited_s,
                "event_compiles": self.event_compiles, "unmeasured": self.unmeasured}


#: JAX's events for the stages of a compile (trace, lower, compile or fetch from a cache).
_STAGES = ("/jax/core/compile/jaxpr_trace_duration",
           "/jax/core/compile/jaxpr_to_mlir_module_duration",
           "/jax/core/compile/backend_compile_duration")


class _CompileEvents:
    """The threads of JAX's recent backend compiles, and each thread's seconds of compiling
    (one listener per process)."""

    def __init__(self) -> None:
        self.seen = 0  # events so far
        self.last: dict[int, int] = {}  # thread -> number of its latest event (one entry a thread)
        self.seconds: dict[int, float] = {}  # thread -> seconds in the stages of compiles
        self.installed = False
        self.listening = False  # the listener was registered
        self.lock = threading.Lock()  # installing the listener
        self.events_lock = threading.Lock()  # recording an event

    def on_duration(self, event: str, duration: float, **_: Any) -> None:
        if event not in _STAGES or _in_loader():
            return  # not a compile, or a loader's own (padding in next()): not a step's
        thread = threading.get_ident()
        with self.events_lock:
            self.seconds[thread] = self.seconds.get(thread, 0.0) + float(duration)
            if event == _STAGES[-1]:
                self.seen += 1
                self.last[thread] = self.seen

    def threads_since(self, since: int) -> set[int]:
        return {t for t, n in list(self.last.items()) if n > since}


_compiles = _CompileEvents()
_F = TypeVar("_F", bound=Callable[..., Any])
#: The code of every loader's ``__next__`` (see :func:`loader_work`).
_LOADER_CODES: set[Any] = set()


def loader_work(method: _F) -> _F:
    """Mark ``method`` (a loader's ``__next__``) as the loader's own work: what JAX compiles in
    it (padding JAX arrays, a source that preprocesses with JAX) is not a step's compile.

    The method is returned as it is, its code noted: a compile event looks for it on the
    stack. A wrapper would run a line of its own after the method returned, and an interrupt
    there would lose the batch the method had just handed out.
    """
    _LOADER_CODES.add(method.__code__)  # type: ignore[attr-defined]
    return method


def _in_loader() -> bool:
    """True while this thread runs a loader's ``next()`` (a compile event's own stack)."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code in _LOADER_CODES:
            return True
        frame = frame.f_back
    return False


def _install() -> None:
    """Listen to JAX's compile durations (once per process; only their thread is kept)."""
    if _compiles.installed:
        return
    with _compiles.lock:
        if _compiles.installed:
            return
        _compiles.installed = True
        try:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(_compiles.on_duration)
        except Exception:  # noqa: BLE001 - no events: a thread behind a queue goes unseen
            return
        _compiles.listening = True


_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # shapewatch/


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning made in the caller at the first frame outside
    shapewatch (the user's ``next()`` or ``for``, however deep the loader's own calls go)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def _backends_up() -> bool:
    """Whether JAX's backends exist (waiting must not start them: that would come before a
    later ``jax.distributed.initialize`` and break it)."""
    try:
        from jax._src import xla_bridge
    except ImportError:  # a JAX without this module: assume they are
        return True
    check = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(check()) if check is not None else bool(getattr(xla_bridge, "_backends", True))
