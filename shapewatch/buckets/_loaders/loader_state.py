"""Saving and restoring a loader's position: ``state_dict()`` / ``load_state_dict()``.

A loader's state is what defines its position in the stream, as explicit, versioned fields
(never the loader's attributes: a rename inside a loader changes nothing saved): the examples
(or batches) read and not yet yielded, the plan, the random generators, the counts, the online
planner's measurements and decisions, and, in a multi-process job, the steps agreed and not yet
taken. With it goes how many items were taken from the source; ``load_state_dict`` on a new
loader, made with the same arguments over the same source from its start, skips that many items
(by reading them) and goes on exactly where the saved one stopped. The state pickles; the whole
of it is checked before anything changes.

Here: the checks every state shares, and the packing loader's state (``pack-state``). The
bucketing loaders' (``loader-state``) is ``_loaders.bucket_state``, its version 1 ``_loaders.loader_state_v1``;
``strategy="auto"``'s is ``_loaders.choose_state``.
"""

from __future__ import annotations

import copy
import operator
from typing import Any

import numpy as np

from .._checks import PREFIX, fail, is_int
from .._distributed.lockstep import AgreedCosts
from .group_by_length_examples import check_spec
from .pack import repooled

__all__ = ["PACK_FORMAT", "check_arguments", "check_rng", "generator_of", "load_pack_state", "save_pack_state"]

#: The state of ``group_by_length(..., strategy="pack")``: explicit fields, not the loader's
#: attributes (a rename inside the loader changes nothing saved); the number is its version
#: (2: ``"lockstep"``, the steps agreed across processes, None on one process; 3: ``"counts"``
#: holds ``"extended"``, the rows of extended lengths yielded, which the plan held before).
PACK_FORMAT = "shapewatch.pack-state/3"
_PACK_BEFORE = "shapewatch.pack-state/2"  # loaded for a release (converted)


def _plain(obj: Any) -> dict[str, Any]:
    """``vars(obj)`` less callables (a clock, compile records, a bound method)."""
    return {k: v for k, v in vars(obj).items() if not callable(v)}


def _where(path: str) -> str:
    return f"load_state_dict: state{path}"


def _type_error(path: str, value: Any, expected: str) -> TypeError:
    return TypeError(f"{PREFIX} {_where(path)} is {type(value).__name__} {_short(value)}, expected "
                     f"{expected}; fix: pass the dict that state_dict() returned, unchanged")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_count(value: Any) -> bool:
    return is_int(value) and value >= 0


def _check_item(path: str, item: Any) -> None:
    """One example held by ``group_by_length``: ``(leaves, length)``, or one read and not parsed."""
    if type(item).__name__ == "_Raw" and isinstance(item, tuple) and len(item) == 2 and _is_count(item[1]):
        return
    if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], list)
            and all(isinstance(leaf, np.ndarray) for leaf in item[0]) and _is_count(item[1])):
        raise _type_error(path, item, "an example held: a tuple (list of numpy arrays, length)")


def check_rng(loader: Any, rng: Any, path: str = "['rng']", generator: Any = None) -> None:
    """``rng``, a saved ``bit_generator.state`` of the kind of ``loader``'s generator (``generator``
    when given, else ``loader._rng``), tried on a scratch generator: a junk state is refused here,
    before the loader reads anything."""
    kind = type((loader._rng if generator is None else generator).bit_generator)
    if not (isinstance(rng, dict) and rng.get("bit_generator") == kind.__name__ and isinstance(rng.get("state"), dict)):
        raise _type_error(path, rng, f"the state of a {kind.__name__} bit generator")
    try:
        kind().state = rng
    except Exception:  # noqa: BLE001 - numpy raises TypeError, ValueError or OverflowError
        raise _type_error(path, rng, f"the state of a {kind.__name__} bit generator (numpy refuses this "
                          "one)") from None


def generator_of(state: dict[str, Any]) -> np.random.Generator:
    """A generator at a saved ``bit_generator.state`` (checked by :func:`check_rng`)."""
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng


def legacy_extended(plan: Any) -> dict[int, int]:
    """The extended lengths a plan saved before ``Buckets`` was immutable had counted (kept in its
    ``__dict__``, which unpickling fills as it was), else none."""
    counted = vars(plan).get("extended") if hasattr(plan, "__dict__") else None
    return {int(k): int(v) for k, v in counted.items()} if isinstance(counted, dict) else {}


def clean_plan(plan: Any) -> Any:
    """A plan saved before ``Buckets`` was immutable, without the count it carried (the same plan)."""
    from dataclasses import replace

    from .._plan.buckets import Buckets

    return replace(plan) if isinstance(plan, Buckets) and "extended" in vars(plan) else plan


def check_extended(path: str, value: Any) -> None:
    """``counts["extended"]``: extended length -> batches yielded at it."""
    if not (isinstance(value, dict) and all(is_int(k) and k >= 1 and _is_count(v) for k, v in value.items())):
        raise _type_error(path, value, "a dict of extended length -> count (ints)")


def _check_like(path: str, fresh: dict[str, Any], got: Any, may_be_none: Any = ()) -> None:
    """Every field of ``fresh`` in ``got``, each of its type (a number: any real number; a field None
    in ``fresh``: anything; a field named in ``may_be_none``: also None), and no other."""
    if not isinstance(got, dict):
        raise _type_error(path, got, "a dict")
    missing, extra = sorted(set(fresh) - set(got)), sorted(set(got) - set(fresh))
    if missing or extra:
        raise ValueError(f"{PREFIX} {_where(path)} does not match this loader's: missing {missing or 'none'}, "
                         f"unknown {extra or 'none'}; fix: pass the dict that state_dict() returned, unchanged")
    for k, want in fresh.items():
        got_k, where = got[k], f"{path}[{k!r}]"
        if want is None or (got_k is None and k in may_be_none):
            continue
        if isinstance(want, bool):
            ok = isinstance(got_k, bool)
        elif isinstance(want, (int, float, np.floating, np.integer)):  # a count may become a float (horizon)
            ok = isinstance(got_k, (int, float, np.floating, np.integer)) and not isinstance(got_k, bool)
        else:
            ok = isinstance(got_k, type(want))
        if not ok:
            raise _type_error(where, got_k, f"a {type(want).__name__} (as this loader's)")


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (a != a and b != b)  # NaN pads like NaN
    except Exception:  # noqa: BLE001 - arrays and the like: compare their text
        return repr(a) == repr(b)


def _check_planner(loader: Any, planner: Any) -> None:
    if (planner is None) != (loader._online is None):
        raise ValueError(f"{PREFIX} load_state_dict: the state was saved by a loader that "
                         f"{'plans online' if planner is not None else 'has a fixed plan'}, and this one "
                         f"{'does not' if planner is not None else 'plans online'}; fix: make the new "
                         "loader with the arguments of the saved one")
    if planner is None:
        return
    if not isinstance(planner, dict) or not {"fields", "costs", "agreed"} <= set(planner):
        raise _type_error("['planner']", planner, "a dict with 'fields', 'costs' and 'agreed'")
    online = loader._online
    local = online.costs  # in step across processes: an AgreedCosts, its agreed answers apart
    fields = _planner_fields(online)
    # a field None in one run and set in another (a stream's horizon; a wait in flight at the save),
    # so also after an earlier load set it
    _check_like("['planner']['fields']", fields, planner["fields"], type(online).MAY_BE_NONE)
    _check_like("['planner']['costs']", _plain(local), planner["costs"])
    if planner["agreed"] is not None and not isinstance(planner["agreed"], dict):
        raise _type_error("['planner']['agreed']", planner["agreed"], "None or a dict")
    how = (planner["agreed"] or {}).get("how")
    if how is not None and not isinstance(how, str):
        raise _type_error("['planner']['agreed']['how']", how, "None or a str (process 0's words for its costs)")


def _planner_fields(online: Any) -> dict[str, Any]:
    """The online planner's fields a state holds (its costs saved apart; see ``UNSAVED``)."""
    return {k: v for k, v in _plain(online).items() if k not in type(online).UNSAVED}


def save_planner(online: Any, mark: Any = None) -> dict[str, Any] | None:
    """The online planner's state (its measurements and decisions), None without one. Its fields are
    its attributes, checked on load against a fresh planner's (:func:`_check_planner`). ``mark``:
    the planner's :meth:`~AutoPlanner.mark` where a round left a plan half made (an interrupt
    inside it, in a job): saved as it was there (the planner itself is left as it is)."""
    if online is None:
        return None
    costs = online.costs
    # the batch in flight is not timed: its clock (perf_counter) means nothing in another process;
    # the step meter holds a clock and this process's compile listener: a restored loader measures
    # afresh (its counts of waits start again)
    fields = _planner_fields(online) | {"_pending": None}
    costs_state = _plain(costs)
    cut = online.charge_cut()
    if cut is not None:  # the charge of the batch before, cut short by an interrupt: as it began
        fields |= {"_dirty": cut.dirty, "idle": cut.idle, "_waited": cut.waited}
        costs_state |= costs.at(cut.costs)
    if mark is not None:
        dirty, since, reserve_used, made = mark
        fields |= {"_dirty": dirty, "_since": since, "reserve_used": reserve_used,
                   "decisions": list(fields["decisions"][:made])}
    return {"fields": fields, "costs": costs_state, "agreed": costs.agreed if isinstance(costs, AgreedCosts) else None}


def load_planner(online: Any, planner: dict[str, Any]) -> None:
    """Restore a saved :func:`save_planner` (checked) into ``online``."""
    for k, v in planner["fields"].items():
        if k != "horizon" or v is not None:  # saved over a stream: this loader's own source may know its length
            setattr(online, k, v)
    for k, v in planner["costs"].items():
        setattr(online.costs, k, v)
    online.charged()  # a charge an interrupt cut short before the load: the state holds its own
    online.meter.resumed = True  # until it measures a step, its words name the run saved from
    if planner["agreed"] is not None and isinstance(online.costs, AgreedCosts):
        online.costs.agree(planner["agreed"])


#: iterators whose length_hint is exact: a list, a tuple or a range
_EXACT_LENGTH = (type(iter([])), type(iter(())), type(iter(range(0))))


def _skip_read(loader: Any, count: int) -> None:
    """Reads the ``count`` items the saved loader had read; a source known to be shorter (a list,
    a tuple, a range) is refused before anything is read, so the loader is left as it was. An
    earlier ``load_state_dict`` interrupted midway read some already: reading goes on from there."""
    skipping = loader._skipping  # not None: check_unread came first
    ended = (f"load_state_dict: the source ended before the {count} items the saved loader had read (a "
             "generator that raised has ended too); fix: give a new loader the same source from its start")
    done = skipping.read
    if count < done:
        raise fail(f"load_state_dict: an earlier load_state_dict of this loader read {done} items of its source "
                   f"already, more than the {count} that this state's loader had read; fix: make a new loader "
                   "over the source from its start and load this state into it")
    if type(loader._it) in _EXACT_LENGTH and count - done > operator.length_hint(loader._it):
        raise fail(ended)
    if not skipping.to(loader._it, count):
        raise fail(ended)


def loaded(loader: Any) -> None:
    """``load_state_dict``'s last line: the loader is whole again (see ``reading.Skipping``)."""
    loader._skipping.finished()


def check_loaded(loader: Any) -> None:
    """``state_dict()`` is refused after a ``load_state_dict`` left unfinished (see ``reading.Skipping``)."""
    if loader._skipping is not None:
        loader._skipping.check("state_dict()")


def check_keys_and_kind(loader: Any, state: dict[str, Any], fmt: str, keys: Any, strategy: str) -> None:
    """A ``fmt`` state's ``keys``, saved by a loader of this kind and ``strategy``, loaded before the
    first ``next()``."""
    missing, extra = sorted(set(keys) - set(state)), sorted(set(state) - set(keys))
    if missing or extra:
        raise fail(f"load_state_dict: the state's keys do not match a {fmt} state: missing "
                   f"{missing or 'none'}, unknown {extra or 'none'}; fix: pass the dict that state_dict() "
                   "returned, unchanged")
    if state["kind"] != type(loader).__name__ or state["strategy"] != strategy:
        raise fail(f"load_state_dict: the state is of a {state['kind']!r} ({state['strategy']!r}), not of a "
                   f"{type(loader).__name__} ({strategy!r}); fix: restore it into the same kind of loader")
    check_unread(loader)


def check_unread(loader: Any) -> None:
    """``load_state_dict`` comes before the first ``next()`` (again after one that was interrupted)."""
    if loader._skipping is None:
        raise fail("load_state_dict must be called before the loader's first next() (this one was asked for "
                   "a batch already, whether or not it yielded one); fix: call it on a new loader")


# -- the packing loader's state: explicit and versioned
_PACK_KEYS = ("format", "kind", "strategy", "arguments", "consumed", "done", "plan", "spec", "rng",
              "staged", "noted", "open", "ready", "observed", "counts", "lockstep")
_PACK_COUNTS = ("dropped", "truncated", "max_buffered", "batches", "warned", "shapes", "extended")
_PACK_KINDS = ("full", "flush", "end")


def _pack_arguments(loader: Any) -> dict[str, Any]:
    """The arguments a restored loader must have been made with."""
    return {"batch_size": loader._batch_size, "token_budget": loader._budget,
            "row_length": loader._row_length, "buffer_size": loader._buffer_size,
            "remainder": loader._remainder, "multiple_of": loader._multiple_of,
            "shuffle": loader._shuffle, "pad_value": loader._pad_value}


def save_pack_state(loader: Any) -> dict[str, Any]:
    """The state of a packing ``group_by_length`` (a deep copy: later batches do not change it)."""
    check_loaded(loader)
    loader._count_raw()  # an item read just before an interrupt is counted as read
    counts = {"dropped": loader.dropped, "truncated": loader.truncated, "max_buffered": loader.max_buffered,
              "batches": loader.batches, "warned": loader._warned, "shapes": dict(loader.shapes),
              "extended": dict(loader.extended)}
    return copy.deepcopy({
        "format": PACK_FORMAT, "kind": type(loader).__name__, "strategy": "pack",
        "arguments": _pack_arguments(loader), "consumed": loader._consumed, "done": loader._done,
        "plan": loader.plan, "spec": loader._spec, "rng": loader._rng.bit_generator.state,
        "staged": loader._staged, "noted": loader._noted, "open": loader._open, "ready": loader._ready,
        "observed": loader._observed, "counts": counts,
        "lockstep": None if loader._lockstep is None else loader._lockstep.state_dict(),
    })


def _check_rows(path: str, rows: Any) -> None:
    if not isinstance(rows, list) or not rows:
        raise _type_error(path, rows, "a non-empty list of rows (each a list of examples)")
    for r, row in enumerate(rows):
        if not isinstance(row, list) or not row:
            raise _type_error(f"{path}[{r}]", row, "a row: a non-empty list of examples")
        for k, item in enumerate(row):
            _check_item(f"{path}[{r}][{k}]", item)


def check_pack_state(loader: Any, state: Any) -> None:
    """Validate the whole of a packing loader's ``state`` before anything changes.

    Raises:
        TypeError: a field of the wrong type (named by its path in the state).
        ValueError: another format or version, kind or arguments, a field missing or unknown,
            or a loader that yielded already.
    """
    from .._plan.buckets import Buckets
    from .._plan.length_observer import LengthObserver

    if not isinstance(state, dict):
        raise _type_error("", state, f"a dict from state_dict() ({PACK_FORMAT!r})")
    if state.get("format") != PACK_FORMAT:
        got = state.get("format")
        hint = (" (a state of strategy='bucket': load it into a loader made with strategy='bucket')"
                if isinstance(got, str) and got.startswith("shapewatch.loader-state/") else "")
        raise fail(f"load_state_dict expects a dict from state_dict() ({PACK_FORMAT!r}); got format "
                   f"{got!r}{hint}")
    check_keys_and_kind(loader, state, PACK_FORMAT, _PACK_KEYS, "pack")
    arguments, own = state["arguments"], _pack_arguments(loader)
    check_arguments(arguments, own)
    for name in ("consumed", "noted"):
        if not _is_count(state[name]):
            raise _type_error(f"[{name!r}]", state[name], "an int >= 0")
    if not isinstance(state["done"], bool):
        raise _type_error("['done']", state["done"], "a bool")
    plan = state["plan"]
    if plan is not None and not (isinstance(plan, Buckets) and len(plan.boundaries) == 1):
        raise _type_error("['plan']", plan, "None or a one-boundary Buckets (the row length)")
    if state["spec"] is not None and type(state["spec"]).__name__ != "Spec":
        raise _type_error("['spec']", state["spec"], "None or the examples' Spec")
    if state["spec"] is not None:
        check_spec(state["spec"])
    check_rng(loader, state["rng"])
    if not isinstance(state["staged"], list):
        raise _type_error("['staged']", state["staged"], "a list of examples")
    for i, item in enumerate(state["staged"]):
        _check_item(f"['staged'][{i}]", item)
    if state["noted"] > len(state["staged"]):
        where = _where("['noted']")
        raise ValueError(f"{PREFIX} {where} is {state['noted']}, above "
                         f"the {len(state['staged'])} examples staged")
    if not isinstance(state["open"], dict):
        raise _type_error("['open']", state["open"], "a dict of row length -> list of examples")
    for length, items in state["open"].items():
        if not _is_count(length) or not isinstance(items, list):
            raise _type_error("['open']", {length: items}, "a dict of row length -> list of examples")
        for i, item in enumerate(items):
            _check_item(f"['open'][{length}][{i}]", item)
    if not isinstance(state["ready"], list):
        raise _type_error("['ready']", state["ready"], "a list of batches made ready")
    for i, entry in enumerate(state["ready"]):
        if not (isinstance(entry, tuple) and len(entry) == 3 and _is_count(entry[0])
                and entry[2] in _PACK_KINDS):
            raise _type_error(f"['ready'][{i}]", entry, "a tuple (row length, rows, 'full' | 'flush' | 'end')")
        _check_rows(f"['ready'][{i}][1]", entry[1])
    if not isinstance(state["observed"], LengthObserver):
        raise _type_error("['observed']", state["observed"], "a LengthObserver")
    counts = state["counts"]
    if not isinstance(counts, dict) or set(counts) != set(_PACK_COUNTS):
        raise _type_error("['counts']", counts, f"a dict of {', '.join(_PACK_COUNTS)}")
    for name in ("dropped", "truncated", "max_buffered", "batches"):
        if not _is_count(counts[name]):
            raise _type_error(f"['counts'][{name!r}]", counts[name], "an int >= 0")
    if not isinstance(counts["warned"], bool):
        raise _type_error("['counts']['warned']", counts["warned"], "a bool")
    shapes = counts["shapes"]
    if not isinstance(shapes, dict) or not all(
            isinstance(k, tuple) and len(k) == 2 and all(map(_is_count, k)) and _is_count(v)
            for k, v in shapes.items()):
        raise _type_error("['counts']['shapes']", shapes, "a dict of (rows, row length) -> count")
    check_extended("['counts']['extended']", counts["extended"])
    parsed = [item for item in state["staged"] if type(item).__name__ != "_Raw"]
    held = parsed or any(state["open"].values()) or state["ready"]
    if held and state["spec"] is None:
        raise _type_error("['spec']", None, "the examples' Spec (examples are held)")
    if (any(state["open"].values()) or state["ready"]) and plan is None:
        raise _type_error("['plan']", None, "a Buckets (examples are packed to its row length)")
    _check_pack_lockstep(loader, state["lockstep"])


def _check_pack_lockstep(loader: Any, saved: Any) -> None:
    """``state["lockstep"]``: None on one process, else the steps agreed, of a job of as many processes."""
    lockstep = loader._lockstep
    now = None if lockstep is None else [lockstep.session.me, lockstep.session.count]
    if saved is None and lockstep is None:
        return
    if saved is None or lockstep is None:
        was, into = ("on its own", f"process {now} (index, count) of a job in step") if saved is None else (
            "in step across processes", "a loader on its own")
        raise fail(f"load_state_dict: the state was saved by a loader {was} and is loaded into {into}: a "
                   "loader resumes only as it ran (the same process count, the same across_processes=); "
                   "fix: restart the job as the saved one ran")
    keys = {"processes", "steps", "schedule", "rounds", "ended"}
    if not isinstance(saved, dict) or set(saved) != keys:
        raise _type_error("['lockstep']", saved, f"None or a dict of {', '.join(sorted(keys))}")
    processes = saved["processes"]
    if not (isinstance(processes, list) and len(processes) == 2 and all(map(_is_count, processes))):
        raise _type_error("['lockstep']['processes']", processes, "[index, count]")
    if processes != now:
        raise fail(f"load_state_dict: state['lockstep']['processes'] is {processes} (index, count), but "
                   f"this is process {now}: a loader resumes only in a job of as many processes, each "
                   "with the state it saved; fix: restart the job with the same process count, each "
                   "process loading its own state")
    for name in ("steps", "rounds"):
        if not _is_count(saved[name]):
            raise _type_error(f"['lockstep'][{name!r}]", saved[name], "an int >= 0")
    if not (isinstance(saved["schedule"], list) and all(is_int(n) and n >= 1 for n in saved["schedule"])):
        raise _type_error("['lockstep']['schedule']", saved["schedule"], "a list of row lengths (ints >= 1)")
    if not isinstance(saved["ended"], bool):
        raise _type_error("['lockstep']['ended']", saved["ended"], "a bool")


def load_pack_state(loader: Any, state: dict[str, Any]) -> None:
    """Restore a packing loader's ``state`` into a fresh ``loader`` over the same source from its
    start (the items the saved one had read are read again and skipped). The whole state is
    checked first (:func:`check_pack_state`): a state refused changes nothing."""
    from collections import Counter

    state = _pack_upgraded(state)
    check_pack_state(loader, state)
    state = copy.deepcopy(state)
    _skip_read(loader, state["consumed"])
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    counts = state["counts"]
    (loader._consumed, loader._done, loader.plan, loader._spec, loader._rng, loader._staged, loader._noted,
     loader._open, loader._ready, loader._observed) = (
        state["consumed"], state["done"], state["plan"], state["spec"], rng, state["staged"], state["noted"],
        state["open"], state["ready"], state["observed"])
    loader.dropped, loader.truncated, loader.max_buffered = counts["dropped"], counts["truncated"], counts["max_buffered"]
    loader.batches, loader._warned, loader.shapes = counts["batches"], counts["warned"], Counter(counts["shapes"])
    loader._extended.restore(loader.plan, counts["extended"])
    if loader.plan is not None:
        loader._open = repooled(loader._open, loader._pool_of)
    if state["lockstep"] is not None:
        loader._lockstep.load_state_dict(state["lockstep"])
    loaded(loader)


def _pack_upgraded(state: Any) -> Any:
    """A ``pack-state/2`` (saved before its extended rows were the loader's) as a ``pack-state/3``:
    the count its plan carried, if any, in ``counts``. Anything else as it is (checked next)."""
    if not (isinstance(state, dict) and state.get("format") == _PACK_BEFORE and isinstance(state.get("counts"), dict)
            and "extended" not in state["counts"]):
        return state
    plan = state.get("plan")
    return state | {"format": PACK_FORMAT, "plan": clean_plan(plan),
                    "counts": state["counts"] | {"extended": legacy_extended(plan)}}


def check_arguments(arguments: Any, own: dict[str, Any]) -> None:
    """A state's ``arguments`` are the loader's own: the same keys, each of its type and equal."""
    if not isinstance(arguments, dict):
        raise _type_error("['arguments']", arguments, "a dict")
    if set(arguments) != set(own):
        raise fail(f"load_state_dict: state['arguments'] has keys {sorted(arguments)}, expected "
                   f"{sorted(own)}; fix: pass the dict that state_dict() returned, unchanged")
    for name, want in own.items():
        got, path = arguments[name], f"['arguments'][{name!r}]"
        if type(got) is not type(want):
            raise _type_error(path, got, f"{type(want).__name__} (the loader's own is {_short(want)})")
        if not _same(got, want):
            raise ValueError(f"{PREFIX} {_where(path)} is {_short(got)}, but this loader was made with "
                             f"{_short(want)}; fix: make the new loader with the arguments of the saved one")
