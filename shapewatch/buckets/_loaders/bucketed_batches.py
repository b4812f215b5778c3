"""Reading one input batch of ``bucketed``: its size on the variable axis and its valid lengths.

:func:`read_batch` validates a batch before :class:`~shapewatch.buckets._loaders.bucketed.Bucketed`
holds or pads it (every array leaf with the axis agrees on its size; ``length_of``
returns ints of the right shape within it; a ``list`` of ragged rows has one rank and
trailing shape) and returns it as a :class:`Held`; a bad batch raises and is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._checks import fail, is_array

__all__ = ["Held", "read_batch"]


class Held(NamedTuple):
    """A validated batch: the batch (rows as arrays if ragged), its size and valid lengths."""

    batch: Any
    size: int
    lengths: np.ndarray
    ragged: bool


def read_batch(batch: Any, axis: int, length_of: Callable[[Any], Any] | None) -> Held:
    """Validate one batch of ``bucketed`` before it is held or padded; raise (and skip it) if bad."""
    if _is_ragged(batch):
        try:
            arrs = [np.asarray(r) for r in batch]
        except (TypeError, ValueError) as exc:
            raise fail(f"a row of a ragged batch is not an array ({exc})") from None
        ndims = {a.ndim for a in arrs}
        if 0 in ndims or len(ndims) > 1 or len({a.shape[1:] for a in arrs}) > 1:
            raise fail(
                "a batch given as a list of sequences needs rows of one rank and trailing "
                f"shape; got shapes {[a.shape for a in arrs]}"
            )
        if any(a.dtype.kind == "O" for a in arrs):
            raise fail("a batch given as a list of sequences needs numeric rows")
        if axis not in (1, -1 if arrs[0].ndim == 1 else 1):
            raise fail(f"a list of ragged sequences is padded on axis 1; got axis={axis}")
        sizes = np.array([a.shape[0] for a in arrs], dtype=np.int64)
        lengths = sizes
        if length_of is not None:
            lengths = _lengths(batch, length_of, sizes.shape)
            if (lengths > sizes).any():
                raise fail(
                    f"length_of returned lengths outside the rows' sizes: {lengths.tolist()}"
                )
        return Held(arrs, int(sizes.max()), lengths, True)
    size = _size(batch, axis)
    lead = _lead_shape(batch, axis)
    if length_of is None:
        return Held(batch, size, np.full(lead, size, dtype=np.int64), False)
    lengths = _lengths(batch, length_of, lead)
    if lengths.size and lengths.max() > size:
        raise fail(f"length_of returned lengths outside [0, {size}]: {lengths.tolist()}")
    return Held(batch, size, lengths, False)


def _is_ragged(batch: Any) -> bool:
    return (
        isinstance(batch, list)
        and bool(batch)
        and all(is_array(r) or isinstance(r, list | tuple) for r in batch)
    )


def _size(batch: Any, axis: int) -> int:
    """The batch's size on the variable axis (validating the leaves agree)."""
    from jax.tree_util import tree_leaves

    sizes = {
        leaf.shape[axis]
        for leaf in tree_leaves(batch)
        if is_array(leaf) and -leaf.ndim <= axis < leaf.ndim
    }
    if not sizes:
        raise fail(f"batch has no array with axis {axis}; got {type(batch).__name__}")
    if len(sizes) > 1:
        raise fail(
            f"leaves of one batch disagree on axis {axis}: lengths {sorted(sizes)}"
        )
    return sizes.pop()


def _lead_shape(batch: Any, axis: int) -> tuple[int, ...]:
    from jax.tree_util import tree_leaves

    for leaf in tree_leaves(batch):
        if is_array(leaf) and -leaf.ndim <= axis < leaf.ndim:
            return tuple(leaf.shape[: axis % leaf.ndim])
    raise AssertionError("unreachable: _size checked there is a leaf")


def _lengths(batch: Any, length_of: Callable[[Any], Any], shape: tuple[int, ...]) -> np.ndarray:
    try:
        raw = np.asarray(length_of(batch))
    except Exception as exc:
        raise fail(f"length_of failed on a batch: {exc!r}") from None
    if raw.dtype.kind not in "iu":
        raise fail(f"length_of must return ints; got {raw.tolist()!r}")
    try:
        lengths = np.broadcast_to(raw.astype(np.int64), shape).copy()
    except ValueError:
        raise fail(f"length_of returned shape {raw.shape}; expected {shape}") from None
    if lengths.size and lengths.min() < 0:
        raise fail(f"length_of returned negative lengths: {lengths.tolist()}")
    return lengths
