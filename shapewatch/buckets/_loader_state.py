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
from typing import Any

from ._checks import fail

__all__ = ["Resumable", "load_state", "save_state"]

FORMAT = "shapewatch.loader-state/1"
_SKIP = ("_it", "_session", "_history")


def _plain(obj: Any) -> dict[str, Any]:
    """``vars(obj)`` less callables (a clock, compile records, a bound method)."""
    return {k: v for k, v in vars(obj).items() if not callable(v)}


def save_state(loader: Any) -> dict[str, Any]:
    """The state of ``loader`` (a deep copy: later batches do not change it)."""
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


def load_state(loader: Any, state: dict[str, Any], skip: bool = True) -> None:
    """Restore ``state`` into a fresh ``loader`` over the same source from its start (``skip``:
    read the items the saved loader had read; else the source is already past them)."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise fail(f"load_state_dict expects a dict from state_dict() ({FORMAT!r}); got "
                   f"{type(state).__name__} with format {getattr(state, 'get', lambda k: None)('format')!r}")
    if state["kind"] != type(loader).__name__:
        raise fail(f"load_state_dict: the state is of a {state['kind']}, not of a {type(loader).__name__}; "
                   "fix: restore it into the same kind of loader")
    session = loader._session
    now = None if session is None else [session.me, session.count]
    if (state["processes"] is None) != (now is None) or (now and now[1] != state["processes"][1]):
        raise fail(f"load_state_dict: the state was saved by process {state['processes']} (index, count) "
                   f"and is loaded into {now}: a loader resumes only in a job of as many processes, "
                   "each process with its own state; fix: restart the job with the same process count")
    if loader._consumed:
        raise fail("load_state_dict must be called before the loader yields anything; fix: call it on a "
                   "new loader")
    state = copy.deepcopy(state)
    for _ in range(state["fields"]["_consumed"] if skip else 0):
        try:
            next(loader._it)
        except StopIteration:
            raise fail(f"load_state_dict: the source ended before the {state['fields']['_consumed']} items "
                       "the saved loader had read; fix: give the new loader the same source from its "
                       "start") from None
    for k, v in state["fields"].items():
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

        Raises:
            ValueError: a state of another loader kind, process count, or a shorter source.
        """
        load_state(self, state)
