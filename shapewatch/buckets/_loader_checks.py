"""Argument checks both loaders share: ``buckets``, ``max_buckets``, the ``"auto"`` numbers, ``max_shapes``.

:func:`~shapewatch.buckets.bucketed` and :func:`~shapewatch.buckets.group_by_length`
validate these arguments the same way, with the same messages, here.
"""

from __future__ import annotations

from typing import Any

from ._auto_planner import DEFAULT_MAX_SHAPES
from ._buckets import Buckets
from ._checks import fail, is_int

__all__ = ["check_auto", "check_buckets", "check_max_buckets", "check_max_shapes"]


def check_buckets(buckets: Any, multiple_of: int) -> Buckets | None:
    """The loader's fixed plan: None, the given :class:`Buckets`, or boundaries made one."""
    if buckets is None or isinstance(buckets, Buckets):
        return buckets
    try:
        bounds = tuple(buckets)
    except TypeError:
        raise fail(
            f"buckets must be None, a Buckets or a sequence of ints; got {buckets!r}"
        ) from None
    return Buckets(bounds, multiple_of=multiple_of, overflow="extend")


def check_max_buckets(max_buckets: Any, allow_auto: bool) -> None:
    """Raise unless ``max_buckets`` is an int >= 1 (or ``"auto"``, where allowed)."""
    if allow_auto and isinstance(max_buckets, str) and max_buckets == "auto":
        return
    if not is_int(max_buckets) or max_buckets < 1:
        extra = " or 'auto'" if allow_auto else ""
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
    if not is_int(max_shapes) or max_shapes < 1:
        raise fail(f"max_shapes must be an integer >= 1; got {max_shapes!r}")
    if records is not None and not callable(records):
        raise fail(f"compile_records must be None or a callable returning records; got {records!r}")
    return int(max_shapes)
