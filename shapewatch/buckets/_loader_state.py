"""Saving and restoring a loader's position: ``state_dict()`` / ``load_state_dict()``.

A loader's state is everything it holds and knows, less its source and the
callables it was given: the examples (or batches) read and not yet yielded, the
plan, the random generators, the online planner's measurements and decisions, and,
in a multi-process job, the steps agreed and not yet taken. With it goes how many
items were taken from the source; ``load_state_dict`` on a new loader, made with the
same arguments over the same source from its start, skips that many items (by
reading them) and goes on exactly where the saved one stopped. The state pickles.
"""

from __future__ import annotations

import copy
import operator
from typing import Any

import numpy as np

from ._checks import PREFIX, fail, is_int

__all__ = ["PACK_FORMAT", "Resumable", "check_rng", "load_pack_state", "load_state", "save_pack_state",
           "save_state"]

FORMAT = "shapewatch.loader-state/1"
#: The state of ``group_by_length(..., strategy="pack")``: explicit fields, not the loader's
#: attributes (a rename inside the loader changes nothing saved); the number is its version
#: (2: ``"lockstep"``, the steps agreed across processes, None on one process).
PACK_FORMAT = "shapewatch.pack-state/2"
_SKIP = ("_it", "_session", "_history")


def _plain(obj: Any) -> dict[str, Any]:
    """``vars(obj)`` less callables (a clock, compile records, a bound method)."""
    return {k: v for k, v in vars(obj).items() if not callable(v)}


def save_state(loader: Any) -> dict[str, Any]:
    """The state of ``loader`` (a deep copy: later batches do not change it)."""
    loader._count_raw()  # an item read just before an interrupt is counted as read
    fields = {k: v for k, v in _plain(loader).items() if k not in _SKIP and k != "_online"}
    online = loader._online
    planner = None
    if online is not None:
        costs = online.costs
        local = getattr(costs, "local", costs)  # several processes: the agreed view around it
        # the batch in flight is not timed: its clock (perf_counter) means nothing in another process
        # the step meter holds a clock and this process's compile listener: a restored loader
        # measures afresh (its counts of waits start again)
        planner = {"fields": {k: v for k, v in _plain(online).items() if k not in ("costs", "meter")}
                   | {"_pending": None},
                   "costs": _plain(local), "agreed": getattr(costs, "agreed", None)}
    session = loader._session
    return copy.deepcopy({
        "format": FORMAT, "kind": type(loader).__name__, "fields": fields, "planner": planner,
        "processes": None if session is None else [session.me, session.count],
        "steps": None if session is None else session.steps,
    })


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


def check_rng(loader: Any, rng: Any) -> None:
    """``rng``, a saved ``bit_generator.state`` of ``loader``'s kind, tried on a scratch generator:
    a junk state is refused here, before the loader reads anything."""
    kind = type(loader._rng.bit_generator)
    if not (isinstance(rng, dict) and rng.get("bit_generator") == kind.__name__ and isinstance(rng.get("state"), dict)):
        raise _type_error("['rng']", rng, f"the state of a {kind.__name__} bit generator")
    try:
        kind().state = rng
    except Exception:  # noqa: BLE001 - numpy raises TypeError, ValueError or OverflowError
        raise _type_error("['rng']", rng, f"the state of a {kind.__name__} bit generator (numpy refuses this "
                          "one)") from None


def _check_like(path: str, fresh: dict[str, Any], got: Any) -> None:
    """Every field of ``fresh`` in ``got``, each of its type (a number: any real number; a field None
    in ``fresh``: anything), and no other."""
    if not isinstance(got, dict):
        raise _type_error(path, got, "a dict")
    missing, extra = sorted(set(fresh) - set(got)), sorted(set(got) - set(fresh))
    if missing or extra:
        raise ValueError(f"{PREFIX} {_where(path)} does not match this loader's: missing {missing or 'none'}, "
                         f"unknown {extra or 'none'}; fix: pass the dict that state_dict() returned, unchanged")
    for k, want in fresh.items():
        got_k, where = got[k], f"{path}[{k!r}]"
        if want is None:
            continue
        if isinstance(want, bool):
            ok = isinstance(got_k, bool)
        elif isinstance(want, (int, float, np.floating, np.integer)):  # a count may become a float (horizon)
            ok = isinstance(got_k, (int, float, np.floating, np.integer)) and not isinstance(got_k, bool)
        else:
            ok = isinstance(got_k, type(want))
        if not ok:
            raise _type_error(where, got_k, f"a {type(want).__name__} (as this loader's)")


def _check_group_by_length(fields: dict[str, Any]) -> None:
    for i, item in enumerate(fields["_staged"]):
        _check_item(f"['fields']['_staged'][{i}]", item)
    for bucket, queue in fields["_queues"].items():
        if not _is_count(bucket) or not isinstance(queue, list):
            raise _type_error("['fields']['_queues']", {bucket: queue}, "a dict of bucket -> list of examples")
        for i, item in enumerate(queue):
            _check_item(f"['fields']['_queues'][{bucket}][{i}]", item)
    for i, entry in enumerate(fields["_ready"]):
        if not (isinstance(entry, tuple) and len(entry) == 3 and _is_count(entry[0])
                and isinstance(entry[1], list) and entry[2] in ("full", "flush", "end")):
            raise _type_error(f"['fields']['_ready'][{i}]", entry, "a tuple (bucket, examples, 'full' | "
                              "'flush' | 'end')")
        for j, item in enumerate(entry[1]):
            _check_item(f"['fields']['_ready'][{i}][1][{j}]", item)
    parsed = [item for item in fields["_staged"] if type(item).__name__ != "_Raw"]
    held = parsed or any(fields["_queues"].values()) or fields["_ready"]
    if held and type(fields["_spec"]).__name__ != "Spec":  # one read, not parsed yet, needs none
        raise _type_error("['fields']['_spec']", fields["_spec"], "the examples' Spec (examples are held)")
    if (any(fields["_queues"].values()) or fields["_ready"]) and fields["plan"] is None:
        raise _type_error("['fields']['plan']", None, "a Buckets (examples are queued under it)")
    if fields["_noted"] > len(fields["_staged"]):
        where = _where("['fields']['_noted']")
        raise ValueError(f"{PREFIX} {where} is "
                         f"{fields['_noted']}, above the {len(fields['_staged'])} examples staged")


def _check_bucketed(fields: dict[str, Any]) -> None:
    from ._bucketed_batches import Held

    for i, held in enumerate(fields["_held"]):
        raw = type(held).__name__ == "_Raw" and isinstance(held, tuple) and len(held) == 2
        if not raw and not (isinstance(held, Held) and _is_count(held.size)
                            and isinstance(held.lengths, np.ndarray)):
            raise _type_error(f"['fields']['_held'][{i}]", held, "a batch held (as state_dict() saves it)")


#: Fields of a loader's state whose values a fresh loader made with the same arguments has too:
#: a state of a loader made otherwise is refused.
_ARGUMENTS = ("_batch_size", "_budget", "_buffer_size", "_remainder", "_multiple_of", "_max_buckets",
              "_auto", "_shuffle", "_pad_value", "_axis", "_warmup", "_return_mask")
#: Fields whose value may be None in a fresh loader and something else in a saved one.
_LATER = {"plan": "Buckets", "_spec": "Spec", "_prior": "LengthObserver"}
#: Fields of an argument a loader was made without (None then, and in all its states).
_NOT_GIVEN = ("_length_of",)
_LEGACY = {"GroupByLength": ("_held",)}  # derived now: ignored in states saved before


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (a != a and b != b)  # NaN pads like NaN
    except Exception:  # noqa: BLE001 - arrays and the like: compare their text
        return repr(a) == repr(b)


def _check_fields(loader: Any, fields: Any) -> None:
    """Every field a fresh ``loader`` has, of its type (arguments: of its value), and no other."""
    if not isinstance(fields, dict):
        raise _type_error("['fields']", fields, "a dict")
    fresh = {k: v for k, v in _plain(loader).items() if k not in _SKIP and k != "_online"}
    legacy = _LEGACY.get(type(loader).__name__, ())
    missing = sorted(set(fresh) - set(fields))
    extra = sorted(set(fields) - set(fresh) - set(legacy))
    if missing or extra:
        raise ValueError(f"{PREFIX} load_state_dict: the state's fields do not match a "
                         f"{type(loader).__name__}'s: missing {missing or 'none'}, unknown {extra or 'none'}; "
                         "fix: pass the dict that state_dict() returned, unchanged, to a loader of its kind")
    for k in legacy:
        if k in fields and not _is_count(fields[k]):
            raise _type_error(f"['fields'][{k!r}]", fields[k], "an int >= 0 (a count, read again from the rest)")
    for k, want in fresh.items():
        got, path = fields[k], f"['fields'][{k!r}]"
        if k in _ARGUMENTS:
            if type(got) is not type(want):
                raise _type_error(path, got, f"{type(want).__name__} (the loader's own is {_short(want)})")
            if not _same(got, want):
                raise ValueError(f"{PREFIX} {_where(path)} is {_short(got)}, but this loader was made with "
                                 f"{_short(want)}; fix: make the new loader with the arguments of the saved one")
        elif want is None and k in _LATER:
            if got is not None and type(got).__name__ != _LATER[k]:
                raise _type_error(path, got, f"None or a {_LATER[k]}")
        elif want is None and k in _NOT_GIVEN:  # an argument not given: None in every state of this loader
            if got is not None:
                raise _type_error(path, got, "None (as this loader's: it was made without it)")
        elif isinstance(want, bool):
            if not isinstance(got, bool):
                raise _type_error(path, got, "a bool")
        elif is_int(want):
            if not _is_count(got):
                raise _type_error(path, got, "an int >= 0") if not is_int(got) else ValueError(
                    f"{PREFIX} {_where(path)} is {got}, expected an int >= 0")
        elif want is not None and not isinstance(got, type(want)):
            raise _type_error(path, got, f"a {type(want).__name__}")
    shapes = fields.get("shapes")
    if isinstance(shapes, dict) and not all(map(_is_count, shapes.values())):
        raise _type_error("['fields']['shapes']", shapes, "counts (ints >= 0) of the shapes yielded")
    if type(loader).__name__ == "GroupByLength":
        _check_group_by_length(fields)
    else:
        _check_bucketed(fields)


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
    local = getattr(online.costs, "local", online.costs)
    fields = {k: v for k, v in _plain(online).items() if k not in ("costs", "meter")}
    _check_like("['planner']['fields']", fields, planner["fields"])
    _check_like("['planner']['costs']", _plain(local), planner["costs"])
    if planner["agreed"] is not None and not isinstance(planner["agreed"], dict):
        raise _type_error("['planner']['agreed']", planner["agreed"], "None or a dict")


def check_state(loader: Any, state: Any) -> None:
    """Validate the whole of ``state`` for ``loader`` before anything changes.

    Raises:
        TypeError: a field of the wrong type (named by its path in the state).
        ValueError: a state of another format, kind, process count or arguments, a field
            missing or unknown, or a loader that yielded already.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise fail(f"load_state_dict expects a dict from state_dict() ({FORMAT!r}); got "
                   f"{type(state).__name__} with format {getattr(state, 'get', lambda k: None)('format')!r}")
    missing = sorted({"kind", "fields", "planner", "processes", "steps"} - set(state))
    if missing:
        raise fail(f"load_state_dict: the state has no {', '.join(map(repr, missing))}; fix: pass the dict "
                   "that state_dict() returned, unchanged")
    if state["kind"] != type(loader).__name__:
        raise fail(f"load_state_dict: the state is of a {state['kind']}, not of a {type(loader).__name__}; "
                   "fix: restore it into the same kind of loader")
    session = loader._session
    now = None if session is None else [session.me, session.count]
    saved = state["processes"]
    if saved is not None and not (isinstance(saved, list) and len(saved) == 2 and all(map(_is_count, saved))):
        raise _type_error("['processes']", saved, "None or [index, count]")
    if (saved is None) != (now is None) or (now and now[1] != saved[1]):
        raise fail(f"load_state_dict: the state was saved by process {saved} (index, count) "
                   f"and is loaded into {now}: a loader resumes only in a job of as many processes, "
                   "each process with its own state; fix: restart the job with the same process count")
    if state["steps"] is not None and not _is_count(state["steps"]):
        raise _type_error("['steps']", state["steps"], "None or an int >= 0")
    if loader._consumed:
        raise fail("load_state_dict must be called before the loader yields anything; fix: call it on a "
                   "new loader")
    _check_fields(loader, state["fields"])
    _check_planner(loader, state["planner"])


#: iterators whose length_hint is exact: a list, a tuple or a range
_EXACT_LENGTH = (type(iter([])), type(iter(())), type(iter(range(0))))


def _skip_read(loader: Any, count: int) -> None:
    """Reads the ``count`` items the saved loader had read; a source known to be shorter (a list,
    a tuple, a range) is refused before anything is read, so the loader is left as it was."""
    ended = (f"load_state_dict: the source ended before the {count} items the saved loader had read; fix: "
             "give the new loader the same source from its start")
    if type(loader._it) in _EXACT_LENGTH and count > operator.length_hint(loader._it):
        raise fail(ended)
    for _ in range(count):
        try:
            next(loader._it)
        except StopIteration:
            raise fail(ended) from None


def load_state(loader: Any, state: dict[str, Any], skip: bool = True) -> None:
    """Restore ``state`` into a fresh ``loader`` over the same source from its start (``skip``:
    read the items the saved loader had read; else the source is already past them). The whole
    state is checked first (:func:`check_state`): a state refused changes nothing."""
    check_state(loader, state)
    session = loader._session
    state = copy.deepcopy(state)
    _skip_read(loader, state["fields"]["_consumed"] if skip else 0)
    for k, v in state["fields"].items():
        if k not in _LEGACY.get(type(loader).__name__, ()):
            setattr(loader, k, v)
    if state["planner"] is not None and loader._online is not None:
        online = loader._online
        for k, v in state["planner"]["fields"].items():
            setattr(online, k, v)
        local = getattr(online.costs, "local", online.costs)
        for k, v in state["planner"]["costs"].items():
            setattr(local, k, v)
        if state["planner"]["agreed"] is not None and hasattr(online.costs, "agree"):
            online.costs.agree(state["planner"]["agreed"])
        loader.decisions = online.decisions
    if session is not None:
        session.steps = state["steps"]


# -- the packing loader's state: explicit and versioned
_PACK_KEYS = ("format", "kind", "strategy", "arguments", "consumed", "done", "plan", "spec", "rng",
              "staged", "noted", "open", "ready", "observed", "counts", "lockstep")
_PACK_COUNTS = ("dropped", "truncated", "max_buffered", "batches", "warned", "shapes")
_PACK_KINDS = ("full", "flush", "end")


def _pack_arguments(loader: Any) -> dict[str, Any]:
    """The arguments a restored loader must have been made with."""
    return {"batch_size": loader._batch_size, "token_budget": loader._budget,
            "row_length": loader._row_length, "buffer_size": loader._buffer_size,
            "remainder": loader._remainder, "multiple_of": loader._multiple_of,
            "shuffle": loader._shuffle, "pad_value": loader._pad_value}


def save_pack_state(loader: Any) -> dict[str, Any]:
    """The state of a packing ``group_by_length`` (a deep copy: later batches do not change it)."""
    loader._count_raw()  # an item read just before an interrupt is counted as read
    counts = {"dropped": loader.dropped, "truncated": loader.truncated, "max_buffered": loader.max_buffered,
              "batches": loader.batches, "warned": loader._warned, "shapes": dict(loader.shapes)}
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
    from ._buckets import Buckets
    from ._length_observer import LengthObserver

    if not isinstance(state, dict):
        raise _type_error("", state, f"a dict from state_dict() ({PACK_FORMAT!r})")
    if state.get("format") != PACK_FORMAT:
        got = state.get("format")
        hint = (" (a state of strategy='bucket': load it into a loader made with strategy='bucket')"
                if got == FORMAT else "")
        raise fail(f"load_state_dict expects a dict from state_dict() ({PACK_FORMAT!r}); got format "
                   f"{got!r}{hint}")
    missing = sorted(set(_PACK_KEYS) - set(state))
    extra = sorted(set(state) - set(_PACK_KEYS))
    if missing or extra:
        raise fail(f"load_state_dict: the state's keys do not match a {PACK_FORMAT} state: missing "
                   f"{missing or 'none'}, unknown {extra or 'none'}; fix: pass the dict that state_dict() "
                   "returned, unchanged")
    if state["kind"] != type(loader).__name__ or state["strategy"] != "pack":
        raise fail(f"load_state_dict: the state is of a {state['kind']!r} ({state['strategy']!r}), not of "
                   f"a {type(loader).__name__} ('pack'); fix: restore it into the same kind of loader")
    if loader._consumed:
        raise fail("load_state_dict must be called before the loader yields anything; fix: call it on a "
                   "new loader")
    arguments, own = state["arguments"], _pack_arguments(loader)
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
    if state["lockstep"] is not None:
        loader._lockstep.load_state_dict(state["lockstep"])


class Resumable:
    """``state_dict()`` / ``load_state_dict()``, as both loaders have them."""

    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands (picklable): pass it to :meth:`load_state_dict` of a new
        loader, made with the same arguments over the same source from its start, to go on
        with exactly the batches that were left (in a multi-process job: on every process,
        each with its own state)."""
        return save_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (see :meth:`state_dict`); call it before the first batch.

        The whole state is checked before anything changes: a state refused leaves this
        loader as it was (usable, or ready for another state).

        Raises:
            TypeError: a field of the wrong type, named by its path in the state.
            ValueError: a state of another loader kind, process count or arguments, a field
                missing or unknown, or a shorter source.
        """
        load_state(self, state)
