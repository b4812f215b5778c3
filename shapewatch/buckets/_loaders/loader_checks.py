"""Argument checks both loaders share: ``buckets``, ``max_buckets``, the ``"auto"`` numbers, ``max_shapes``.

:func:`~shapewatch.buckets.bucketed` and :func:`~shapewatch.buckets.group_by_length`
validate these arguments the same way, with the same messages, here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._checks import (
    check_callable,
    check_int,
    check_multiple_of,
    check_number,
    fail,
    fail_type,
    is_int,
)
from .._online.auto_planner import DEFAULT_MAX_SHAPES
from .._plan.buckets import Buckets
from .._plan.length_observer import LengthObserver

__all__ = ["check_auto", "check_buckets", "check_flag", "check_ignored", "check_max_buckets", "check_max_shapes",
           "check_prior_type", "check_types"]


def check_flag(name: str, value: Any) -> bool:
    """An on/off option: a bool (or numpy bool, or the int 0 or 1), else a TypeError naming it."""
    if isinstance(value, bool | np.bool_) or (is_int(value) and value in (0, 1)):
        return bool(value)
    raise fail_type(f"{name} must be a bool; got {type(value).__name__} {value!r}")


def _check_buckets_type(buckets: Any) -> None:
    if buckets is None or isinstance(buckets, Buckets):
        return
    if isinstance(buckets, str | bytes | bytearray | Mapping) or not hasattr(buckets, "__iter__"):
        raise fail_type(
            f"buckets must be None, a Buckets or a sequence of ints; got {type(buckets).__name__} {buckets!r}"
        )


def check_prior_type(prior: Any) -> None:
    """Raise (a TypeError) unless ``prior`` is None or of a kind ``prior=`` reads."""
    if prior is None or isinstance(prior, LengthObserver | dict | str | os.PathLike):
        return
    raise fail_type(
        "prior must be None, a LengthObserver, a saved loader report or LengthObserver (dict), or the "
        f"path of a JSON file of one; got {type(prior).__name__} {prior!r}"
    )


def check_types(*, buckets: Any, max_buckets: Any, multiple_of: Any, numbers: dict[str, Any],
                clock: Any, prior: Any, flags: dict[str, Any]) -> None:
    """The types (and the cost numbers' values) of the options that choose a planning mode,
    checked before :func:`check_ignored` reads them, so that a wrong one is named as itself
    (``max_buckets=None``: a wrong type, not a mode) and before anything is read."""
    check_multiple_of(multiple_of)  # above 2**40 its first boundary would be refused at next()
    check_max_buckets(max_buckets, allow_auto=True)
    _check_buckets_type(buckets)
    for name, value in numbers.items():
        if value is not None:
            check_number(name, value)
    check_callable("clock", clock, optional=True)
    check_prior_type(prior)
    for name, value in flags.items():
        check_flag(name, value)


def check_buckets(buckets: Any, multiple_of: int) -> Buckets | None:
    """The loader's fixed plan: None, the given :class:`Buckets`, or boundaries made one."""
    if buckets is None or isinstance(buckets, Buckets):
        return buckets
    _check_buckets_type(buckets)
    try:
        bounds = tuple(buckets)
    except TypeError:
        raise fail_type(
            f"buckets must be None, a Buckets or a sequence of ints; got {type(buckets).__name__} {buckets!r}"
        ) from None
    return Buckets(bounds, multiple_of=multiple_of, overflow="extend")


def check_max_buckets(max_buckets: Any, allow_auto: bool) -> None:
    """Raise unless ``max_buckets`` is an int >= 1 (or ``"auto"``, where allowed)."""
    if allow_auto and isinstance(max_buckets, str) and max_buckets == "auto":
        return
    extra = " or 'auto'" if allow_auto else ""
    if not is_int(max_buckets):
        raise fail_type(f"max_buckets must be an integer >= 1{extra}; got {type(max_buckets).__name__} "
                        f"{max_buckets!r}")
    if max_buckets < 1:
        raise fail(f"max_buckets must be an integer >= 1{extra}; got {max_buckets!r}")


def check_auto(max_buckets: Any, buckets: Any, auto: dict[str, Any]) -> bool:
    """Whether the loader plans online: ``max_buckets="auto"``, no buckets and no cost numbers.

    With all three numbers (``compile_seconds``, ``steps``, ``step_seconds``) it plans
    once with :func:`propose`; some but not all of them is an error.
    """
    if max_buckets != "auto" or buckets is not None:
        return False
    missing = [name for name, value in auto.items() if value is None]
    if missing and len(missing) < len(auto):
        raise fail(
            "max_buckets='auto' takes all three numbers of a fixed cost model (compile_seconds, "
            "steps, step_seconds) or none of them (then it measures them); "
            f"missing {', '.join(missing)}"
        )
    return bool(missing)


def check_max_shapes(max_shapes: Any, records: Any) -> int:
    """The cap on distinct shapes: given, else the linked step's budget, else the default."""
    if max_shapes is None:
        max_shapes = getattr(records, "max_shapes", None) or DEFAULT_MAX_SHAPES
    max_shapes = check_int("max_shapes", max_shapes, 1)
    if records is not None and not callable(records):
        raise fail_type(f"compile_records must be None or a callable returning records; got "
                        f"{type(records).__name__} {records!r}")
    return max_shapes


def check_ignored(loader: str, *, buckets: Any, max_buckets: Any, multiple_of: int,
                  numbers: dict[str, Any], online: dict[str, Any], prior: Any) -> None:
    """Refuse options the planning mode these arguments choose would ignore, naming them.

    The modes: a fixed plan (``buckets=``) takes none of the planning options; a plan made
    once with :func:`propose` (``max_buckets=`` an int, or ``"auto"`` with all of
    ``numbers``) takes ``prior`` (its lengths) but none of the ``online`` ones; the online
    planner (the default) takes them all.
    """
    given = {k: v for k, v in {**numbers, **online}.items() if v is not None}
    if buckets is not None:
        if prior is not None:
            given["prior"] = prior
        if not (isinstance(max_buckets, str) and max_buckets == "auto"):
            given["max_buckets"] = max_buckets
        if isinstance(buckets, Buckets) and multiple_of != 1 and multiple_of != buckets.multiple_of:
            given["multiple_of"] = multiple_of
        mode, fix = "buckets= is a fixed plan: nothing is planned", "leave {them} out, or buckets= out to plan"
    elif not (isinstance(max_buckets, str) and max_buckets == "auto"):
        given = {k: v for k, v in given.items() if k in online or k in numbers}
        mode = (f"max_buckets={max_buckets!r} plans once with propose() from the first lengths; "
                "nothing is measured")
        fix = "leave {them} out, or max_buckets='auto' (the default) to plan online from measured costs"
    elif all(numbers.get(k) is not None for k in numbers) and numbers:
        given = {k: v for k, v in given.items() if k in online}
        mode = "compile_seconds, steps and step_seconds plan once with propose(); nothing is measured"
        fix = "leave {them} out, or the three numbers out to plan online from measured costs"
    else:
        return
    if given:
        names = ", ".join(f"{k}={v!r}" for k, v in given.items())
        fix = fix.format(them="it" if len(given) == 1 else "them")
        raise fail(f"{loader}: {names} would be ignored: {mode}; fix: {fix}")
