"""The across-processes layer a bucketing loader owns: its scheduler, chosen once when the loader
is made.

:class:`LocalScheduler` (one process, or ``across_processes=False``) agrees nothing: it is the
online planner's call sequence around a step, written here once for every loader and mode
(``request`` when ``next()`` is called; ``covers_compile`` and ``covered`` where a batch of a
compiled shape may go before a new shape's compile; ``wait_before`` before the batch is built,
``yielded`` after, both before the loader lets go of it, so that an interrupt while waiting for
the device loses nothing).

A step's batch, once built, is a :class:`Taking` until the loader lets go of it: every part that
counts the step (the planner and its meter, the scheduler's schedule, the loader's counts) commits
it in one line that writes what it replaced into the taking's ``before``, and does nothing for a
taking it committed already. So an interrupt (Ctrl-C) anywhere in between leaves each part before
or after the step, never in the middle nor twice: the next ``next()`` finishes the taking (and
yields its batch), ``state_dict()`` takes it back (each part restores ``before``) and saves the
loader as it was before the step. The loader's ``__next__`` lets go of the batch in its own last
line (``del items[where]; return out``): no call returns after the batch left the loader's state.

:class:`Lockstep` adds the agreement with the other processes of a ``jax.distributed`` job, in
rounds over the key-value store (``_distributed.lockstep.Session``): publishing the lengths read since the
last round, one plan from every process's lengths and process 0's measured costs, sharing a
structure with a process that read nothing, the steps agreed and not taken, and their state. Each
loader's rounds are a subclass: ``_distributed.group_by_length_lockstep.GroupByLengthLockstep`` and
``_distributed.bucketed_lockstep.BucketedLockstep``. A scheduler holds the agreement, not the loader's
examples: the loader calls it with what it holds (lengths, counts) and moves its own examples.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from .._checks import fail
from .._online.step_meter import loader_work
from .lockstep import AgreedCosts, LoaderProcessError, Session, histogram, lengths_of

__all__ = ["LocalScheduler", "Lockstep", "Taking", "TakesSteps", "decode", "encode", "last"]


class Taking:
    """A step's batch, built, that the loader has not let go of yet (see the module docstring).

    Attributes:
        out: the batch.
        bucket: its shape's length (the planner's and the schedule's key).
        units: examples (or batches) of this process in it.
        measure: whether the planner measures its step.
        rows: the batch's rows, for the loader's count of shapes.
        truncated: examples cut to ``bucket``, for the loader's count.
        held: ``(items, where)``: the loader's list that holds the batch's examples (or batch) and
            the slice of it they are: ``del items[where]`` lets go of them, with no call (an empty
            slice of an empty list where the batch is held nowhere, padding only).
        size: the length of a batch read whole (``bucketed``), None otherwise.
        before: part name -> what that part's commit replaced (a part is committed iff its name
            is here).
    """

    __slots__ = ("out", "bucket", "units", "measure", "rows", "truncated", "held", "size", "before")

    def __init__(self, out: Any, bucket: int, units: int, *, measure: bool = True, rows: int | None = None,
                 truncated: int = 0, held: tuple[list[Any], slice] | None = None, size: int | None = None) -> None:
        self.out, self.bucket, self.units, self.measure = out, bucket, units, measure
        self.rows, self.truncated, self.size = rows, truncated, size
        self.held = ([], slice(0, 0)) if held is None else held
        self.before: dict[str, Any] = {}


class TakesSteps:
    """``__next__`` of every loader, written once: the next batch built and made a :class:`Taking`
    (``_next_batch``, StopIteration at the end), unless an interrupt held one back half taken;
    committed by every part that counts it (``_commit``); then let go of in its last line, with
    no call after the batch left the loader's state."""

    _taking: Taking | None

    _scheduler: Any  # LocalScheduler, or a lockstep one in a job
    _skipping: Any  # what a load_state_dict read to skip it (reading.Skipping); None once next() was called

    def _next_batch(self) -> None:
        """The next batch, built and made ``self._taking`` (StopIteration at the end): the planner's
        request, then this process's batch alone or the step agreed with the other processes."""
        steps = self._scheduler
        steps.request()
        if steps.across:
            self._next_in_step()
        else:
            self._next_alone()

    def _next_alone(self) -> None:
        raise NotImplementedError

    def _next_in_step(self) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

    @loader_work
    def __next__(self) -> Any:
        if self._taking is None:  # else an interrupt held back a batch half taken: it goes first
            if self._skipping is not None:  # the first next(): not after a load_state_dict left unfinished
                self._skipping.check("next()")
                self._skipping = None
            self._next_batch()
        self._commit()
        taking = self._taking
        assert taking is not None
        # the batch leaves the loader's state in the line that returns it, with no call between:
        # a signal is checked after a call returns
        items, where = taking.held; self._taking = None; del items[where]; return taking.out  # noqa: E702


def last(items: list[Any]) -> tuple[list[Any], slice]:
    """``Taking.held`` for the last of ``items``."""
    return items, slice(len(items) - 1, len(items))


class LocalScheduler:
    """One process (or ``across_processes=False``): the planner's call sequence, no agreement.

    Attributes:
        planner: the loader's online planner (``AutoPlanner``), or None with a fixed or learned plan.
        across: False: the loader steps on its own.
    """

    across = False
    #: the loader's held items whose lengths went out to the other processes (in step: the first
    #: ``sent``; the loader's move of them sets it back to 0 in the same assignment): none here
    sent = 0

    def __init__(self, planner: Any) -> None:
        self.planner = planner
        #: the decisions made (:meth:`once`) that the loader has not acted on yet, each with the
        #: mark it began from: a ``next()`` called again after an interrupt takes the answer made
        #: rather than deciding again (or, cut short inside it, decides again from its mark)
        self._round: dict[str, Any] = {}

    @property
    def processes(self) -> list[int] | None:
        """``[this process, the process count]`` when in step across processes, else None."""
        return None

    def request(self) -> None:
        """``next()`` was called: the planner charges the time since the last batch."""
        if self.planner is not None:
            self.planner.request()

    def cover(self, ready: list[tuple[int, Any, str]]) -> tuple[list[tuple[int, Any, str]], bool]:
        """``ready`` (``(bucket, examples, kind)``, next last) with a full batch of a compiled shape
        moved last where the next batch's shape is new and the device idle (see the planner's
        ``covers_compile``), and whether the next batch is measured (not when it was moved). The
        caller keeps the list returned in one assignment: an interrupt leaves its own as it was."""
        planner = self.planner
        if planner is None or not ready or not planner.covers_compile(ready[-1][0]):
            return ready, True
        # full batches only: a short one may be dropped, or (remainder='keep') be a new shape
        compiled = [i for i, (b, _, kind) in enumerate(ready) if b in planner.compiled and kind == "full"]
        if compiled:  # the device gets steps to run while the new shape compiles
            i = compiled[-1]
            ready = [*ready[:i], *ready[i + 1:], ready[i]]
        planner.covered(ready[-1][0] if compiled else None)
        return ready, not compiled

    def once(self, what: str, do: Callable[[], Any], mark: Callable[[], Any] | None = None,
             rewind: Callable[[Any], None] | None = None) -> Any:
        """``do()``'s answer (a decision that may change state besides its answer: the planner's
        plan, the chooser's weighing), made once: a call again after an interrupt inside it rewinds
        first to ``mark()`` as the decision found it (made again from there, recorded once); after
        it, the answer made is returned until the loader acted on it (:meth:`done`; :meth:`acted`:
        until the batch is taken; in step, until the round's steps are agreed). An exception from
        ``do()`` ends the decision: the next is new."""
        if what not in self._round:
            if mark is not None and rewind is not None:
                rewind(self._round.setdefault(f"{what} from", mark()))
            try:
                self._round[what] = do()
            except Exception:
                self.done(what)
                raise
        return self._round[what]

    def done(self, *what: str) -> None:
        """The loader acted on the answers of ``what`` (:meth:`once`): the next are new decisions
        (one assignment: an interrupt lands before or after)."""
        gone = {*what, *(f"{w} from" for w in what)}
        self._round = {k: v for k, v in self._round.items() if k not in gone}

    def acted(self, what: str) -> None:
        """The loader acted on ``what``'s answer (:meth:`once`), a decision made once a batch: kept,
        as None (nothing more to act on), until the batch is taken (:meth:`take`), so that
        ``next()`` called again after an interrupt neither decides again (its reads since may
        say otherwise: the run not interrupted decides that at the next batch) nor acts again
        (a later move of the same ``next()`` may have changed what it set)."""
        self._round[what] = None

    def unfinished(self, strategy: str | None = None, plan: Any = None) -> tuple[Any, Any]:
        """``(the planner's mark, the chooser's mark)`` (:meth:`once`) of the decisions begun and
        not acted on (an interrupt inside or after them), each None where there is none: the
        planner's first plan (the loader's ``plan`` still None) or a re-plan made and not taken
        (not ``plan``), the strategy weighed for a switch the loader (on ``strategy``) has not
        made, the first start not taken. A state saved then holds them as they began: the loader
        resumed from it makes them again, as ``next()`` called again would."""
        journal, planner, chooser = self._round, None, None
        if "first plan from" in journal and plan is None:
            planner = journal["first plan from"]
        for what in ("replan", "forced replan"):  # not made, or made and not taken
            if f"{what} from" in journal and (what not in journal or journal[what] not in (None, plan)):
                planner = journal[f"{what} from"]
        choice = journal.get("choice", ())  # () not made; None acted on
        if "choice from" in journal and (choice == () or choice is not None and choice[0] != strategy):
            chooser = journal["choice from"]
        if "start from" in journal and plan is None:
            chooser = journal["start from"]
        return planner, chooser

    def emit(self, bucket: int, build: Callable[..., Any], *args: Any, measure: bool = True) -> Any:
        """``build(*args)`` the step's batch of ``bucket``, the wait for the device first (an interrupt
        there leaves the loader as it was). Nothing is counted: the loader makes the batch a
        :class:`Taking` and calls :meth:`take`."""
        if self.planner is not None:
            self.planner.wait_before(bucket, measure)
        return build(*args)

    def take(self, taking: Taking) -> None:
        """Commit ``taking``'s step here (the planner is told the batch goes out; a part committed
        already is left as it is). The loader counts it, then lets go of the batch."""
        if self.planner is not None:
            self.planner.yielded(taking.bucket, taking.units, taking.measure, taking.before)
        self.ended()

    def ended(self) -> None:
        """The batch this ``next()`` decided for is gone (taken, left out on an error, or a state
        loaded in its place): on one process the next batch makes its own decisions (in step, a
        round's end, or the state's load, clears them)."""
        if not self.across:
            self._round = {}

    def untake(self, taking: Taking) -> None:
        """Take back what :meth:`take` committed of ``taking`` (``state_dict()`` of a loader an
        interrupt left with a batch half taken)."""
        if self.planner is not None:
            self.planner.unyielded(taking.before)


class Lockstep(LocalScheduler):
    """One loader's agreement with the other processes of the job (see the module docstring).

    Attributes:
        session: the rounds over the key-value store (``_distributed.lockstep.Session``).
        schedule: the steps agreed and not taken yet, next first (the same on every process).
        order: the generator that orders each round's steps (the same on every process).
        used: units (examples or batches) this process yielded.
        sent: the loader's held items whose lengths went out already (the first ``sent``).
        size: the length of this process's source, None for a stream.
    """

    across = True

    def __init__(self, session: Session, planner: Any, *, size: int | None, order: np.random.Generator) -> None:
        super().__init__(planner)
        self.session = session
        self.schedule: list[Any] = []
        self.order = order
        self.used = 0
        self.sent = 0
        self.size = size
        if planner is not None:  # decisions read process 0's costs, broadcast to every process
            planner.costs = AgreedCosts(planner.costs)
        #: what this round did so far (its exchanges' records, its plan, its order's draw), kept
        #: until its steps are agreed: a round called again after an interrupt takes them rather
        #: than exchanging (or drawing) again, which would put this process a round apart
        self._round: dict[str, Any] = {}

    def _exchange(self, what: str, record: dict[str, Any]) -> list[dict[str, Any]]:
        """Every process's record of this round's ``what``: exchanged once, kept until agreed."""
        if what not in self._round:
            self._round[what] = self._records_of(record)
        return self._round[what]

    def _records_of(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """``session.exchange(record)``; where another process failed, the round ends with it."""
        try:
            return self.session.exchange(record)
        except LoaderProcessError:
            self._round = {}
            raise

    def done(self, *what: str) -> None:
        """In step, a round's decisions are kept until its steps are agreed (the round ends)."""

    def acted(self, what: str) -> None:
        """In step, a round's decisions are kept as made until its steps are agreed."""

    def unfinished(self, strategy: str | None = None, plan: Any = None) -> tuple[Any, Any]:
        """``(the planner's mark, the chooser's mark)`` (:meth:`once`, :meth:`replan`) of the
        decisions this round began and did not finish, each None where there is none: the plan
        not made (or, the first round, not taken: the loader's ``plan`` still None), the strategy
        not weighed, or weighed for a switch the loader (on ``strategy``) has not made, or the
        first round's start not taken. A state saved then holds them as the round found them: the
        job resumed from it starts its rounds afresh (a round's journal is not saved) and makes
        them again, as this round called again would, where the state as it stands would hold
        them half made."""
        journal = self._round
        first = plan is None  # the first round: its plan (and start) count once the loader holds its plan
        planner = journal.get("planner") if "plan" not in journal or first else None
        chooser = None
        if "choice from" in journal and ("choice" not in journal or journal["choice"][0] != strategy):
            chooser = journal["choice from"]
        if "start from" in journal and first:
            chooser = journal["start from"]
        return planner, chooser

    def permutation(self, n: int) -> np.ndarray:
        """The round's order of ``n`` steps, from :attr:`order`: drawn once a round (a call again
        after an interrupt draws it from the same state)."""
        if "order" in self._round:
            self.order.bit_generator.state = self._round["order"]
        else:
            self._round["order"] = self.order.bit_generator.state
        return self.order.permutation(n)

    @property
    def me(self) -> int:
        return self.session.me

    @property
    def processes(self) -> list[int] | None:
        return [self.session.me, self.session.count]

    @property
    def steps(self) -> int:
        """Steps yielded so far (the same on every process)."""
        return self.session.steps

    def fail(self, exc: BaseException) -> None:
        """This process's source (or one of its items) raised ``exc``: the others raise too, and
        the round ends with it."""
        self.session.fail(exc)
        self._round = {}

    # -- a round
    def publish(self, lengths: list[int], record: dict[str, Any]) -> list[dict[str, Any]]:
        """Publish ``record`` with the lengths of the loader's held items not sent yet (``lengths``:
        every held item's, in order), this process's progress and, from process 0, the planner's
        measurements; return every process's record of this round."""
        if "publish" not in self._round:  # else the round was interrupted after it: its records
            rec = {**record, "lengths": histogram(lengths[self.sent:]), "used": self.used, "size": self.size}
            if self.planner is not None and self.me == 0:
                rec["planner"] = self.planner.shared()
            n = len(lengths)
            # one line: the records kept and the lengths counted as sent, with no call after the
            # exchange returns (an interrupt before leaves its round open, after changes nothing)
            self._round["publish"] = self._records_of(rec); self.sent = n  # noqa: E702
        return self._round["publish"]

    def kept(self, count: int) -> None:
        """The loader left out its held items refused at this round (on every process alike) and
        kept the first ``count``, whose lengths went out already: the round ends here."""
        self.sent, self._round = count, {}

    @staticmethod
    def lengths(records: list[dict[str, Any]]) -> list[int]:
        """Every process's new lengths of a round, one per item."""
        lengths, counts = lengths_of(records)
        return np.repeat(lengths, counts).tolist()

    def plan(self, records: list[dict[str, Any]], current: Any, held: list[int]) -> Any:
        """The online plan of a round, the same on every process: every process's new lengths and
        process 0's costs go in; the job's horizon per process is the mean of the known sizes (a
        stream: as many again as seen). Returns the plan to use, or None to keep ``current``.

        Raises:
            ValueError: as the planner does at the ``max_shapes`` cap, on every process alike: the
                lengths above ``current`` are taken back from the planner, and the loader leaves out
                its held items above ``current.max_length`` (``held``: every held item's length; the
                kept ones' went out already).
        """
        self.agree(records)
        return self.replan(records, current, held)

    def agree(self, records: list[dict[str, Any]]) -> None:
        """The planner takes a round's inputs, the same on every process: every process's new
        lengths, process 0's costs, the job's horizon per process (the mean of the known sizes; a
        stream: as many again as seen) and progress."""
        planner = self.planner
        assert planner is not None
        lengths, counts = lengths_of(records)
        sizes = [r.get("size") for r in records]
        n = len(records)
        seen = float(planner.observer.total + counts.sum())
        horizon = (sum(sizes) / n if all(x is not None for x in sizes)
                   else (seen + max(seen, planner.unit_size * n)) / n)
        lead = records[0].get("planner")
        planner.agree(np.repeat(lengths, counts).tolist(), None if lead is None else lead,
                      horizon, sum(r["used"] for r in records) / n, self._round, processes=n)

    def replan(self, records: list[dict[str, Any]], current: Any, held: list[int]) -> Any:
        """:meth:`plan` once the round's inputs are agreed (:meth:`agree`); once a round (a call
        again after an interrupt returns the plan made)."""
        if "plan" in self._round:
            return self._round["plan"]
        planner = self.planner
        assert planner is not None
        lengths, counts = lengths_of(records)
        # the planner as the round found it, kept in the round: a call again after an interrupt
        # inside the planner's own computation plans again from there (its decision recorded once,
        # its periodic re-plan still due), the same plan as on the other processes
        planner.rewind(self._round.setdefault("planner", planner.mark()))
        if current is None:
            if not planner.observer.total:  # nothing read anywhere: any plan will do
                planner.seen([1])
            plan = planner.plan(None)
            self._round["plan"] = plan
            return plan
        force = bool(lengths.size) and int(lengths[-1]) > current.max_length
        # whether a plan kept is the periodic re-plan's (a job's rounds grow longer on it), from
        # the planner as the round found it (a call again after an interrupt keeps the first answer)
        self._round.setdefault("periodic", not force and planner.periodic())
        try:
            plan = planner.plan(current, force=force)
            self._round["plan"] = plan
            return plan
        except ValueError:  # the round ends here, on every process alike
            top = current.max_length
            over = np.repeat(lengths, counts)
            planner.forget(over[over > top].tolist())
            self.sent, self._round = sum(1 for x in held if x <= top), {}
            raise

    def share(self, records: list[dict[str, Any]], flag: str, mine: Any, send: Callable[[], Any]) -> Any:
        """Where a process holds no ``flag`` item (it read nothing yet) and another does, the lowest
        process holding one sends ``send()`` (one more exchange, the same on every process); returns
        ``mine``, or (this process had none) what was sent, None where it could not be pickled."""
        holders = [p for p, r in enumerate(records) if r[flag]]
        if not holders or len(holders) == len(records):
            return mine
        blob = encode(send()) if self.me == holders[0] and f"share {flag}" not in self._round else None
        got = self._exchange(f"share {flag}", {flag: blob})[holders[0]][flag]
        return decode(got) if mine is None and got else mine

    def check_padding(self, have: bool, loader: str, what: str, plural: str) -> None:
        """Raise when this process must yield padding only and never read a ``what`` (``have``
        False): it cannot know the structure."""
        if not have:
            raise fail(
                f"{loader}: process {self.me} read no {what} yet and must yield a batch of padding only at "
                f"step {self.session.steps}: it cannot know the {plural}' structure; fix: give every process "
                f"at least one {what}")

    def take(self, taking: Taking) -> None:
        """Commit ``taking``, the step agreed first: the planner's part, then the schedule's."""
        super().take(taking)
        self.took(taking)

    def untake(self, taking: Taking) -> None:
        self.untook(taking)
        super().untake(taking)

    def took(self, taking: Taking) -> None:
        """The step agreed first leaves the schedule with ``taking.units`` of this process's own
        (one line; nothing where it left already)."""
        before = taking.before
        if "step" not in before:
            old = (self.schedule[0], self.used, self.session.steps)
            del self.schedule[0]; self.used += taking.units; self.session.steps += 1; before["step"] = old  # noqa: E702

    def untook(self, taking: Taking) -> None:
        """The step :meth:`took` committed back at the head of the schedule."""
        old = taking.before.get("step")
        if old is not None:
            self.schedule[:0] = old[:1]; self.used, self.session.steps = old[1:]; del taking.before["step"]  # noqa: E702

    # -- state (``state_dict()``'s ``"lockstep"``; checked by ``_loaders.bucket_state``)
    def state_dict(self) -> dict[str, Any]:
        # the order as the round found it: a round an interrupt left open after its draw draws again
        order = self._round.get("order", self.order.bit_generator.state)
        return {"processes": self.processes, "steps": self.session.steps, "schedule": self.schedule,
                "order": order, "used": self.used, "sent": self.sent}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from a saved :meth:`state_dict` (checked whole by the loader's state check first)."""
        order = np.random.default_rng()
        order.bit_generator.state = state["order"]
        self.schedule, self.order, self.used, self.sent, self._round = (  # no round of the life before is open
            state["schedule"], order, state["used"], state["sent"], {})
        self.session.steps = state["steps"]

    def v1_fields(self) -> dict[str, Any]:
        """What a fresh loader held of this as its own attributes before ``loader-state/2`` (the
        fields of a ``loader-state/1`` state)."""
        return {"_schedule": [], "_order": self.order, "_used": 0, "_sent": 0, "_size": self.size}


def encode(value: Any) -> str | None:
    """``value`` pickled for the key-value store, or None where it cannot be pickled (a process
    that needs it then raises when it must pad)."""
    try:
        return base64.b64encode(pickle.dumps(value)).decode("ascii")
    except Exception:  # noqa: BLE001 - not picklable
        return None


def decode(blob: str) -> Any:
    return pickle.loads(base64.b64decode(blob))
