"""Padding arrays and pytrees to a bucket (numpy in -> numpy out, JAX in -> JAX out)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._checks import check_fill, check_int, fail, is_array, is_int, is_jax

if TYPE_CHECKING:
    from ._plan.buckets import Buckets

__all__ = ["pad_to", "pad_batch", "pad_to_bucket", "pad_tree_to_bucket"]


def _axis(axis: Any, shape: tuple[int, ...]) -> int:
    ndim = len(shape)
    if not is_int(axis) or not -ndim <= axis < ndim:
        raise fail(
            f"axis {axis!r} is out of range for an array of shape {tuple(shape)}; "
            f"expected an int with {-ndim} <= axis < {ndim}"
        )
    return int(axis) % ndim


def _resize(x: Any, axis: int, target: int, value: Any, return_mask: bool, out: Any = None) -> Any:
    """Pad (or cut) ``x`` along a normalised ``axis`` to ``target`` (into ``out`` if given)."""
    length = x.shape[axis]
    if target > length:
        check_fill(value, x.dtype)
    lead = tuple(x.shape[:axis])
    shape = lead + (target,) + tuple(x.shape[axis + 1 :])
    if out is not None:
        if not isinstance(out, np.ndarray) or not isinstance(x, np.ndarray):
            raise fail("out= is only supported for numpy input and a numpy out array")
        if out.shape != shape or out.dtype != x.dtype:
            raise fail(
                f"out has shape {out.shape} and dtype {out.dtype}; expected shape {shape} "
                f"and dtype {x.dtype}"
            )
    if type(x) is not np.ndarray and is_jax(x):
        import jax.numpy as jnp
        from jax import lax

        if target == length:
            out = x
        elif target < length:
            out = lax.slice_in_dim(x, 0, target, axis=axis)
        else:
            config = [(0, 0, 0)] * x.ndim
            config[axis] = (0, target - length, 0)
            out = lax.pad(x, jnp.asarray(value, dtype=x.dtype), config)
        if not return_mask:
            return out
        return out, jnp.broadcast_to(jnp.arange(target) < length, lead + (target,))
    head = (slice(None),) * axis
    if target <= length:
        kept = x if target == length else x[head + (slice(0, target),)]
        if out is not None:
            np.copyto(out, kept)
        else:
            out = kept if target == length else np.ascontiguousarray(kept)
    else:
        if out is None:
            out = np.empty(shape, dtype=x.dtype)  # each element written exactly once below
        out[head + (slice(0, length),)] = x
        out[head + (slice(length, None),)] = value
    if not return_mask:
        return out
    mask = np.empty(lead + (target,), dtype=bool)
    mask[...] = np.arange(target) < length
    return out, mask


def pad_to(
    x: Any,
    length: int,
    axis: int = -1,
    value: Any = 0,
    return_mask: bool = False,
    *,
    out: np.ndarray | None = None,
) -> Any:
    """Pad ``x`` along ``axis`` to exactly ``length`` (numpy in -> numpy out, JAX in -> JAX out).

    Args:
        x: a numpy or JAX array (anything else is converted with ``np.asarray``).
        length: target length, ``>= x.shape[axis]``.
        axis: the axis to pad.
        value: fill value for the padding.
        return_mask: also return a bool mask of shape ``padded.shape[:axis + 1]``,
            True at valid positions (broadcast it with ``mask[..., None]`` over
            trailing feature axes).
        out: optional preallocated numpy array of the padded shape and dtype to
            write into (saves the allocation's page faults for very large batches).

    Returns:
        The padded array, or ``(padded, mask)``.

    Example:
        >>> import numpy as np
        >>> pad_to(np.array([[1, 2, 3]]), 5, value=-1).tolist()
        [[1, 2, 3, -1, -1]]
    """
    if not is_array(x):
        x = np.asarray(x)
    ax = _axis(axis, x.shape)
    check_int("length", length, 0)
    if length < x.shape[ax]:
        raise fail(f"length {length} is below the array's length {x.shape[ax]} on axis {axis}")
    return _resize(x, ax, int(length), value, return_mask, out)


def pad_to_bucket(
    plan: Buckets, x: Any, axis: int, value: Any, return_mask: bool, out: Any = None
) -> Any:
    """Implementation of :meth:`Buckets.pad`."""
    if not is_array(x):
        x = np.asarray(x)
    ax = _axis(axis, x.shape)
    target = plan.bucket_of(x.shape[ax])
    return _resize(x, ax, target, value, return_mask, out)


def _path(path: Any) -> str:
    from jax.tree_util import keystr

    return keystr(path) or "<root>"


def _leaves_with_axis(tree: Any, axis: Any) -> tuple[list, Any, list[int], int]:
    """Flatten ``tree``; return leaves, treedef, indices of leaves having ``axis``, and its length."""
    from jax.tree_util import tree_flatten_with_path

    flat, treedef = tree_flatten_with_path(tree)
    if not is_int(axis):
        raise fail(f"axis must be an int; got {axis!r}")
    chosen: list[int] = []
    length = -1
    for i, (path, leaf) in enumerate(flat):
        if not is_array(leaf) or not -leaf.ndim <= axis < leaf.ndim:
            continue
        n = leaf.shape[axis]
        if chosen and n != length:
            first = _path(flat[chosen[0]][0])
            raise fail(
                f"leaves disagree on axis {axis}: {first} has length {length} but "
                f"{_path(path)} has length {n}; expected one length per batch"
            )
        chosen.append(i)
        length = n
    if not chosen:
        raise fail(f"no array leaf has axis {axis}; expected at least one array with that axis")
    return flat, treedef, chosen, length


def _rebuild(
    flat: list,
    treedef: Any,
    chosen: list[int],
    axis: int,
    target: int,
    value: Any,
    return_mask: bool,
) -> Any:
    from jax.tree_util import tree_unflatten

    leaves = [leaf for _, leaf in flat]
    mask = None
    for i in chosen:
        leaf = leaves[i]
        out = _resize(leaf, axis % leaf.ndim, target, value, return_mask and mask is None)
        if return_mask and mask is None:
            out, mask = out
        leaves[i] = out
    tree = tree_unflatten(treedef, leaves)
    return (tree, mask) if return_mask else tree


def pad_tree_to_bucket(plan: Buckets, tree: Any, axis: int, value: Any, return_mask: bool) -> Any:
    """Implementation of :meth:`Buckets.pad_tree`.

    The mask (if asked) has the leading shape of the first padded leaf in
    ``jax.tree_util`` order. Leaves without ``axis`` (scalars, non-arrays,
    arrays of too few dims) are returned unchanged.
    """
    flat, treedef, chosen, length = _leaves_with_axis(tree, axis)
    target = plan.bucket_of(length)
    return _rebuild(flat, treedef, chosen, axis, target, value, return_mask)


def pad_batch(tree: Any, batch_size: int, value: Any = 0) -> tuple[Any, Any]:
    """Pad the batch axis (0) of every array leaf of a final, partial batch.

    Args:
        tree: a pytree of numpy/JAX arrays sharing their leading (batch) dimension.
        batch_size: the full batch size to pad to (``>=`` the current batch).
        value: fill value for the padded rows.

    Returns:
        ``(padded_tree, valid_rows)`` where ``valid_rows`` is a bool array of shape
        ``(batch_size,)`` (numpy or JAX, like the first leaf), True for real rows.

    Example:
        >>> import numpy as np
        >>> batch = {"x": np.ones((3, 4)), "y": np.arange(3)}
        >>> padded, valid = pad_batch(batch, 4)
        >>> padded["x"].shape, padded["y"].tolist(), valid.tolist()
        ((4, 4), [0, 1, 2, 0], [True, True, True, False])
    """
    batch_size = check_int("batch_size", batch_size, 1)
    flat, treedef, chosen, rows = _leaves_with_axis(tree, 0)
    if rows > batch_size:
        raise fail(f"batch has {rows} rows, more than batch_size={batch_size}")
    return _rebuild(flat, treedef, chosen, 0, batch_size, value, True)
