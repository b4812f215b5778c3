"""``group_by_length``: the public function; the iterator is ``GroupByLength`` (private)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._group import GroupByLength
from ._plan import Buckets

__all__ = ["group_by_length"]

def group_by_length(
    examples: Iterable[Any],
    *,
    batch_size: int | None = None,
    token_budget: int | None = None,
    buckets: Buckets | Iterable[int] | None = None,
    max_buckets: int | str = "auto",
    length_of: Callable[[Any], Any] = len,
    shuffle: bool = True,
    seed: int = 0,
    buffer_size: int = 4096,
    remainder: str = "pad",
    pad_value: Any = 0,
    multiple_of: int = 1,
    compile_seconds: float | None = None,
    steps: int | None = None,
    step_seconds: float | None = None,
    max_shapes: int | None = None,
    compile_records: Callable[[], Any] | None = None,
    clock: Callable[[], float] | None = None,
    prior: Any = None,
) -> GroupByLength:
    """Group single examples into length-homogeneous padded batches.

    Args:
        examples: any iterable of examples: a 1-D array or list of numbers, or a
            dict/tuple/pytree of arrays (or lists of numbers, as tokenizers return them)
            sharing their leading (length) axis. Scalar leaves (and, with a custom
            ``length_of``, leaves whose leading axis is not the length) are stacked as
            they are. Dtypes are promoted (numpy's rules) to hold every value of the
            examples read before the first batch; after it, an example whose values the
            batch dtype cannot hold exactly raises.
        batch_size: rows per batch (with ``token_budget``: the most rows).
        token_budget: rows per batch = ``max(1, token_budget // bucket)``.
        buckets: a :class:`Buckets` plan (``overflow="truncate"`` cuts longer examples,
            counted in ``.truncated``) or boundaries (``overflow="extend"``); None:
            learned with :func:`propose` from the first ``buffer_size`` examples.
        max_buckets: most buckets, or ``"auto"`` (the default): with no numbers, plan
            online from measured costs (see README "Auto-bucketing"); with
            ``compile_seconds``, ``steps`` and ``step_seconds``, once with :func:`propose`.
        max_shapes: online: the most distinct batch shapes ever yielded (default: the
            linked step's budget, else 16).
        compile_records: online: a callable returning the linked step's compile records
            (objects with ``total_s``), e.g. ``shapewatch.compile_records(step)``.
        clock: online: the clock that times the consumer (default ``time.perf_counter``).
        prior: a saved :meth:`GroupByLength.report`, a ``LengthObserver`` (or either's
            dict, or a JSON file's path): start from its lengths (and measured costs).
        length_of: the example's length; the default ``len`` means the shared leading
            length of every array leaf (leaves that disagree raise ``ValueError``). With
            a custom one, a leaf is a sequence while its leading axis equals the length;
            one that keeps its shape while the length changes (before the first batch)
            is fixed-size.
        shuffle, seed: shuffle within the buffer and the order of batches, with
            ``numpy.random.default_rng(seed)``; the same seed gives the same batches.
        buffer_size: the most examples held at once (``max_buffered`` reports the peak).
            When the buffer fills up with partial batches, the fullest is flushed early
            (padded to the batch size, or short with ``"keep"``; never dropped). A
            ``UserWarning`` says so when ``buffer_size`` is below one full batch per bucket.
        remainder: the partial batches at the end of the data: ``"pad"`` pads the rows
            to the batch size (padded rows have length 0 and an all-False mask), ``"drop"``
            drops them (counted in ``.dropped``), ``"keep"`` yields them short.
        pad_value: fill value.
        multiple_of: every boundary learned is a multiple of it.

    Returns:
        An iterator of :class:`Batch` (``rows`` real rows first); see :class:`GroupByLength`.

    Raises:
        ValueError: (``[shapewatch] ...``) for bad arguments at once; for a bad example
            (no length, mixed ranks or structure, a dtype that cannot hold it, longer
            than a plan with ``overflow="error"``) from ``next()``, which leaves it out and
            keeps every example held: call ``next()`` again to go on. An exception from
            ``examples`` itself propagates the same way.

    Example:
        >>> import numpy as np
        >>> data = [np.arange(n) for n in (3, 9, 4, 10, 2)]
        >>> it = group_by_length(data, batch_size=2, buckets=(4, 10), shuffle=False)
        >>> [(b.data.shape, b.lengths.tolist()) for b in it]
        [((2, 4), [3, 4]), ((2, 10), [9, 10]), ((2, 4), [2, 0])]
    """
    return GroupByLength(
        examples,
        batch_size=batch_size,
        token_budget=token_budget,
        buckets=buckets,
        max_buckets=max_buckets,
        length_of=length_of,
        shuffle=shuffle,
        seed=seed,
        buffer_size=buffer_size,
        remainder=remainder,
        pad_value=pad_value,
        multiple_of=multiple_of,
        compile_seconds=compile_seconds,
        steps=steps,
        step_seconds=step_seconds,
        max_shapes=max_shapes,
        compile_records=compile_records,
        clock=clock,
        prior=prior,
    )

