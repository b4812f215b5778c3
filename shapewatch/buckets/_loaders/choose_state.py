"""The state of ``group_by_length(..., strategy="auto")``: ``state_dict()`` / ``load_state_dict()``
of :class:`ChooseByLength` (private).

Explicit, versioned fields (``"shapewatch.auto-state/3"``), as the packing loader's: the strategy
in use and the examples held its way (bucketing: ``queues`` and batches of examples; packing:
``open`` pools and batches of rows), the plan, the random generator, the counts, the online
planner's measurements and decisions (as the bucketing loader saves them) and the chooser's own
few fields, and ``lockstep``: None on one process, else the steps agreed with the other processes
of a job and not yet taken (as the bucketing loader's). The whole state is checked before anything
changes. Version 2: ``"counts"`` holds ``"extended"``, the extended lengths yielded under the plan
in use, which the plan held before; version 3: ``"lockstep"``. A version 1 or 2 state is converted
(for a release).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from .._checks import PREFIX, fail
from .._online.choose import StrategyChooser
from .._plan.buckets import Buckets
from .._plan.length_observer import LengthObserver
from .bucket_state import check_lockstep
from .group_by_length_examples import check_spec
from .loader_state import (
    _check_item,
    _check_planner,
    _check_rows,
    _skip_read,
    _type_error,
    check_arguments,
    check_extended,
    check_keys_and_kind,
    check_loaded,
    check_rng,
    clean_plan,
    generator_of,
    legacy_extended,
    load_planner,
    loaded,
    save_planner,
)
from .pack import repooled

__all__ = ["AUTO_FORMAT", "check_auto_state", "load_auto_state", "save_auto_state"]

AUTO_FORMAT = "shapewatch.auto-state/3"
_BEFORE = ("shapewatch.auto-state/1", "shapewatch.auto-state/2")  # loaded for a release (converted)
_KEYS = ("format", "kind", "strategy", "arguments", "mode", "consumed", "done", "plan", "spec", "rng", "staged",
         "noted", "queues", "open", "ready", "counts", "planner", "chooser", "lockstep")
_COUNTS = ("dropped", "truncated", "max_buffered", "batches", "warned", "shapes", "extended")
_KINDS = ("full", "flush", "end")


def _arguments(loader: Any) -> dict[str, Any]:
    """The arguments a restored loader must have been made with."""
    return {"batch_size": loader._batch_size, "token_budget": loader._budget, "buffer_size": loader._buffer_size,
            "remainder": loader._remainder, "multiple_of": loader._multiple_of, "shuffle": loader._shuffle,
            "pad_value": loader._pad_value, "max_shapes": loader._online.max_shapes}


def save_auto_state(loader: Any) -> dict[str, Any]:
    """The state of ``loader`` (a deep copy: later batches do not change it)."""
    check_loaded(loader)
    loader._count_raw()  # an item read just before an interrupt is counted as read
    # in a job, decisions an interrupt left half made in a round are saved as the round found them
    planner_mark, chooser_mark = loader._scheduler.unfinished(loader.strategy, loader.plan)
    planner = save_planner(loader._online, planner_mark)  # as the bucketing loader saves its planner
    chooser = loader._chooser.state_dict(chooser_mark)
    if chooser_mark is not None:
        planner["fields"]["decisions"] = list(planner["fields"]["decisions"][:chooser_mark[-1]])
    counts = {"dropped": loader.dropped, "truncated": loader.truncated, "max_buffered": loader.max_buffered,
              "batches": loader.batches, "warned": loader._warned, "shapes": dict(loader.shapes),
              "extended": dict(loader.extended)}
    return copy.deepcopy({
        "format": AUTO_FORMAT, "kind": type(loader).__name__, "strategy": "auto", "arguments": _arguments(loader),
        "mode": loader.strategy, "consumed": loader._consumed, "done": loader._done, "plan": loader.plan,
        "spec": loader._spec, "rng": loader._rng.bit_generator.state, "staged": loader._staged,
        "noted": loader._noted, "queues": loader._queues, "open": loader._open, "ready": loader._ready,
        "counts": counts, "planner": planner, "chooser": chooser,
        "lockstep": loader._scheduler.state_dict() if loader._scheduler.across else None,
    })


def _check_head(loader: Any, state: Any) -> None:
    """Format, version, keys, kind and arguments."""
    if not isinstance(state, dict):
        raise _type_error("", state, f"a dict from state_dict() ({AUTO_FORMAT!r})")
    if state.get("format") != AUTO_FORMAT:
        raise fail(f"load_state_dict expects a dict from state_dict() ({AUTO_FORMAT!r}, of a loader made with "
                   f"strategy='auto'); got format {state.get('format')!r}; fix: load a state into a loader "
                   "made with the strategy that saved it")
    check_keys_and_kind(loader, state, AUTO_FORMAT, _KEYS, "auto")
    check_arguments(state["arguments"], _arguments(loader))


def _check_held(state: dict[str, Any]) -> None:
    """The examples held, each the way of the strategy in use."""
    mode = state["mode"]
    if not isinstance(mode, str) or mode not in ("bucket", "pack"):
        raise _type_error("['mode']", mode, "'bucket' or 'pack'")
    for i, item in enumerate(state["staged"] if isinstance(state["staged"], list) else [None]):
        _check_item(f"['staged'][{i}]", item)
    for name, used in (("queues", mode == "bucket"), ("open", mode == "pack")):
        pools = state[name]
        if not isinstance(pools, dict) or (pools and not used):
            raise _type_error(f"[{name!r}]", pools, "a dict of length -> list of examples" if used else
                              f"an empty dict (the strategy in use is {mode!r})")
        for length, items in pools.items():
            if not (isinstance(length, int) and length >= 0 and isinstance(items, list)):
                raise _type_error(f"[{name!r}]", {length: items}, "a dict of length -> list of examples")
            for i, item in enumerate(items):
                _check_item(f"[{name!r}][{length}][{i}]", item)
    if not isinstance(state["ready"], list):
        raise _type_error("['ready']", state["ready"], "a list of batches made ready")
    for i, entry in enumerate(state["ready"]):
        if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[0], int) and entry[2] in _KINDS):
            raise _type_error(f"['ready'][{i}]", entry, "a tuple (length, examples or rows, 'full' | 'flush' | 'end')")
        if mode == "pack":
            _check_rows(f"['ready'][{i}][1]", entry[1])
            continue
        if not isinstance(entry[1], list) or not entry[1]:
            raise _type_error(f"['ready'][{i}][1]", entry[1], "a non-empty list of examples")
        for j, item in enumerate(entry[1]):
            _check_item(f"['ready'][{i}][1][{j}]", item)


def check_auto_state(loader: Any, state: Any) -> None:
    """Validate the whole of ``state`` for ``loader`` before anything changes.

    Raises:
        TypeError: a field of the wrong type (named by its path in the state).
        ValueError: another format or version, kind or arguments, a field missing or unknown, or a
            loader that yielded already.
    """
    _check_head(loader, state)
    for name in ("consumed", "noted"):
        if not (isinstance(state[name], int) and not isinstance(state[name], bool) and state[name] >= 0):
            raise _type_error(f"[{name!r}]", state[name], "an int >= 0")
    if not isinstance(state["done"], bool):
        raise _type_error("['done']", state["done"], "a bool")
    if not isinstance(state["staged"], list):
        raise _type_error("['staged']", state["staged"], "a list of examples")
    _check_held(state)
    if state["noted"] > len(state["staged"]):
        raise ValueError(f"{PREFIX} load_state_dict: state['noted'] is {state['noted']}, above the "
                         f"{len(state['staged'])} examples staged")
    plan, spec = state["plan"], state["spec"]
    if plan is not None and not isinstance(plan, Buckets):
        raise _type_error("['plan']", plan, "None or a Buckets")
    if state["mode"] == "pack" and plan is not None and len(plan.boundaries) != 1:  # None: nothing read yet
        raise _type_error("['plan']", plan, "a one-boundary Buckets (the row length packing uses)")
    if (any(state["queues"].values()) or state["open"] or state["ready"]) and plan is None:
        raise _type_error("['plan']", None, "a Buckets (examples are held under it)")
    if spec is not None and type(spec).__name__ != "Spec":
        raise _type_error("['spec']", spec, "None or the examples' Spec")
    if spec is not None:
        check_spec(spec)
    check_rng(loader, state["rng"])
    counts = state["counts"]
    if not isinstance(counts, dict) or set(counts) != set(_COUNTS):
        raise _type_error("['counts']", counts, f"a dict of {', '.join(_COUNTS)}")
    for name in ("dropped", "truncated", "max_buffered", "batches"):
        if not (isinstance(counts[name], int) and not isinstance(counts[name], bool) and counts[name] >= 0):
            raise _type_error(f"['counts'][{name!r}]", counts[name], "an int >= 0")
    if not isinstance(counts["warned"], bool) or not isinstance(counts["shapes"], dict):
        raise _type_error("['counts']", counts, "warned a bool and shapes a dict of (rows, length) -> count")
    check_extended("['counts']['extended']", counts["extended"])
    _check_planner(loader, state["planner"])
    if not isinstance(state["planner"]["fields"].get("observer"), LengthObserver):
        raise _type_error("['planner']['fields']['observer']", state["planner"]["fields"].get("observer"),
                          "a LengthObserver")
    StrategyChooser.check_state(state["chooser"], "state['chooser']")
    check_lockstep(loader, "GroupByLength", state)


def load_auto_state(loader: Any, state: dict[str, Any]) -> None:
    """Restore ``state`` into a fresh ``loader`` over the same source from its start (the items the
    saved one had read are read again and skipped). Checked whole first: a state refused changes nothing."""
    state = _upgraded(state)
    check_auto_state(loader, state)
    state = copy.deepcopy(state)
    _skip_read(loader, state["consumed"])
    rng = generator_of(state["rng"])
    online = loader._online
    load_planner(online, state["planner"])
    loader._chooser.load_state_dict(state["chooser"])
    counts = state["counts"]
    (loader._consumed, loader._done, loader.plan, loader._spec, loader._rng, loader._staged, loader._noted,
     loader._queues, loader._open, loader._ready, loader.strategy) = (
        state["consumed"], state["done"], state["plan"], state["spec"], rng, state["staged"], state["noted"],
        state["queues"], state["open"], state["ready"], state["mode"])
    loader.dropped, loader.truncated, loader.max_buffered = counts["dropped"], counts["truncated"], counts["max_buffered"]
    loader.batches, loader._warned, loader.shapes = counts["batches"], counts["warned"], Counter(counts["shapes"])
    loader._extended.restore(loader.plan, counts["extended"])
    loader.decisions = online.decisions
    if loader.strategy == "pack" and loader.plan is not None:
        loader._open = repooled(loader._open, loader._pool_of)
    if state["lockstep"] is not None:
        loader._scheduler.load_state_dict(state["lockstep"])
    loader._scheduler.ended()  # no decision of the loader's life before the state is pending
    loaded(loader)


def _upgraded(state: Any) -> Any:
    """An older state as an ``auto-state/3``: ``/1`` (saved before its extended lengths were the
    loader's) with the count its plan carried, if any, in ``counts``; ``/1`` and ``/2`` (one process
    only then) with ``lockstep`` None. Anything else as it is (checked next)."""
    if not (isinstance(state, dict) and state.get("format") in _BEFORE and "lockstep" not in state):
        return state
    state = state | {"format": AUTO_FORMAT, "lockstep": None}
    if not isinstance(state.get("counts"), dict) or "extended" in state["counts"]:
        return state
    plan = state.get("plan")
    return state | {"plan": clean_plan(plan), "counts": state["counts"] | {"extended": legacy_extended(plan)}}
