"""The :class:`Batch` the loader wrappers yield, and the helpers they share.

:func:`~shapewatch.buckets.bucketed` and :func:`~shapewatch.buckets.group_by_length`
both yield :class:`Batch` tuples carrying the padded data, the validity mask, the
valid lengths and the bucket used. The helpers here check their ``buckets`` and
``max_buckets`` arguments, tell arrays and sequences of numbers apart, and parse
one example of ``group_by_length``: its leaves, its length, and the structure every
example must share (:class:`_Spec`).
"""

from __future__ import annotations

from collections.abc import Callable
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


def _is_seq_of_numbers(x: Any) -> bool:
    return isinstance(x, list | tuple) and all(
        isinstance(v, int | float | np.number) and not isinstance(v, bool) for v in x
    )


def _is_jax(x: Any) -> bool:
    import sys

    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or _is_jax(x)


class _Spec:
    """The structure every example must share: treedef, per-leaf kind, rank, trailing shape."""

    __slots__ = ("treedef", "seq", "shapes", "dtypes")

    def __init__(
        self, treedef: Any, seq: list[bool], shapes: list[tuple[int, ...]], dtypes: list[np.dtype]
    ) -> None:
        self.treedef = treedef
        self.seq = seq
        self.shapes = shapes  # trailing shape for sequence leaves, full shape otherwise
        self.dtypes = dtypes


def _parse_example(
    example: Any, length_of: Callable[[Any], Any], spec: _Spec | None
) -> tuple[list[np.ndarray], int, _Spec]:
    """Flatten and validate one example: (leaves as numpy, length, structure).

    ``spec`` is the structure of the first example, which every later one must
    share; None for the first example, whose own structure is returned.
    """
    from jax.tree_util import tree_flatten

    if isinstance(example, list | tuple) and _is_seq_of_numbers(example):
        example = np.asarray(example) if example else np.zeros(0, dtype=np.int64)
    leaves, treedef = tree_flatten(example)
    try:
        leaves = [np.asarray(leaf) for leaf in leaves]
    except (TypeError, ValueError) as exc:
        raise fail(f"example leaves must be arrays; got {example!r} ({exc})") from None
    if not leaves or any(leaf.dtype.kind == "O" for leaf in leaves):
        raise fail(f"example has no array leaves (or ragged ones); got {example!r}")
    if length_of is len:
        lens = {leaf.shape[0] for leaf in leaves if leaf.ndim >= 1}
        if not lens:
            raise fail(f"example has no length: no leaf with a leading axis; got {example!r}")
        if len(lens) > 1:
            raise fail(
                f"the leaves of one example disagree on their leading length: {sorted(lens)}; "
                "expected one shared length (pass length_of= to pick the sequence leaves)"
            )
        length = lens.pop()
    else:
        try:
            length = length_of(example)
        except Exception as exc:
            raise fail(f"length_of failed on an example: {exc!r}") from None
        if not is_int(length) or length < 0:
            raise fail(f"length_of must return an int >= 0; got {length!r}")
        length = int(length)
    seq = [leaf.ndim >= 1 and leaf.shape[0] == length for leaf in leaves]
    if not any(seq):
        raise fail(f"no leaf of the example has the leading length {length}")
    if spec is None:
        first = _Spec(
            treedef,
            seq,
            [leaf.shape[1:] if s else leaf.shape for leaf, s in zip(leaves, seq)],
            [leaf.dtype for leaf in leaves],
        )
        return leaves, length, first
    if treedef != spec.treedef:
        raise fail(f"examples differ in structure: {treedef} vs the first example's {spec.treedef}")
    for i, leaf in enumerate(leaves):
        if spec.seq[i] and (leaf.ndim != len(spec.shapes[i]) + 1):
            raise fail(
                f"mixed ranks: leaf {i} has rank {leaf.ndim}, but {len(spec.shapes[i]) + 1} "
                "in the first example"
            )
        if spec.seq[i] and leaf.shape[0] != length:
            raise fail(
                f"the leaves of one example disagree on their leading length: leaf {i} has "
                f"{leaf.shape[0]}, expected {length}"
            )
        shape = leaf.shape[1:] if spec.seq[i] else leaf.shape
        if shape != spec.shapes[i]:
            kind = "rank" if len(shape) != len(spec.shapes[i]) else "shape"
            raise fail(
                f"mixed {kind}s: leaf {i} has shape {leaf.shape}, incompatible with the first "
                f"example's {'(length,) + ' if spec.seq[i] else ''}{spec.shapes[i]}"
            )
        if not np.can_cast(leaf.dtype, spec.dtypes[i], "same_kind"):
            raise fail(f"leaf {i} has dtype {leaf.dtype}; the first example's is {spec.dtypes[i]}")
    return leaves, length, spec
