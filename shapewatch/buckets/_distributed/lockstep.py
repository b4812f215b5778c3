"""Keeping a loader in step across the processes of a ``jax.distributed`` job.

Every process of a multi-controller job must call the jitted step with the same
shapes, the same number of times. The loaders agree through the key-value store
of JAX's coordination service (the runtime ``jax.distributed.initialize`` starts),
in rounds: each process publishes one small JSON record (the lengths it read, how
many full batches of each bucket it holds, whether its shard is done, and, from
process 0, the measured costs the re-planner uses), reads everyone's, and every
process derives the same plan and the same schedule of buckets from the same
records. A round covers many steps (every full batch that all processes hold);
the loaders exchange again only when the schedule runs out or a re-plan is due.

A record may be an error: a process whose source raised publishes it before
raising its own error, and the others raise :class:`LoaderProcessError` naming it. A
process that publishes nothing within ``timeout_s`` (it died, or stopped iterating) is
named too, and so is a key-value store that cannot be reached (process 0, which hosts
it, died): every call into the store is guarded, and none raises JAX's runtime error. A dead
process 0 ends every other process anyway, moments later: JAX's own client, whose error-polling
call to the service fails, logs a fatal error (its default missed-heartbeat callback, which
``jax.distributed.initialize`` does not let a caller replace; neither ``jax_enable_recoverability``
nor the heartbeat timeout changes this, jax 0.5.0 to 0.12). docs/how-to/many-processes.md says
where.

Version notes: ``jax._src.distributed.global_state.client`` has ``key_value_set``,
``blocking_key_value_get`` (milliseconds) and ``key_value_delete`` on every jax
from 0.5.0 to 0.12; nothing else of it is used.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
import warnings
from collections import Counter
from typing import Any

import numpy as np

from .._online.cost_model import STEPS_TO_SETTLE, CostModel
from .._online.step_meter import _user_stacklevel

__all__ = ["AgreedCosts", "LoaderProcessError", "Session", "join", "loader_disagreements", "loader_history"]

#: Seconds a process waits for the others' record of a round (``SHAPEWATCH_LOADER_TIMEOUT``).
TIMEOUT_S = 300.0
#: The longest timeout accepted: the store's wait is in milliseconds, a 32-bit int.
MAX_TIMEOUT_S = (2**31 - 1) / 1000
_ids = itertools.count()
_lock = threading.Lock()
#: loader name -> per-step (bucket, rows) shapes yielded by the multi-process loaders of this
#: process, oldest first (read by ``check_hosts_agree`` to name a loader disagreement).
_HISTORY: dict[str, list[tuple[int, ...]]] = {}


class LoaderProcessError(RuntimeError):
    """Another process of the job failed (its source raised, or it sent nothing in time)."""


LoaderProcessError.__module__ = "shapewatch"


def _state() -> Any:
    """jax.distributed's global state when a job of 2+ processes is initialised, else None."""
    if "jax" not in sys.modules:  # nothing imported jax: no distributed job either
        return None
    from jax._src import distributed

    state = distributed.global_state
    if getattr(state, "client", None) is None or (state.num_processes or 1) < 2:
        return None
    return state


def join(name: str, across_processes: bool) -> tuple[Session | None, list | None]:
    """For a new loader: its :class:`Session` (None with one process or ``across_processes=False``)
    and, in a job of several processes, the list its shapes go to, step by step (else None)."""
    state = _state()
    if state is None:
        return None, None
    with _lock:
        n = next(_ids)
    history = _HISTORY.setdefault(f"{name}#{n}", [])
    if not across_processes:
        return None, history
    return Session(state.client, int(state.process_id), int(state.num_processes), f"{name}#{n}"), history


def loader_timeout() -> float:
    """Seconds a process waits for the others' record: ``SHAPEWATCH_LOADER_TIMEOUT`` when it is a
    number of seconds from 0.001 (the store waits in whole milliseconds) to :data:`MAX_TIMEOUT_S`,
    else (with a warning) :data:`TIMEOUT_S`."""
    raw = os.environ.get("SHAPEWATCH_LOADER_TIMEOUT")
    if raw is None:
        return TIMEOUT_S
    try:
        value = float(raw.strip())
    except ValueError:
        value = float("nan")
    if not (0.001 <= value <= MAX_TIMEOUT_S):  # NaN, inf, 0, negatives and under a millisecond fail
        warnings.warn(
            f"[shapewatch] SHAPEWATCH_LOADER_TIMEOUT={raw!r} is not valid: use a number of seconds "
            f"from 0.001 to {MAX_TIMEOUT_S:,.0f}. Ignoring it (the loaders wait {TIMEOUT_S:g} s "
            "for the other processes)", stacklevel=_user_stacklevel())
        return TIMEOUT_S
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0][:200] if text.strip() else type(exc).__name__


#: What JAX's runtime error says when the key-value store cannot be reached (its type and
#: wording differ by jax version; a read that ends at its deadline says DEADLINE_EXCEEDED).
_UNREACHABLE = ("UNAVAILABLE", "socket closed", "connection", "failed to connect", "CANCELLED",
                "broken pipe", "ABORTED")


def _unreachable(exc: BaseException) -> bool:
    """True when ``exc`` says the store cannot be reached (not a read that ran out of time)."""
    text = str(exc).lower()
    return "deadline_exceeded" not in text and any(word.lower() in text for word in _UNREACHABLE)


class Session:
    """One loader's rounds of agreement (its id is the same on every process: loaders are
    created in the same order everywhere).

    Every call into the key-value store is guarded: a store that cannot be reached (process 0,
    which hosts it, died, or the job shut down) raises :class:`LoaderProcessError` naming it.
    """

    def __init__(self, client: Any, me: int, count: int, name: str) -> None:
        self.client, self.me, self.count, self.name = client, me, count, name
        self.round = 0
        self.steps = 0  # steps yielded (the same on every process)
        self.timeout_s = loader_timeout()
        self.exchanges = 0  # rounds of agreement, and the seconds spent in them (waits included)
        self.wait_s = 0.0
        #: the round an interrupt left open: (round, this process's record, the records read)
        self._open: tuple[int, dict[str, Any], dict[int, dict[str, Any]]] | None = None

    def _key(self, r: int, p: int) -> str:
        return f"shapewatch/loader/{self.name}/{r}/{p}"

    def _loader(self) -> str:
        return self.name.split("#")[0]

    def _gone(self, what: str, exc: BaseException) -> LoaderProcessError:
        """The key-value store cannot be reached: process 0 (its host) died, or the job ended."""
        return LoaderProcessError(
            f"[shapewatch] {self._loader()}: the job's key-value store (hosted by process 0 of "
            f"{self.count}, the coordinator) could not be reached to {what} at step {self.steps} "
            f"(seen from process {self.me}): process 0 died or shut the job down "
            f"({_first_line(exc)}); fix: look at process 0's output; every process must iterate "
            "the loader to the end")

    def _set(self, key: str, value: str, what: str) -> None:
        try:
            self.client.key_value_set(key, value)
        except Exception as exc:  # noqa: BLE001 - UNAVAILABLE, socket closed: its type differs by jax version
            if "ALREADY_EXISTS" in str(exc):  # published before an interrupt (the round goes on)
                return
            raise self._gone(what, exc) from None

    def _get(self, r: int, p: int) -> dict[str, Any]:
        try:
            raw = self.client.blocking_key_value_get(self._key(r, p), int(self.timeout_s * 1000))
        except Exception as exc:  # noqa: BLE001 - DEADLINE_EXCEEDED, or the store is gone
            if _unreachable(exc):
                raise self._gone(f"read process {p}'s record", exc) from None
            raise LoaderProcessError(
                f"[shapewatch] {self._loader()}: process {p} of {self.count} sent nothing "
                f"within {self.timeout_s:g} s at step {self.steps} (seen from process {self.me}): it "
                f"died, hangs, or stopped iterating this loader ({_first_line(exc)}); fix: look at "
                f"process {p}'s output; every process must iterate the loader to the end") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise LoaderProcessError(
                f"[shapewatch] {self._loader()}: process {p} of {self.count} sent a record that is not "
                f"JSON at step {self.steps} (seen from process {self.me}): another program uses the "
                "key-value store's shapewatch/loader/ keys; fix: keep them for shapewatch") from None

    def exchange(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """Publish ``record``, return every process's record of this round (index = process).

        An interrupt (``KeyboardInterrupt``) in it leaves the round open: the next call goes on with
        that round (its record published once, the others' read once each), whatever record it is
        given; the loaders call it again at the same point of their round (``_distributed.schedulers.Lockstep``
        keeps what a round exchanged already).

        Raises:
            LoaderProcessError: another process published an error, or nothing in time, or the
                key-value store cannot be reached.
        """
        if self._open is None:  # one line, no call: an interrupt lands before or after both
            self._open = (self.round, record, {}); self.round += 1; self.exchanges += 1  # noqa: E702
        assert self._open is not None
        r, mine, got = self._open
        start = time.perf_counter()
        if self.me not in got:
            self._set(self._key(r, self.me), json.dumps(mine), "publish this process's record")
            got[self.me] = mine
        for p in range(self.count):
            if p not in got:
                got[p] = self._get(r, p)
        out = [got[p] for p in range(self.count)]
        for p, rec in enumerate(out):
            if p != self.me and rec.get("error"):
                self._open = None  # the round ends with the error: next() again goes on with a new one
                raise LoaderProcessError(
                    f"[shapewatch] {self._loader()}: process {p} of {self.count} failed at step "
                    f"{self.steps} (seen from process {self.me}): {rec['error']}; this process stops "
                    "with it so that no process waits in a collective; fix the error on process "
                    f"{p} (calling next() again on every process goes on with what each holds)")
        if r:  # everyone has read round r - 1 before publishing round r
            try:
                self.client.key_value_delete(self._key(r - 1, self.me))
            except Exception:  # noqa: BLE001 - only tidiness: the store is dropped with the job
                pass
        self.wait_s += time.perf_counter() - start
        # the round is closed in the line that returns its records (the caller keeps them in the
        # line that called): an interrupt before leaves it open, to be read again
        self._open = None; return out  # noqa: E702

    def fail(self, exc: BaseException) -> None:
        """Tell the others this process's source (or example) raised ``exc``; they raise too.

        Never raises: the caller raises ``exc`` itself, this process's own error, first (a
        store that cannot be reached only means the others learn of it by their timeout).
        """
        # a round an interrupt left open and this process has not published in: the error goes there
        r = self._open[0] if self._open is not None and self.me not in self._open[2] else self.round
        try:
            self.client.key_value_set(self._key(r, self.me),
                                      json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000]}))
        except Exception:  # noqa: BLE001 - the store is gone: this process's own error goes first
            pass
        if r == self.round:
            self.round += 1
        self._open = None


def histogram(lengths: list[int]) -> list[list[int]]:
    """``[[length, count], ...]``: lengths as a JSON-ready histogram."""
    return [[int(k), int(v)] for k, v in sorted(Counter(lengths).items())]


def lengths_of(records: list[dict[str, Any]], key: str = "lengths") -> tuple[np.ndarray, np.ndarray]:
    """All processes' histograms of a round merged: (lengths, counts)."""
    c: Counter = Counter()
    for rec in records:
        for k, v in rec.get(key, ()):
            c[k] += v
    keys = sorted(c)
    return np.array(keys, np.int64), np.array([c[k] for k in keys], np.int64)


class AgreedCosts(CostModel):
    """The online planner's costs as every process sees them, in step across processes: measuring
    goes on as in a :class:`CostModel` (this process's own); the answers that decisions read
    (compile seconds, step model, the points it was fitted to, and the step seconds modelled from
    it) are the ones agreed at the last round: process 0's measurements, broadcast to all.

    Made from the planner's own model (taking over what it measured) by the loader's scheduler
    when the loader is made. The agreed answers live in a slot, not among the model's fields, so
    that the model's measurements are saved and checked as one process's are (``agreed`` apart).
    """

    __slots__ = ("agreed",)

    def __init__(self, local: CostModel) -> None:  # noqa: D107 - takes over ``local``'s measurements
        vars(self).update(vars(local))
        self.agreed: dict[str, Any] = {}
        self.agree(self.measured())

    def measured(self) -> dict[str, Any]:
        """This process's own measurements (what process 0 publishes): the compile seconds, the step
        model and the points it was fitted to."""
        model = CostModel.step_model(self)
        x, y = CostModel.step_points(self)
        return {"compile_seconds": CostModel.compile_seconds(self),
                "step_model": None if model is None else [float(v) for v in model],
                "step_points": [[float(v) for v in x], [float(v) for v in y]],
                "step_counts": [int(n) for n in CostModel.step_counts(self)]}

    def agree(self, costs: dict[str, Any]) -> None:
        """Take the costs agreed at a round (process 0's :meth:`measured`; a state saved before the
        points were agreed has none: they come with the next round), with ``"how"``: process 0's
        words for what measured them (:meth:`AutoPlanner.measured`), which every process's decisions
        quote: the same decisions, word for word, where a process's own meter says otherwise (its
        count of waits, or a step it could not measure)."""
        model, points, counts = costs.get("step_model"), costs.get("step_points"), costs.get("step_counts")
        self.agreed = {"compile_seconds": costs.get("compile_seconds"),
                       "step_model": None if model is None else tuple(model),
                       "step_points": None if points is None else [list(points[0]), list(points[1])],
                       "step_counts": None if counts is None else list(counts),
                       "how": costs.get("how")}

    def compile_seconds(self) -> float | None:
        return self.agreed["compile_seconds"]

    def step_model(self) -> tuple[float, float, float] | None:
        return self.agreed["step_model"]

    def step_points(self) -> tuple[np.ndarray, np.ndarray]:
        """The points process 0's step model was fitted to (what the planner's and the chooser's
        decisions read besides the model: the same on every process)."""
        points = self.agreed.get("step_points")
        if not points:
            return np.zeros(0), np.zeros(0)
        return np.asarray(points[0], float), np.asarray(points[1], float)

    def step_counts(self) -> np.ndarray:
        """The steps each agreed point rests on (process 0's; a state saved before they were
        agreed has none: each point counts as settled)."""
        counts = self.agreed.get("step_counts")
        if counts is None or len(counts) != self.step_points()[0].size:
            return np.full(self.step_points()[0].size, STEPS_TO_SETTLE, np.int64)
        return np.asarray(counts, np.int64)

    def how(self) -> str | None:
        """Process 0's words for what measured the costs agreed (None before a round gave them)."""
        return self.agreed.get("how")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.agreed.items() if k != "how"}


def loader_history() -> dict[str, list[list[int]]]:
    """Per loader made in a job of several processes (``group_by_length#0``, in the order they
    were made): the shapes it yielded, step by step (``[rows, bucket]``, or ``[bucket]``)."""
    return {k: [list(x) for x in v] for k, v in _HISTORY.items()}


def loader_disagreements(everyone: dict[int, dict[str, list[list[int]]]]) -> list[str]:
    """A line per loader whose processes yielded different shapes or step counts: the first
    step where they part, and what each process yielded there."""
    lines = []
    procs = sorted(everyone)
    for name in sorted({k for h in everyone.values() for k in h}):
        runs = {p: everyone[p].get(name, []) for p in procs}
        longest = max(len(r) for r in runs.values())
        for step in range(longest):
            seen = {p: tuple(r[step]) if step < len(r) else None for p, r in runs.items()}
            if len(set(seen.values())) > 1:
                what = "; ".join(f"process {p}: {'nothing (it had stopped)' if v is None else _shape(v)}"
                                 for p, v in seen.items())
                counts = ", ".join(f"p{p}: {len(r)}" for p, r in runs.items())
                lines.append(f"  loader {name}: processes part at step {step}: {what} (steps so far {counts})")
                break
    return lines


def _shape(v: tuple[int, ...]) -> str:
    return f"rows {v[0]} x length {v[1]}" if len(v) == 2 else f"length {v[0]}"
