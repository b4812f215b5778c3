"""The state of the bucketing loaders, ``group_by_length`` (``strategy="bucket"``) and ``bucketed``:
``state_dict()`` / ``load_state_dict()`` (private).

Explicit, versioned fields (``"shapewatch.loader-state/2"``), as the packing loader's, each
checked on load with an error naming it and what was expected; the whole state is checked before
anything changes, so a state refused leaves the loader as it was. A state of version 1 (the
loader's attributes themselves) is still loaded, for a release: ``_loaders.loader_state_v1`` checks it as
before and converts it.

``group_by_length``: ``arguments`` (the loader's, which a restored one must have been made with),
``consumed`` (items read from the source) and ``done``, ``plan`` (``Buckets.to_dict()``, None before
the first buffer) and ``plan_stats`` (what planned it, for ``explain()``), ``spec`` (the examples'
structure), ``rng`` (numpy's ``bit_generator.state``), the examples held: ``staged`` (read, not
queued; ``noted`` of them observed), ``queues`` (bucket -> examples) and ``ready`` (batches made
ready: bucket, examples, ``"full" | "flush" | "end"``), ``observed`` (the lengths read), ``counts``
(``dropped``, ``truncated``, ``max_buffered``, ``batches``, ``warned``, ``shapes``, ``extended``),
``planner`` (the online planner's measurements and decisions, None with a fixed or learned plan)
and ``lockstep`` (None on one process; across processes: ``processes``, ``steps``, ``schedule``,
``order``, ``yields``, ``used``, ``sent``, ``period`` and ``last``; a state saved before ``period``
and ``last`` were kept loads with every 32 steps and the last step unknown).

``bucketed``: ``arguments``, ``consumed``, ``done``, ``plan``, ``plan_stats``, ``held`` (the batches
read and not yielded, next last), ``observed``, ``counts`` (``seen``, ``truncated``, ``shapes``,
``extended``), ``planner`` and ``lockstep`` (``processes``, ``steps``, ``schedule``, ``order``,
``used``, ``sent``, ``template``).
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from .._checks import PREFIX, fail, is_int
from .._distributed.group_by_length_lockstep import LONGEST_PERIOD
from .._online.auto_planner import REPLAN_EVERY
from .._plan.buckets import Buckets
from .._plan.length_observer import LengthObserver
from .group_by_length_examples import check_spec
from .loader_state import (
    _check_item,
    _check_planner,
    _is_count,
    _short,
    _skip_read,
    _type_error,
    _where,
    check_arguments,
    check_extended,
    check_loaded,
    check_rng,
    check_unread,
    generator_of,
    load_planner,
    loaded,
    save_planner,
)

__all__ = ["V2_FORMAT", "Resumable", "arguments_of", "check_bucket_state", "check_lockstep", "load_bucket_state",
           "save_bucket_state"]

V2_FORMAT = "shapewatch.loader-state/2"
_KINDS = ("full", "flush", "end")
_PLAN, _NOTED, _SENT = "['plan']", "['noted']", "['lockstep']['sent']"
_KEYS = {
    "GroupByLength": ("format", "kind", "strategy", "arguments", "consumed", "done", "plan", "plan_stats", "spec",
                      "rng", "staged", "noted", "queues", "ready", "observed", "counts", "planner", "lockstep"),
    "Bucketed": ("format", "kind", "arguments", "consumed", "done", "plan", "plan_stats", "held", "observed",
                 "counts", "planner", "lockstep"),
}
_COUNTS = {"GroupByLength": ("dropped", "truncated", "max_buffered", "batches", "warned", "shapes", "extended"),
           "Bucketed": ("seen", "truncated", "shapes", "extended")}
_LOCKSTEP = {"GroupByLength": ("processes", "steps", "schedule", "order", "yields", "used", "sent"),
             "Bucketed": ("processes", "steps", "schedule", "order", "used", "sent", "template")}
#: Lockstep fields a state saved by an earlier release lacks (each has a default)
_OPTIONAL = {"GroupByLength": {"period", "last"}}


def arguments_of(loader: Any) -> dict[str, Any]:
    """The arguments a restored loader must have been made with (as it holds them)."""
    online = loader._online
    common = {"multiple_of": loader._multiple_of, "max_buckets": loader._max_buckets,
              "pad_value": loader._pad_value, "max_shapes": None if online is None else online.max_shapes}
    if type(loader).__name__ == "Bucketed":
        return common | {"axis": loader._axis, "warmup": loader._warmup, "return_mask": loader._return_mask,
                         "length_of": loader._length_of is not None}  # given or not (a callable is not saved)
    numbers = {name: loader._auto.get(name) for name in ("compile_seconds", "steps", "step_seconds")}
    return common | {"batch_size": loader._batch_size, "token_budget": loader._budget,
                     "buffer_size": loader._buffer_size, "remainder": loader._remainder,
                     "shuffle": loader._shuffle} | numbers


# -- saving
def save_bucket_state(loader: Any) -> dict[str, Any]:
    """The state of a bucketing ``loader`` (a deep copy: later batches do not change it)."""
    check_loaded(loader)
    loader._count_raw()  # an item read just before an interrupt is counted as read
    kind = type(loader).__name__
    plan = loader.plan
    state: dict[str, Any] = {
        "format": V2_FORMAT, "kind": kind, "arguments": arguments_of(loader),
        "consumed": loader._consumed, "done": loader._done,
        "plan": None if plan is None else plan.to_dict(), "plan_stats": None if plan is None else plan.stats,
        "observed": loader._observed, "lockstep": _save_lockstep(loader),
        # in a job, a plan an interrupt left half made in a round is saved as the round found it
        "planner": save_planner(loader._online, loader._scheduler.unfinished(None, loader.plan)[0]),
    }
    extended = dict(loader.extended)
    if kind == "Bucketed":
        state |= {"held": loader._held,
                  "counts": {"seen": loader.seen, "truncated": loader.truncated, "shapes": dict(loader.shapes),
                             "extended": extended}}
    else:
        state |= {"strategy": "bucket", "spec": loader._spec, "rng": loader._rng.bit_generator.state,
                  "staged": loader._staged, "noted": loader._noted, "queues": loader._queues,
                  "ready": loader._ready,
                  "counts": {"dropped": loader.dropped, "truncated": loader.truncated,
                             "max_buffered": loader.max_buffered, "batches": loader.batches,
                             "warned": loader._warned, "shapes": dict(loader.shapes), "extended": extended}}
    return copy.deepcopy(state)


def _save_lockstep(loader: Any) -> dict[str, Any] | None:
    """The steps agreed with the other processes and not yet taken (None on one process): its
    scheduler's state (and ``bucketed``'s template, a batch of its own)."""
    scheduler = loader._scheduler
    if not scheduler.across:
        return None
    if type(loader).__name__ == "Bucketed":
        return scheduler.state_dict() | {"template": loader._template}
    return scheduler.state_dict()


# -- checking
def _head(loader: Any, state: Any) -> str:
    """Format, keys, kind, a loader that yielded nothing yet, and the arguments; returns the kind."""
    kind = type(loader).__name__
    if not isinstance(state, dict):
        raise _type_error("", state, f"a dict from state_dict() ({V2_FORMAT!r})")
    got = state.get("format")
    if got != V2_FORMAT:
        other = {"shapewatch.pack-state": "pack", "shapewatch.auto-state": "auto"}.get(
            got.split("/")[0] if isinstance(got, str) else None)
        hint = (f" (a state of strategy={other!r}: load it into a loader made with strategy={other!r})"
                if other else "")
        raise fail(f"load_state_dict expects a dict from state_dict() ({V2_FORMAT!r}, or "
                   f"'shapewatch.loader-state/1' saved before it); got format {got!r}{hint}")
    keys = _KEYS[kind]
    if state.get("kind") != kind:
        raise fail(f"load_state_dict: the state is of a {state.get('kind')}, not of a {kind}; fix: restore it "
                   "into the same kind of loader")
    if kind == "GroupByLength" and state.get("strategy") != "bucket":
        raise fail(f"load_state_dict: the state is of strategy={state.get('strategy')!r}, not of this loader's "
                   "strategy='bucket'; fix: restore it into a loader made with the strategy that saved it")
    missing, extra = sorted(set(keys) - set(state)), sorted(set(state) - set(keys))
    if missing or extra:
        raise fail(f"load_state_dict: the state's keys do not match a {V2_FORMAT} state of a {kind}: missing "
                   f"{missing or 'none'}, unknown {extra or 'none'}; fix: pass the dict that state_dict() "
                   "returned, unchanged")
    check_unread(loader)
    arguments, own = state["arguments"], arguments_of(loader)
    check_arguments(arguments, own)
    return kind


def _check_plan(loader: Any, state: dict[str, Any]) -> None:
    saved, own = state["plan"], loader._skipping.as_made(loader.plan)
    if saved is not None:
        if not isinstance(saved, dict):
            raise _type_error("['plan']", saved, "None or a dict from Buckets.to_dict()")
        try:
            Buckets.from_dict(saved)
        except (TypeError, ValueError) as exc:
            raise _type_error("['plan']", saved, f"None or a dict from Buckets.to_dict() ({exc})") from None
    if own is not None and saved != own.to_dict():  # a plan given: the same one, from the start
        raise ValueError(f"{PREFIX} {_where(_PLAN)} is {_short(saved)}, but this loader was made "
                         f"with buckets={_short(own.to_dict())}; fix: make the new loader with the arguments of "
                         "the saved one")
    if state["plan_stats"] is not None and not isinstance(state["plan_stats"], dict):
        raise _type_error("['plan_stats']", state["plan_stats"], "None or a dict (what planned the plan)")


def _check_counts(kind: str, counts: Any) -> None:
    names = _COUNTS[kind]
    if not isinstance(counts, dict) or set(counts) != set(names):
        raise _type_error("['counts']", counts, f"a dict of {', '.join(names)}")
    for name in names:
        value, path = counts[name], f"['counts'][{name!r}]"
        if name == "warned":
            if not isinstance(value, bool):
                raise _type_error(path, value, "a bool")
        elif name == "shapes":
            key_ok = ((lambda k: isinstance(k, tuple) and len(k) == 2 and all(map(_is_count, k)))
                      if kind == "GroupByLength" else _is_count)
            if not (isinstance(value, dict) and all(key_ok(k) and _is_count(v) for k, v in value.items())):
                raise _type_error(path, value, "a dict of " + ("(rows, bucket)" if kind == "GroupByLength"
                                                               else "bucket") + " -> count (ints >= 0)")
        elif name == "extended":
            check_extended(path, value)
        elif not _is_count(value):
            raise _type_error(path, value, "an int >= 0")


def _check_examples(state: dict[str, Any]) -> None:
    """``group_by_length``: the examples held, the spec they need and the plan they are queued under."""
    if not _is_count(state["noted"]):
        raise _type_error("['noted']", state["noted"], "an int >= 0")
    if state["spec"] is not None and type(state["spec"]).__name__ != "Spec":
        raise _type_error("['spec']", state["spec"], "None or the examples' Spec")
    if state["spec"] is not None:
        check_spec(state["spec"])
    staged, queues, ready = state["staged"], state["queues"], state["ready"]
    if not isinstance(staged, list):
        raise _type_error("['staged']", staged, "a list of examples")
    for i, item in enumerate(staged):
        _check_item(f"['staged'][{i}]", item)
    if state["noted"] > len(staged):
        raise ValueError(f"{PREFIX} {_where(_NOTED)} is {state['noted']}, above the "
                         f"{len(staged)} examples staged")
    if not isinstance(queues, dict):
        raise _type_error("['queues']", queues, "a dict of bucket -> list of examples")
    for bucket, queue in queues.items():
        if not _is_count(bucket) or not isinstance(queue, list):
            raise _type_error("['queues']", {bucket: queue}, "a dict of bucket -> list of examples")
        for i, item in enumerate(queue):
            _check_item(f"['queues'][{bucket}][{i}]", item)
    if not isinstance(ready, list):
        raise _type_error("['ready']", ready, "a list of batches made ready")
    for i, entry in enumerate(ready):
        if not (isinstance(entry, tuple) and len(entry) == 3 and _is_count(entry[0])
                and isinstance(entry[1], list) and entry[2] in _KINDS):
            raise _type_error(f"['ready'][{i}]", entry, "a tuple (bucket, examples, 'full' | 'flush' | 'end')")
        for j, item in enumerate(entry[1]):
            _check_item(f"['ready'][{i}][1][{j}]", item)
    parsed = [item for item in staged if type(item).__name__ != "_Raw"]
    if (parsed or any(queues.values()) or ready) and state["spec"] is None:  # one read, not parsed, needs none
        raise _type_error("['spec']", None, "the examples' Spec (examples are held)")
    if (any(queues.values()) or ready) and state["plan"] is None:
        raise _type_error("['plan']", None, "a plan (examples are queued under it)")


def _check_held(path: str, held: Any) -> None:
    """One batch ``bucketed`` holds: read (a ``Held``), or taken and not read yet."""
    from .bucketed_batches import Held

    raw = type(held).__name__ == "_Raw" and isinstance(held, tuple) and len(held) == 2 and _is_count(held[1])
    if not raw and not (isinstance(held, Held) and _is_count(held.size) and isinstance(held.lengths, np.ndarray)):
        raise _type_error(path, held, "a batch held (as state_dict() saves it)")


def _check_batches(state: dict[str, Any]) -> None:
    """``bucketed``: the batches held."""
    if not isinstance(state["held"], list):
        raise _type_error("['held']", state["held"], "a list of batches held")
    for i, held in enumerate(state["held"]):
        _check_held(f"['held'][{i}]", held)


def check_lockstep(loader: Any, kind: str, state: dict[str, Any]) -> None:
    """``state["lockstep"]``: None on one process, else the steps agreed in a job of as many processes."""
    saved, now = state["lockstep"], loader._scheduler.processes
    if saved is not None and not isinstance(saved, dict):
        raise _type_error("['lockstep']", saved, f"None or a dict of {', '.join(_LOCKSTEP[kind])}")
    processes = None if saved is None else saved.get("processes")
    if (saved is None) != (now is None) or (now and processes != now):
        raise fail(f"load_state_dict: the state was saved by process {processes} (index, count) and is "
                   f"loaded into {now}: a loader resumes only in a job of as many processes, each process "
                   "with its own state; fix: restart the job with the same process count, each process "
                   "loading the state it saved")
    if saved is None:
        return
    if set(saved) - _OPTIONAL.get(kind, set()) != set(_LOCKSTEP[kind]):
        raise _type_error("['lockstep']", saved, f"None or a dict of {', '.join(_LOCKSTEP[kind])}"
                          + "".join(f" (and {name})" for name in sorted(_OPTIONAL.get(kind, ()))))
    if not all(map(_is_count, processes)):
        raise _type_error("['lockstep']['processes']", processes, "[index, count]")
    for name in ("steps", "used", "sent"):
        if not _is_count(saved[name]):
            raise _type_error(f"['lockstep'][{name!r}]", saved[name], "an int >= 0")
    check_rng(loader, saved["order"], "['lockstep']['order']", loader._scheduler.order)
    schedule, held = saved["schedule"], state["held" if kind == "Bucketed" else "staged"]
    if saved["sent"] > len(held):
        raise ValueError(f"{PREFIX} {_where(_SENT)} is {saved['sent']}, above the "
                         f"{len(held)} {'batches held' if kind == 'Bucketed' else 'examples staged'}")
    if not isinstance(schedule, list):
        raise _type_error("['lockstep']['schedule']", schedule, "a list of the steps agreed")
    if kind == "GroupByLength":
        if not all(is_int(b) and b >= 1 for b in schedule):
            raise _type_error("['lockstep']['schedule']", schedule, "a list of buckets (ints >= 1)")
        yields = saved["yields"]
        if not (isinstance(yields, dict) and all(_is_count(k) and _is_count(v) for k, v in yields.items())):
            raise _type_error("['lockstep']['yields']", yields, "a dict of bucket -> batches yielded")
        last = saved.get("last")
        if not (last is None or (is_int(last) and last >= 1)):
            raise _type_error("['lockstep']['last']", last, "None or the bucket of the last step (an int >= 1)")
        period = saved.get("period", REPLAN_EVERY)
        if not (is_int(period) and REPLAN_EVERY <= period <= LONGEST_PERIOD):
            raise _type_error("['lockstep']['period']", period,
                              f"an int from {REPLAN_EVERY} to {LONGEST_PERIOD} (the steps between periodic re-plans)")
        return
    for i, step in enumerate(schedule):
        if not (isinstance(step, tuple) and len(step) == 3 and is_int(step[0]) and step[0] >= 1
                and (step[1] is None or _is_count(step[1]))):
            raise _type_error(f"['lockstep']['schedule'][{i}]", step, "a tuple (bucket, rows or None, batch or None)")
        if step[2] is not None:
            _check_held(f"['lockstep']['schedule'][{i}][2]", step[2])
    if saved["template"] is not None:
        _check_held("['lockstep']['template']", saved["template"])


def check_bucket_state(loader: Any, state: Any) -> None:
    """Validate the whole of a version 2 ``state`` for ``loader`` before anything changes.

    Raises:
        TypeError: a field of the wrong type (named by its path in the state).
        ValueError: another format, kind, process count or arguments, a field missing or unknown,
            or a loader that yielded already.
    """
    kind = _head(loader, state)
    if not _is_count(state["consumed"]):
        raise _type_error("['consumed']", state["consumed"], "an int >= 0")
    if not isinstance(state["done"], bool):
        raise _type_error("['done']", state["done"], "a bool")
    _check_plan(loader, state)
    if kind == "GroupByLength":
        check_rng(loader, state["rng"])
        _check_examples(state)
    else:
        _check_batches(state)
    if not isinstance(state["observed"], LengthObserver):
        raise _type_error("['observed']", state["observed"], "a LengthObserver")
    _check_counts(kind, state["counts"])
    _check_planner(loader, state["planner"])
    check_lockstep(loader, kind, state)


# -- loading
def load_bucket_state(loader: Any, state: Any) -> None:
    """Restore ``state`` into a fresh ``loader`` over the same source from its start (the items the
    saved one had read are read again and skipped). A version 1 state is checked as before and
    converted first. The whole state is checked before anything changes: a state refused changes
    nothing."""
    from .loader_state_v1 import V1_FORMAT, check_v1, convert

    if isinstance(state, dict) and state.get("format") == V1_FORMAT:
        check_v1(loader, state)
        state = convert(loader, state, V2_FORMAT, arguments_of(loader))
    check_bucket_state(loader, state)
    state = copy.deepcopy(state)
    _skip_read(loader, state["consumed"])
    online = loader._online
    if online is not None:
        load_planner(online, state["planner"])
        loader.decisions = online.decisions
    plan = _plan_of(loader, state)  # after the planner: an online plan's stats name its decisions
    counts = state["counts"]
    loader._consumed, loader._done, loader.plan, loader._observed = (
        state["consumed"], state["done"], plan, state["observed"])
    loader.truncated, loader.shapes = counts["truncated"], Counter(counts["shapes"])
    loader._extended.restore(plan, counts["extended"])
    if type(loader).__name__ == "Bucketed":
        loader._held, loader.seen = state["held"], counts["seen"]
    else:
        (loader._spec, loader._rng, loader._staged, loader._noted, loader._queues, loader._ready) = (
            state["spec"], generator_of(state["rng"]), state["staged"], state["noted"], state["queues"],
            state["ready"])
        loader.dropped, loader.max_buffered, loader.batches, loader._warned = (
            counts["dropped"], counts["max_buffered"], counts["batches"], counts["warned"])
    lockstep = state["lockstep"]
    if lockstep is not None:
        loader._scheduler.load_state_dict(lockstep)
        if type(loader).__name__ == "Bucketed":
            loader._template = lockstep["template"]
    loader._scheduler.ended()  # no decision of the loader's life before the state is pending
    loaded(loader)


def _plan_of(loader: Any, state: dict[str, Any]) -> Buckets | None:
    """The plan to go on with: the loader's own when it was given one (the saved one is the same),
    else the saved one with what planned it (an online plan's decisions: the planner's own list,
    as it was before saving)."""
    if state["plan"] is None:
        return None
    own = loader._skipping.as_made(loader.plan)
    if own is not None:
        return own
    stats = state["plan_stats"]
    online = loader._online
    if online is not None and isinstance(stats, dict) and isinstance(stats.get("online"), dict):
        stats = stats | {"online": stats["online"] | {"decisions": online.decisions}}
    return replace(Buckets.from_dict(state["plan"]), stats=stats)


class Resumable:
    """``state_dict()`` / ``load_state_dict()``, as both bucketing loaders have them."""

    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands (picklable, ``"shapewatch.loader-state/2"``): pass it to
        :meth:`load_state_dict` of a new loader, made with the same arguments over the same
        source from its start, to go on with exactly the batches that were left (in a
        multi-process job: on every process, each with its own state)."""
        self._take_back()
        return save_bucket_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (see :meth:`state_dict`; a ``"shapewatch.loader-state/1"`` state,
        saved before, loads too); call it before the first batch.

        The whole state is checked before anything changes: a state refused leaves this
        loader as it was (usable, or ready for another state). Then the items the saved loader
        had read are read again: interrupted there (or refused, the source ending first), the
        loader yields nothing until a ``load_state_dict`` finishes (called again, it goes on
        reading from where it stopped).

        Raises:
            TypeError: a field of the wrong type, named by its path in the state.
            ValueError: a state of another loader kind, process count or arguments, a field
                missing or unknown, or a shorter source.
        """
        load_bucket_state(self, state)
        self._taking = None
