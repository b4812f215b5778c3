"""A KeyboardInterrupt (any BaseException) at any line of a loader's ``next()`` loses nothing.

Each test runs a loader once to count the lines its ``next()`` calls execute in the loader's
own modules (``next()`` and every helper there: what holds the examples; the online planner
holds none), then once per line: a ``sys.settrace`` hook raises ``KeyboardInterrupt``
at that line (a trace hook that raises is unset, so it fires once), the loop catches it and
calls ``next()`` again. Every example (or batch) must come out exactly once, unaltered, and
the loader must run to its end. Everything runs under ``signal.alarm``: a hang fails.
"""

from __future__ import annotations

import inspect
import pickle
import sys
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from shapewatch.buckets import Buckets, bucketed, group_by_length
from tests._interrupt import (
    AfterCall,
    Interrupter,
    alarm,
    buckets_files,
    drain,
    drain_counted,
    sweep,
    ticking,
)

SPAN = 1000  # example i holds i * SPAN + arange(length): every token names its example
LENGTHS = [3, 7, 1, 12, 5, 9, 2, 14, 6, 4, 11, 8, 3, 10]
GROUP_BY_LENGTH_FILES = buckets_files("_loaders.group_by_length", "_loaders.group_by_length_examples",
                                      "_loaders.reading", "_distributed.schedulers")
BUCKETED_FILES = buckets_files("_loaders.bucketed", "_loaders.bucketed_batches", "_loaders.reading",
                               "_distributed.schedulers")
SMALL_BUFFER = "ignore:.*buffer_size=.* is below one full batch per bucket"


@pytest.fixture(autouse=True)
def _no_hang():
    with alarm(600):
        yield


def examples():
    return [(i * SPAN + np.arange(n)).astype(np.int64) for i, n in enumerate(LENGTHS)]


def source_batches():
    return [(i * SPAN + np.arange(2 * n).reshape(2, n)).astype(np.int64) for i, n in enumerate(LENGTHS)]


GROUP_BY_LENGTH = {
    "fixed": lambda: group_by_length(examples(), batch_size=2, buckets=(4, 8, 16), buffer_size=5, seed=1),
    "learned": lambda: group_by_length(examples(), batch_size=2, max_buckets=3, buffer_size=6, seed=2),
    "auto": lambda: group_by_length(examples(), batch_size=2, buffer_size=6, clock=ticking(), seed=3),
    "auto, not shuffled, drop": lambda: group_by_length(iter(examples()), batch_size=3, buffer_size=7,
                                                        clock=ticking(), shuffle=False, remainder="drop"),
}
BUCKETED = {
    "fixed": lambda: bucketed(source_batches(), buckets=(4, 8, 16)),
    "learned": lambda: bucketed(iter(source_batches()), max_buckets=2, warmup=4),
    "auto": lambda: bucketed(source_batches(), clock=ticking(), warmup=3),
}


def rows_of(batches) -> list[tuple[int, ...]]:
    out = []
    for b in batches:
        for r in range(b.rows):
            out.append(tuple(b.data[r, : b.lengths[r]].tolist()))
    return out


def each_line(make, files, check) -> int:
    """Run ``make()``'s loader once per line event (in ``files``) of a clean run, interrupted
    there; ``check`` each run's batches (and the clean run's). Returns how many lines were interrupted."""
    clean = Interrupter(-1, files)
    first = drain(make(), clean)
    check(first, first)
    assert clean.lines > 50
    for at in sweep(clean.lines):
        hook = Interrupter(at, files)
        loader = make()
        batches = drain(loader, hook)
        assert hook.fired == 1, f"line event {at} of {clean.lines} was never reached"
        check(batches, first)
        with pytest.raises(StopIteration):  # ended, and stays ended
            next(loader)
    return clean.lines


@pytest.mark.filterwarnings(SMALL_BUFFER)
@pytest.mark.parametrize("mode", GROUP_BY_LENGTH)
def test_group_by_length_interrupted_at_any_line_of_next_yields_every_example_once(mode):
    want = sorted(tuple(e.tolist()) for e in examples())
    drop = "drop" in mode

    def check(batches, clean):
        got = sorted(rows_of(batches))
        if drop:  # the partial batches at the end are dropped: the rest comes once
            assert len(got) == len(set(got)) and set(got) <= set(want)
            assert len(want) - len(got) < 3 * len({b.bucket for b in batches} | {16})
        else:
            assert got == want
        # and as the run not interrupted, batch by batch: a move cut short leaves the loader's
        # random generator as it was, so the move made again shuffles the same
        assert [rows_of([b]) for b in batches] == [rows_of([b]) for b in clean]

    each_line(GROUP_BY_LENGTH[mode], GROUP_BY_LENGTH_FILES, check)


@pytest.mark.parametrize("mode", BUCKETED)
def test_bucketed_interrupted_at_any_line_of_next_yields_every_batch_once(mode):
    want = sorted((tuple(b[0].tolist()), tuple(b[1].tolist())) for b in source_batches())

    def check(batches, clean):
        got = sorted((tuple(b.data[0, : b.lengths[0]].tolist()), tuple(b.data[1, : b.lengths[1]].tolist()))
                     for b in batches)
        assert got == want
        # and as the run not interrupted, batch by batch (online: the planner sees each batch's
        # length once and keeps the plan it made, next() called again or not)
        assert [(b.bucket, b.data.tolist()) for b in batches] == [(b.bucket, b.data.tolist()) for b in clean]

    each_line(BUCKETED[mode], BUCKETED_FILES, check)


def test_an_interrupt_inside_length_of_is_not_a_bad_example():
    calls = []

    def length_of(example):
        calls.append(int(example[0]) // SPAN)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return len(example)

    it = group_by_length(examples(), batch_size=2, buckets=(4, 8, 16), length_of=length_of, buffer_size=6)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    got = sorted(rows_of(list(it)))
    assert got == sorted(tuple(e.tolist()) for e in examples())
    assert calls.count(2) == 2  # the interrupted example was measured again, not left out


def test_an_interrupt_inside_bucketed_length_of_keeps_the_batch():
    calls = []

    def length_of(batch):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return batch.shape[1]

    it = bucketed(source_batches(), buckets=(4, 8, 16), length_of=length_of)
    with pytest.raises(KeyboardInterrupt):
        next(it), next(it)
    got = [b.data[0, 0] // SPAN for b in [*[next(it)], *it]]
    assert sorted(got) == list(range(1, len(LENGTHS)))  # batch 0 came before the interrupt


@pytest.mark.filterwarnings(SMALL_BUFFER)
def test_a_loader_interrupted_while_reading_saves_a_state_that_resumes_with_every_example():
    want = sorted(tuple(e.tolist()) for e in examples())
    for at in range(0, 200, 2):  # within the first next(): reading, parsing, queueing
        hook = Interrupter(at, GROUP_BY_LENGTH_FILES)
        first = GROUP_BY_LENGTH["fixed"]()
        sys.settrace(hook)
        try:
            taken = rows_of([next(first)])
        except KeyboardInterrupt:
            taken = []
        finally:
            sys.settrace(None)
        second = GROUP_BY_LENGTH["fixed"]()
        second.load_state_dict(first.state_dict())
        rest = rows_of(list(first))
        assert rows_of(list(second)) == rest, at
        assert sorted(taken + rest) == want, at


# -- a step's batch half taken: every part that counts it, once (``_distributed.schedulers.Taking``)

TAKING_FILES = buckets_files(
    "_loaders.group_by_length", "_loaders.bucketed", "_loaders.choose_by_length", "_distributed.schedulers",
    "_online.auto_planner", "_online.step_meter", "_loaders.extended", "_plan.length_observer")
#: the calls that take a built batch: each part commits it in one line, once
TAKING = frozenset({"__next__", "_commit", "take", "took", "_count", "yielded", "wants", "note"})
TAKERS = {
    **{f"group_by_length {k}": v for k, v in GROUP_BY_LENGTH.items()},
    "pack": lambda: group_by_length(examples(), batch_size=2, strategy="pack", row_length=16, buffer_size=6, seed=4),
    "auto (bucket or pack)": lambda: group_by_length(examples(), batch_size=2, strategy="auto", buffer_size=6,
                                                     clock=ticking(), seed=5),
    "group_by_length truncate": lambda: group_by_length(examples(), batch_size=2, buffer_size=5, seed=6,
                                                        buckets=Buckets((4, 8), overflow="truncate")),
    "group_by_length extend": lambda: group_by_length(examples(), batch_size=2, buffer_size=5, seed=7,
                                                      buckets=Buckets((4, 8), overflow="extend")),
    **{f"bucketed {k}": v for k, v in BUCKETED.items()},
    "bucketed truncate": lambda: bucketed(source_batches(), buckets=Buckets((4, 8), overflow="truncate")),
    "bucketed extend": lambda: bucketed(source_batches(), buckets=Buckets((4, 8), overflow="extend")),
}


def ids_of(batches, whole: bool) -> list[int]:
    """The examples in ``batches`` by id: a packed row's by its segments, a bucketed row's by its
    first token; ``whole``: one a batch (``bucketed``'s source batches, both rows one id)."""
    out = []
    for b in batches:
        tokens = np.asarray(b.data)
        if whole:
            out.append(int(tokens[0][0]) // SPAN)
        elif b.segment_ids is not None:
            seg = np.asarray(b.segment_ids)
            out += [int(tokens[r][seg[r] == k][0]) // SPAN for r in range(seg.shape[0])
                    for k in range(1, int(seg[r].max(initial=0)) + 1)]
        else:
            out += [int(tokens[r][0]) // SPAN for r in range(b.rows) if b.lengths[r]]
    return out


def counts_of(loader) -> dict:
    """What a loader counted of the batches it yielded (its counts and its report's)."""
    out = {"shapes": dict(loader.shapes), "truncated": getattr(loader, "truncated", None),
           "batches": getattr(loader, "batches", getattr(loader, "seen", None)),
           "extended": dict(getattr(loader, "extended", None) or {})}
    report = getattr(loader, "report", None)
    if report is not None and getattr(loader, "strategy", "bucket") == "bucket":
        got = report()
        out |= {"units": got.get("units"), "report batches": got.get("batches"), "lengths": got.get("lengths")}
    return out


@pytest.mark.filterwarnings(SMALL_BUFFER)
@pytest.mark.parametrize("mode", TAKERS)
def test_an_interrupt_while_a_batch_is_taken_counts_it_once_and_a_state_saved_then_resumes_exactly(mode):
    # an interrupt at each line of the calls that take a built batch (the planner's, the meter's,
    # the loader's counts): next() again yields that batch, counted once (every count as in a run
    # not interrupted); a state saved right after the interrupt takes the batch back, and a new
    # loader resumed from it yields it and the rest, with the same counts at the end
    make = TAKERS[mode]
    clean = Interrupter(-1, TAKING_FILES, TAKING)
    loader = make()
    want = drain(loader, clean)
    want_rows, want_counts = sorted(rows_of(want)), counts_of(loader)
    assert clean.lines > 20
    for at in sweep(clean.lines):
        hook, loader = Interrupter(at, TAKING_FILES, TAKING), make()
        got = drain(loader, hook)
        assert hook.fired == 1
        assert sorted(rows_of(got)) == want_rows and counts_of(loader) == want_counts, at
        hook, first = Interrupter(at, TAKING_FILES, TAKING), make()
        taken = []
        while not hook.fired:
            sys.settrace(hook)
            try:
                taken.append(next(first))
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(None)
        second = make()
        second.load_state_dict(first.state_dict())
        rest = list(second)
        if "auto" not in mode:  # the same batches in the same order (the generator saved as before the step)
            assert rows_of(taken + rest) == rows_of(want), at
            assert counts_of(second) == want_counts, at
        else:  # planned online, a resumed loader's decisions follow its own timings: other batches,
            # each example in one of them once (or dropped, counted)
            ids = ids_of(taken + rest, whole=mode.startswith("bucketed"))
            assert len(ids) == len(set(ids)) and len(ids) + getattr(second, "dropped", 0) == len(LENGTHS), at
    if "truncate" in mode or "extend" in mode:  # the counts these modes are for were counted
        assert want_counts["truncated" if "truncate" in mode else "extended"], want_counts


# -- an interrupt inside load_state_dict: called again, it goes on from where it stopped

LOADING_FILES = buckets_files("_loaders.loader_state", "_loaders.bucket_state", "_loaders.choose_state",
                              "_loaders.reading")
#: loaders over a source that says nothing of its length (a generator): skipping reads it
LOADERS = {
    "group_by_length": lambda: group_by_length((e for e in examples()), batch_size=2, buckets=(4, 8, 16),
                                               buffer_size=5, seed=1),
    "pack": lambda: group_by_length((e for e in examples()), batch_size=2, strategy="pack", row_length=16,
                                    buffer_size=6, seed=4),
    "auto (bucket or pack)": lambda: group_by_length((e for e in examples()), batch_size=2, strategy="auto",
                                                     buffer_size=6, clock=ticking(), seed=5),
    "bucketed": lambda: bucketed((b for b in source_batches()), buckets=(4, 8, 16)),
    "bucketed, a list": lambda: bucketed(source_batches(), buckets=(4, 8, 16)),
}


def _load_interrupted(loader, state, hook) -> bool:
    """``loader.load_state_dict(state)`` under ``hook``; True if it was interrupted."""
    sys.settrace(hook)
    try:
        loader.load_state_dict(state)
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False


@pytest.mark.filterwarnings(SMALL_BUFFER)
@pytest.mark.parametrize("mode", LOADERS)
@pytest.mark.parametrize("hooks", ["every line", "after every call"])
def test_a_load_state_dict_interrupted_anywhere_goes_on_when_called_again_and_the_loader_refuses_to_yield_until_then(
        mode, hooks):
    make = LOADERS[mode]
    first = make()
    taken = [next(first) for _ in range(3)]
    state = first.state_dict()
    assert state["consumed"] >= 3
    whole = mode.startswith("bucketed")
    want = ids_of(list(first), whole)  # what the saved loader went on with
    if hooks == "every line":
        hook_at = lambda at: Interrupter(at, LOADING_FILES)  # noqa: E731
    else:
        hook_at = lambda at: AfterCall(at, LOADING_FILES)  # noqa: E731
    def warm() -> int:
        """A clean run under the hook, just before the one that counts: on Python 3.12+ the first run
        of code under an opcode-tracing hook after it ran untraced reports fewer opcode events (its
        instrumentation is set up as it runs)."""
        clean = hook_at(None if hooks != "every line" else -1)
        assert not _load_interrupted(make(), state, clean)
        return clean.seen

    warm()
    points = warm()
    assert points > 20
    for at in sweep(points):
        # called again: the batches the saved loader went on with (auto: each example once)
        loader = make()
        warm()
        assert _load_interrupted(loader, state, hook_at(at)), at
        loader.load_state_dict(state)
        got = ids_of(list(loader), whole)
        if "auto" in mode:
            assert sorted(ids_of(taken, whole) + got) == list(range(len(LENGTHS))), at
        else:
            assert got == want, at
        # not called again: next() and state_dict() refuse (naming why); or, interrupted before it
        # read anything, the loader is a new one; or, interrupted after the load was whole, a loaded one
        loader = make()
        warm()
        assert _load_interrupted(loader, state, hook_at(at)), at
        if loader._skipping.unfinished:
            for call in (loader.__next__, loader.state_dict):
                with pytest.raises(ValueError, match=r"load_state_dict did not finish .* call load_state_dict "
                                                     r"again with the same state"):
                    call()
        elif loader._consumed == 0:
            assert sorted(ids_of(list(loader), whole)) == list(range(len(LENGTHS))), at
        else:
            got = ids_of(list(loader), whole)
            assert sorted(ids_of(taken, whole) + got) == list(range(len(LENGTHS))), at
            assert "auto" in mode or got == want, at


@pytest.mark.filterwarnings(SMALL_BUFFER)
def test_a_second_load_state_dict_of_a_state_that_had_read_less_than_an_interrupted_one_is_refused():
    make = LOADERS["group_by_length"]
    first = make()
    next(first)
    early = first.state_dict()
    for _ in range(3):
        next(first)
    late = first.state_dict()
    assert late["consumed"] > early["consumed"] + 1
    loader = make()
    hook = Interrupter(-1, LOADING_FILES, frozenset({"to"}))
    _load_interrupted(loader, late, hook)
    lines_per_item = 4  # Skipping.to's loop: while, if hold_next, count += 1, clear
    at = hook.lines - 2 * lines_per_item  # two items before the end
    loader = make()
    assert _load_interrupted(loader, late, Interrupter(at, LOADING_FILES, frozenset({"to"})))
    read = loader._skipping.read
    assert early["consumed"] < read < late["consumed"]
    with pytest.raises(ValueError, match=rf"read {read} items of its source already, more than the "
                                         rf"{early['consumed']} .* make a new loader"):
        loader.load_state_dict(early)
    loader.load_state_dict(late)  # the state it began with still loads
    assert ids_of(list(loader), False) == ids_of(list(first), False)


@pytest.mark.filterwarnings(SMALL_BUFFER)
@pytest.mark.parametrize("kind", ["group_by_length", "bucketed"])
def test_a_second_load_state_dict_takes_a_later_state_planned_otherwise_by_the_online_planner(kind):
    """After a whole load of an early state (before the first next()), a later state of the same
    run whose online plan differs loads too: the plan compared is the one the loader was made with."""
    lengths = [int(n) for n in np.random.default_rng(0).integers(1, 200, 400)]

    def make():
        if kind == "bucketed":
            return bucketed(((i * SPAN + np.arange(2 * n).reshape(2, n)).astype(np.int64)
                             for i, n in enumerate(lengths)), clock=ticking(), warmup=3)
        return group_by_length(((i * SPAN + np.arange(n)).astype(np.int64) for i, n in enumerate(lengths)),
                               batch_size=4, buffer_size=16, clock=ticking(), seed=3)

    first, states = make(), []
    for _ in range(60):
        states.append(first.state_dict())
        next(first)
    early = next(s for s in states if s["plan"] is not None)
    late = next(s for s in reversed(states) if s["plan"] not in (None, early["plan"]))
    whole = kind == "bucketed"
    loader = make()
    loader.load_state_dict(early)
    loader.load_state_dict(late)  # before the first next(): goes on from the later state
    assert loader.plan.to_dict()["boundaries"] == late["plan"]["boundaries"]
    fresh = make()
    fresh.load_state_dict(late)
    assert sorted(ids_of(list(loader), whole)) == sorted(ids_of(list(fresh), whole))
    with pytest.raises(ValueError, match=r"before the loader.s first next\(\)"):
        loader.load_state_dict(late)  # after next(): refused, as before


# -- an example refused at the max_shapes cap: the refusal is raised once, whatever line a Ctrl-C lands on

CAP_FILES = buckets_files("_loaders.group_by_length", "_online.auto_planner")
CAP_FUNCTIONS = frozenset({"_observe", "forget", "forgotten"})


def _refusal_run(hook):
    """max_shapes=1 over 150 short examples, one of 300 (after the first buffer), 60 short: every
    ``next()`` under ``hook``, going on after each interrupt and each refusal."""
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(1, 120, 150)] + [300] + [int(n) for n in rng.integers(1, 120, 60)]
    data = [(i * SPAN + np.arange(n)).astype(np.int64) for i, n in enumerate(lengths)]
    loader = group_by_length(data, batch_size=8, max_shapes=1, buffer_size=64, clock=ticking())
    refusals: list[str] = []
    batches = drain_counted(loader, hook, 400, refusals)[0]
    ids = sorted(int(b.data[r, 0]) // SPAN for b in batches for r in range(b.rows) if b.lengths[r])
    return ids, refusals, len(lengths)


@pytest.mark.filterwarnings(SMALL_BUFFER)
def test_an_example_refused_at_the_cap_is_refused_once_wherever_an_interrupt_lands():
    # a Ctrl-C between leaving the example out and raising the refusal lost the refusal (the
    # example gone, no error), and one before the planner took its length back made every later
    # periodic re-plan raise the same refusal again for an example that was gone
    clean = Interrupter(-1, CAP_FILES, CAP_FUNCTIONS)
    ids, refusals, n = _refusal_run(clean)
    assert ids == [i for i in range(n) if i != 150] and len(refusals) == 1 and "length 300" in refusals[0]
    for at in sweep(clean.lines):
        hook = Interrupter(at, CAP_FILES, CAP_FUNCTIONS)
        ids, refusals, n = _refusal_run(hook)
        assert hook.fired == 1, at
        assert ids == [i for i in range(n) if i != 150], at
        assert len(refusals) == 1 and "length 300" in refusals[0], (at, refusals)


# -- the online planner's charge of the step before (``AutoPlanner.request``): made once, the pause left out

CHARGE_FILES = buckets_files("_online.auto_planner", "_online.cost_model", "_online.step_meter")


class InCharge(Interrupter):
    """:class:`Interrupter` over the frames of the planner's ``root`` (``request``: its charge) and
    the calls under it (not the step meter's waits elsewhere), firing at each line event of ``at``."""

    def __init__(self, at: int | tuple[int, ...], outside_request: bool, root: str = "request") -> None:
        super().__init__(-1, CHARGE_FILES)
        self.ats = {at} if isinstance(at, int) else set(at)
        self.outside_request, self.root = outside_request, root  # count the root's own lines (else only those under it)

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.endswith(self.files):
            return None
        f = frame
        while f is not None and f.f_code.co_name != self.root:
            f = f.f_back
        if f is None or (f is frame and not self.outside_request):
            return None
        return self.local

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines += 1
            if self.lines - 1 in self.ats:
                self.fired += 1
                raise KeyboardInterrupt(f"injected at line event {self.lines - 1}")
        return self.local


CHARGED_LENGTHS = [int(n) for n in np.random.default_rng(0).lognormal(2.5, 0.6, 30).clip(1, 60)]


class StepClock:
    """A clock the loop moves on by its step (a compile on a shape's first batch); reads do not tick."""

    def __init__(self) -> None:
        self.t, self.seen = 0.0, set()

    def __call__(self) -> float:
        return self.t

    def step(self, batch: Any) -> None:
        """The loop's step on ``batch``: L^2 / 1024 s, and 1/16 s to compile a new shape (sums exact in floats)."""
        self.t += batch.bucket ** 2 / 1024 + (1 / 16 if batch.bucket not in self.seen else 0.0)
        self.seen.add(batch.bucket)


def charged_loader() -> tuple[Any, StepClock]:
    """The loader of the charge tests (planning online) and its clock."""
    clock = StepClock()
    data = [(i * SPAN + np.arange(n)).astype(np.int64) for i, n in enumerate(CHARGED_LENGTHS)]
    return group_by_length(data, batch_size=2, buffer_size=20, clock=clock, seed=3), clock


def charged_run(at: int | tuple[int, ...] | None, pause: float, outside_request: bool,
                root: str = "request", hook: Any = None) -> tuple[list[Any], list[str], int]:
    """A loader planning online on a :class:`StepClock`, interrupted at the ``at``-th line event
    of the charge (:class:`InCharge`, of ``root``; None: not interrupted; a tuple: at each), ``pause``
    seconds passing before ``next()`` is called again (``hook``: another, that fires at each of its
    ``ats``): (batches, decisions, line events seen)."""
    jnp.zeros(1).block_until_ready()  # JAX's backends up: the measured batches wait for the device
    loader, clock = charged_loader()
    hook = InCharge(-1 if at is None else at, outside_request, root) if hook is None else hook
    out = []
    for _ in range(400):
        sys.settrace(hook)
        try:
            batch = next(loader)
        except KeyboardInterrupt:
            clock.t += pause  # the user's pause: not the step's
            continue
        except StopIteration:
            break
        finally:
            sys.settrace(None)
        out.append(batch)
        clock.step(batch)
    assert hook.fired == len(hook.ats - {-1}), f"line event {at} was never reached"
    return out, [str(d) for d in loader.decisions], hook.lines


@pytest.mark.parametrize("pause", [0.0, 1024.0])
def test_an_interrupt_while_the_online_planner_charges_the_step_before_changes_no_plan(pause):
    # paused: interrupts once the charge began (an interrupt in ``request`` before it does is one
    # in the user's loop: the time between batches is the step's); not paused: anywhere in it
    clean, decided, lines = charged_run(None, 0.0, not pause)
    assert lines > 500 and len(decided) > 4  # re-plans from what it measured
    # every 11th line event (the charge's lines are fewer than the events between two charges,
    # and prime to them: each line is hit at some charge)
    for at in sweep(lines, 11):
        batches, decisions, _ = charged_run(at, pause, not pause)
        # the charge cut short is made again from where it began, once, the pause left out: the
        # same plans (each measured at as many points), so the same batches, as the run not interrupted
        assert decisions == decided, at
        assert [rows_of([b]) for b in batches] == [rows_of([b]) for b in clean], at


def test_a_second_interrupt_while_the_charge_is_made_again_leaves_out_both_pauses():
    # the second a few line events into the next request: inside its rewind to the mark, or just after
    clean, decided, lines = charged_run(None, 0.0, False)
    for at in sweep(lines, 29):
        for gap in (1, 3, 6):
            batches, decisions, _ = charged_run((at, at + gap), 1024.0, False)
            assert decisions == decided, (at, gap)
            assert [rows_of([b]) for b in batches] == [rows_of([b]) for b in clean], (at, gap)


class AtLine(Interrupter):
    """KeyboardInterrupt at the ``at``-th time the line of ``code`` that holds ``text`` runs."""

    def __init__(self, at: int, code: Any, text: str) -> None:
        super().__init__(at, CHARGE_FILES)
        self.ats = {at}
        lines, first = inspect.getsourcelines(code)
        self.code, self.lineno = code.__code__, first + next(i for i, t in enumerate(lines) if text in t)

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        return self.local if frame.f_code is self.code else None

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == self.lineno:
            self.lines += 1
            if self.lines - 1 == self.at:
                self.fired += 1
                raise KeyboardInterrupt(f"injected at line {self.lineno}, its run {self.at}")
        return self.local


def test_an_interrupt_as_the_charge_is_marked_made_leaves_out_the_pause():
    # the charge made and about to be marked so: called again, it is made again from its mark, the
    # pause left out (it was marked made after the try: the pause was charged as the step)
    from shapewatch.buckets._online.auto_planner import AutoPlanner

    clean, decided, _ = charged_run(None, 0.0, False)
    for at in range(len(clean) - 1):
        hook = AtLine(at, AutoPlanner.request, "self._charge_from = None")
        batches, decisions, _ = charged_run(None, 1024.0, False, hook=hook)
        assert decisions == decided, at
        assert [rows_of([b]) for b in batches] == [rows_of([b]) for b in clean], at


def test_an_interrupt_while_a_batch_is_counted_out_measures_it_as_the_run_not_interrupted():
    # the planner's count of a batch going out (``yielded``): called again after the step meter
    # counted the batch, it took the batch as not to be measured (the meter's count said so)
    clean, decided, lines = charged_run(None, 0.0, True, "yielded")
    assert lines > 300
    for at in sweep(lines, 3):
        batches, decisions, _ = charged_run(at, 0.0, True, "yielded")
        assert decisions == decided, at
        assert [rows_of([b]) for b in batches] == [rows_of([b]) for b in clean], at


def _resumed(state: dict[str, Any]) -> tuple[list[Any], list[str]]:
    """A new loader of :func:`charged_run`'s from ``state``, drained on a clock of its own."""
    loader, clock = charged_loader()
    loader.load_state_dict(state)
    out = []
    for batch in loader:
        out.append(batch)
        clock.step(batch)
    return out, [str(d) for d in loader.decisions]


def test_a_state_saved_after_an_interrupt_in_the_charge_resumes_as_one_saved_before_that_next():
    _, _, lines = charged_run(None, 0.0, False)
    for at in range(3, lines, 37):
        loader, clock = charged_loader()
        hook, states = InCharge(at, False), [loader.state_dict()]
        for _ in range(400):
            sys.settrace(hook)
            try:
                batch = next(loader)
            except KeyboardInterrupt:
                sys.settrace(None)
                cut = loader.state_dict()  # right after the interrupt, in the charge
                # (or in the meter's warning after it: the charge made, the state holds it)
                made = loader._online.charge_cut() is None
                break
            finally:
                sys.settrace(None)
            states.append(loader.state_dict())  # before the next next()
            clock.step(batch)
        assert hook.fired == 1, at
        # the charge cut short is saved as it began: as the state saved before that next() (whose
        # batch in flight a resumed loader does not time), not half charged
        assert made or pickle.dumps(cut) == pickle.dumps(states[-1]), at
        got = _resumed(cut)[0]
        assert sorted(rows_of(got)) == sorted(rows_of(_resumed(states[-1])[0])), at
