"""The :class:`Batch` the loader wrappers yield, and the helpers they share.

:func:`~shapewatch.buckets.bucketed` and :func:`~shapewatch.buckets.group_by_length`
both yield :class:`Batch` tuples carrying the padded data, the validity mask, the
valid lengths and the bucket used. The helpers here check their ``buckets`` and
``max_buckets`` arguments and tell arrays apart.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._common import fail, is_int
from ._plan import Buckets

__all__ = ["Batch"]


class Batch(NamedTuple):
    """One padded batch.

    Attributes:
        data: the padded batch (same structure as the input: array, dict, tuple, ...).
        mask: bool array, True at valid positions: shape ``(rows, bucket)`` for
            ``group_by_length`` and ``padded.shape[:axis + 1]`` for ``bucketed``;
            None with ``return_mask=False``.
        lengths: int64 array of valid lengths, ``mask.shape[:-1]``; 0 for padded rows.
        bucket: the padded length of the variable axis.
        rows: the number of real rows (the first ``rows`` rows; the others are padding
            added by ``remainder="pad"``), or None where the batch has no row axis.
    """

    data: Any
    mask: Any
    lengths: np.ndarray
    bucket: int
    rows: int | None = None


def _check_buckets(buckets: Any, multiple_of: int) -> Buckets | None:
    if buckets is None or isinstance(buckets, Buckets):
        return buckets
    try:
        bounds = tuple(buckets)
    except TypeError:
        raise fail(
            f"buckets must be None, a Buckets or a sequence of ints; got {buckets!r}"
        ) from None
    return Buckets(bounds, multiple_of=multiple_of, overflow="extend")


def _check_max_buckets(max_buckets: Any, allow_auto: bool) -> None:
    if allow_auto and isinstance(max_buckets, str) and max_buckets == "auto":
        return
    if not is_int(max_buckets) or max_buckets < 1:
        extra = " or 'auto'" if allow_auto else ""
        raise fail(f"max_buckets must be an integer >= 1{extra}; got {max_buckets!r}")


def _is_jax(x: Any) -> bool:
    import sys

    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or _is_jax(x)


def _check_auto(max_buckets: Any, buckets: Any, auto: dict[str, Any]) -> bool:
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


def _check_max_shapes(max_shapes: Any, records: Any) -> int:
    """The cap on distinct shapes: given, else the linked step's budget, else the default."""
    from ._auto import DEFAULT_MAX_SHAPES

    if max_shapes is None:
        max_shapes = getattr(records, "max_shapes", None) or DEFAULT_MAX_SHAPES
    if not is_int(max_shapes) or max_shapes < 1:
        raise fail(f"max_shapes must be an integer >= 1; got {max_shapes!r}")
    if records is not None and not callable(records):
        raise fail(f"compile_records must be None or a callable returning records; got {records!r}")
    return int(max_shapes)
