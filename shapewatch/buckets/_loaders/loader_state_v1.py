"""Loading a state saved as ``"shapewatch.loader-state/1"`` (private): kept for one release.

That format was the loader's attributes themselves (``vars(loader)``, deep-copied), so any
rename inside a loader changed it under the same tag. ``state_dict()`` now saves the explicit
``"shapewatch.loader-state/2"`` (``_loaders.bucket_state``); a version 1 state is checked here as it was
checked before (every field a fresh loader of its kind had, each of its type, the arguments of
their values, no other), then converted to version 2, which is checked again and loaded. Nothing
changes in the loader until both checks pass.

The fields of version 1 are frozen here (:data:`V1_FIELDS`): a field a loader no longer has
under that name must be mapped in :func:`convert` before it is renamed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import PREFIX, fail, is_int
from .loader_state import (
    _check_item,
    _check_planner,
    _is_count,
    _same,
    _short,
    _type_error,
    _where,
    check_unread,
    legacy_extended,
)

__all__ = ["V1_FORMAT", "V1_FIELDS", "check_v1", "convert"]

V1_FORMAT = "shapewatch.loader-state/1"
#: Every field a version 1 state could hold, per loader kind: a state holds those a fresh loader
#: of its arguments had (``_prior`` with a prior and no plan; the last ones only in step across
#: processes; ``_length_of`` only when ``bucketed`` was made without it).
V1_FIELDS = {
    "GroupByLength": ("_batch_size", "_budget", "_multiple_of", "_buffer_size", "_remainder", "plan",
                      "_max_buckets", "_auto", "_shuffle", "_rng", "_pad_value", "_spec", "_staged", "_noted",
                      "_queues", "_ready", "_done", "dropped", "truncated", "max_buffered", "batches", "shapes",
                      "decisions", "_warned", "_observed", "_prior", "_consumed",
                      "_schedule", "_order", "_yields", "_used", "_sent", "_size"),
    "Bucketed": ("_multiple_of", "_warmup", "plan", "_axis", "_length_of", "_max_buckets", "_prior", "_observed",
                 "decisions", "_pad_value", "_return_mask", "_held", "_done", "seen", "truncated", "shapes",
                 "_consumed", "_sent", "_schedule", "_order", "_used", "_size", "_template"),
}


#: The fields a version 1 state held only in step across processes (the scheduler's now, and the template).
_IN_STEP = ("_schedule", "_order", "_yields", "_used", "_sent", "_size", "_template")


def _fresh(loader: Any) -> dict[str, Any]:
    """The version 1 fields of a fresh ``loader``, as ``state_dict()`` saved them (callables left out)."""
    scheduler = loader._scheduler
    own = {k: v for k, v in vars(loader).items() if k not in _IN_STEP}
    if scheduler.across:  # held by the loader itself then
        own |= scheduler.v1_fields() | ({"_template": None} if type(loader).__name__ == "Bucketed" else {})
    return {k: own[k] for k in V1_FIELDS.get(type(loader).__name__, ()) if k in own and not callable(own[k])}


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
    from .bucketed_batches import Held

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
#: derived now, or held only in step across processes now: ignored in states saved before
_LEGACY = {"GroupByLength": ("_held",), "Bucketed": ("_sent",)}




def _check_fields(loader: Any, fields: Any) -> None:
    """Every field a fresh ``loader`` has, of its type (arguments: of its value), and no other."""
    if not isinstance(fields, dict):
        raise _type_error("['fields']", fields, "a dict")
    fresh = _fresh(loader)
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




def check_v1(loader: Any, state: Any) -> None:
    """Validate the whole of a version 1 ``state`` for ``loader`` before anything changes.

    Raises:
        TypeError: a field of the wrong type (named by its path in the state).
        ValueError: a state of another format, kind, process count or arguments, a field
            missing or unknown, or a loader that yielded already.
    """
    assert isinstance(state, dict) and state.get("format") == V1_FORMAT
    missing = sorted({"kind", "fields", "planner", "processes", "steps"} - set(state))
    if missing:
        raise fail(f"load_state_dict: the state has no {', '.join(map(repr, missing))}; fix: pass the dict "
                   "that state_dict() returned, unchanged")
    if state["kind"] != type(loader).__name__:
        raise fail(f"load_state_dict: the state is of a {state['kind']}, not of a {type(loader).__name__}; "
                   "fix: restore it into the same kind of loader")
    now = loader._scheduler.processes
    saved = state["processes"]
    if saved is not None and not (isinstance(saved, list) and len(saved) == 2 and all(map(_is_count, saved))):
        raise _type_error("['processes']", saved, "None or [index, count]")
    if (saved is None) != (now is None) or (now and now[1] != saved[1]):
        raise fail(f"load_state_dict: the state was saved by process {saved} (index, count) "
                   f"and is loaded into {now}: a loader resumes only in a job of as many processes, "
                   "each process with its own state; fix: restart the job with the same process count")
    if state["steps"] is not None and not _is_count(state["steps"]):
        raise _type_error("['steps']", state["steps"], "None or an int >= 0")
    check_unread(loader)
    _check_fields(loader, state["fields"])
    _check_planner(loader, state["planner"])


def _rng_state(generator: Any) -> Any:
    return generator.bit_generator.state if isinstance(generator, np.random.Generator) else generator


def convert(loader: Any, state: dict[str, Any], v2_format: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A version 1 ``state`` (checked by :func:`check_v1`) as the version 2 state (``v2_format``) of
    ``loader``, made with ``arguments`` (those version 1 checked). Reads the state, changes nothing
    (the loader deep-copies what it keeps)."""
    f = state["fields"]
    plan = f["plan"]
    lockstep = None
    kind = type(loader).__name__
    out: dict[str, Any] = {
        "format": v2_format, "kind": kind, "arguments": arguments,
        "consumed": f["_consumed"], "done": f["_done"],
        "plan": None if plan is None else plan.to_dict(), "plan_stats": None if plan is None else plan.stats,
    }
    if kind == "GroupByLength":
        if state["processes"] is not None:
            lockstep = {"processes": state["processes"], "steps": state["steps"], "schedule": f["_schedule"],
                        "order": _rng_state(f["_order"]), "yields": f["_yields"], "used": f["_used"],
                        "sent": f["_sent"]}
        out |= {"strategy": "bucket", "spec": f["_spec"], "rng": _rng_state(f["_rng"]), "staged": f["_staged"],
                "noted": f["_noted"], "queues": f["_queues"], "ready": f["_ready"], "observed": f["_observed"],
                "counts": {"dropped": f["dropped"], "truncated": f["truncated"], "max_buffered": f["max_buffered"],
                           "batches": f["batches"], "warned": f["_warned"], "shapes": dict(f["shapes"]),
                           "extended": legacy_extended(plan)}}
    else:
        if state["processes"] is not None:
            lockstep = {"processes": state["processes"], "steps": state["steps"], "schedule": f["_schedule"],
                        "order": _rng_state(f["_order"]), "used": f["_used"], "sent": f["_sent"],
                        "template": f["_template"]}
        out |= {"held": f["_held"], "observed": f["_observed"],
                "counts": {"seen": f["seen"], "truncated": f["truncated"], "shapes": dict(f["shapes"]),
                           "extended": legacy_extended(plan)}}
    return out | {"planner": state["planner"], "lockstep": lockstep}
