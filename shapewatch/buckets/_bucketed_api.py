"""``bucketed``: the public function; the iterator is ``Bucketed`` (private)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._bucketed import Bucketed
from ._plan import Buckets

__all__ = ["bucketed"]

def bucketed(
    batches: Iterable[Any],
    *,
    axis: int = 1,
    length_of: Callable[[Any], Any] | None = None,
    buckets: Buckets | Iterable[int] | None = None,
    max_buckets: int | str = "auto",
    multiple_of: int = 1,
    warmup: int = 8,
    pad_value: Any = 0,
    return_mask: bool = True,
    max_shapes: int | None = None,
    compile_records: Callable[[], Any] | None = None,
    clock: Callable[[], float] | None = None,
    prior: Any = None,
) -> Bucketed:
    """Pad each batch of a stream along ``axis`` up to its bucket.

    Args:
        batches: any iterable of batches: numpy/JAX arrays, dicts, tuples, any pytree
            (every array leaf having ``axis`` must agree on its length), or a ``list``
            of ragged 1-D (or N-D, same trailing shape) sequences, stacked into
            ``(rows, bucket, ...)``.
        axis: the variable axis.
        length_of: optional ``batch -> valid lengths`` (an int or one per row, shape
            ``padded.shape[:axis]``) when batches are already padded to their own
            maximum; default: every row is valid up to the batch's size on ``axis``.
        buckets: a :class:`Buckets` plan (``overflow="truncate"`` cuts longer batches,
            their lengths too, counted in ``.truncated``) or boundaries (then
            ``overflow="extend"``). None: learn them from the first ``warmup`` batches
            (held, then yielded in order) with :func:`propose` and ``overflow="extend"``.
            A bad batch, or an error from ``batches``, raises once from ``next()`` (also
            during the warm-up) and loses nothing held: call ``next()`` again to go on.
        max_buckets, multiple_of: passed to :func:`propose` when learning; ``"auto"`` (the
            default) plans online from measured costs, as :func:`group_by_length` does
            (``max_shapes``, ``compile_records``, ``clock`` as there).
        prior: a saved :meth:`report` (of either loader), a ``LengthObserver`` (or either's
            dict, or a JSON file's path): plan from its lengths too (and, online, start
            from its measured costs rather than measuring them again).
        warmup: batches observed before the boundaries are frozen.
        pad_value: fill value.
        return_mask: compute the validity mask (else ``Batch.mask`` is None).

    Returns:
        An iterator of :class:`Batch`; its ``plan`` is the plan in use, ``shapes`` the
        padded lengths yielded, ``overflowed`` how many batches went above the plan.

    Example:
        >>> import numpy as np
        >>> stream = (np.ones((2, n)) for n in (3, 5, 9, 4))
        >>> [b.bucket for b in bucketed(stream, buckets=(4, 8, 16))]
        [4, 8, 16, 4]
    """
    return Bucketed(
        batches,
        axis=axis,
        length_of=length_of,
        buckets=buckets,
        max_buckets=max_buckets,
        multiple_of=multiple_of,
        warmup=warmup,
        pad_value=pad_value,
        return_mask=return_mask,
        max_shapes=max_shapes,
        compile_records=compile_records,
        clock=clock,
        prior=prior,
    )

