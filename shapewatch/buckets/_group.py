"""``group_by_length``: group single examples into length-homogeneous padded batches.

``group_by_length`` wraps an iterable of single examples and yields
length-homogeneous padded batches from a bounded buffer, as
:class:`~shapewatch.buckets.Batch` tuples carrying the padded data, the validity
mask, the valid lengths and the bucket used.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ._batch import Batch, _check_buckets, _check_max_buckets, _parse_example, _Spec
from ._common import check_choice, check_int, fail, is_int
from ._plan import Buckets
from ._planner import propose

__all__ = ["GroupByLength", "group_by_length"]

REMAINDERS = ("pad", "drop", "keep")


class GroupByLength:
    """The iterator returned by :func:`group_by_length`.

    Attributes:
        plan: the :class:`Buckets` in use (None until the first buffer was read).
        dropped: examples dropped by ``remainder="drop"``.
        max_buffered: the most examples held at once (never above ``buffer_size``).
        shapes: ``Counter`` of ``(batch rows, bucket)`` yielded -> times.
        batches: batches yielded so far.
    """

    def __init__(
        self,
        examples: Iterable[Any],
        *,
        batch_size: int | None,
        token_budget: int | None,
        buckets: Any,
        max_buckets: int | str,
        length_of: Callable[[Any], Any],
        shuffle: bool,
        seed: int,
        buffer_size: int,
        remainder: str,
        pad_value: Any,
        multiple_of: int,
        compile_seconds: float | None,
        steps: int | None,
        step_seconds: float | None,
    ) -> None:
        if batch_size is None and token_budget is None:
            raise fail("group_by_length needs batch_size or token_budget; got neither")
        self._batch_size = None if batch_size is None else check_int("batch_size", batch_size, 1)
        self._budget = None if token_budget is None else check_int("token_budget", token_budget, 1)
        self._multiple_of = check_int("multiple_of", multiple_of, 1)
        _check_max_buckets(max_buckets, allow_auto=True)
        if max_buckets == "auto" and buckets is None:
            params = inspect.signature(propose).parameters
            if "compile_seconds" not in params:
                raise fail("max_buckets='auto' is not supported by this planner; pass an int")
            missing = [
                n
                for n, v in (
                    ("compile_seconds", compile_seconds),
                    ("steps", steps),
                    ("step_seconds", step_seconds),
                )
                if v is None
            ]
            if missing:
                raise fail(
                    "max_buckets='auto' needs the cost model: pass compile_seconds (one compile), "
                    "steps (training steps) and step_seconds (one step at the longest length); "
                    f"missing {', '.join(missing)}"
                )
        if not callable(length_of):
            raise fail(f"length_of must be a callable; got {length_of!r}")
        self._buffer_size = check_int("buffer_size", buffer_size, 1)
        self._remainder = check_choice("remainder", remainder, REMAINDERS)
        if not is_int(seed):
            raise fail(f"seed must be an int; got {seed!r}")
        self.plan: Buckets | None = _check_buckets(buckets, self._multiple_of)
        self._max_buckets = max_buckets
        self._auto = {
            "compile_seconds": compile_seconds,
            "steps": steps,
            "step_seconds": step_seconds,
        }
        self._length_of = length_of
        self._shuffle = bool(shuffle)
        self._rng = np.random.default_rng(seed)
        self._pad_value = pad_value
        self._it = iter(examples)
        self._spec: _Spec | None = None
        self._queues: dict[int, list[tuple[list[np.ndarray], int]]] = {}
        self._ready: list[tuple[int, list[tuple[list[np.ndarray], int]], bool]] = []
        self._held = 0  # examples in queues + ready batches
        self._done = False
        self.dropped = 0
        self.max_buffered = 0
        self.batches = 0
        self.shapes: Counter = Counter()

    def __iter__(self) -> Iterator[Batch]:
        return self

    # -- examples
    def _parse(self, example: Any) -> tuple[list[np.ndarray], int]:
        """Flatten and validate one example: (leaves as numpy, length)."""
        leaves, length, self._spec = _parse_example(example, self._length_of, self._spec)
        return leaves, length

    def _rows_for(self, bucket: int) -> int:
        if self._budget is None:
            assert self._batch_size is not None
            return self._batch_size
        rows = max(1, self._budget // max(bucket, 1))
        return rows if self._batch_size is None else min(rows, self._batch_size)

    # -- buffering
    def _read(self, n: int) -> list[tuple[list[np.ndarray], int]]:
        out = []
        while len(out) < n and not self._done:
            try:
                ex = next(self._it)
            except StopIteration:
                self._done = True
                break
            out.append(self._parse(ex))
        return out

    def _plan_from(self, items: list[tuple[list[np.ndarray], int]]) -> None:
        lengths = [n for _, n in items] or [1]
        if self._max_buckets == "auto":
            self.plan = propose(
                lengths, "auto", multiple_of=self._multiple_of, overflow="extend", **self._auto
            )
        else:
            self.plan = propose(
                lengths, int(self._max_buckets), multiple_of=self._multiple_of, overflow="extend"
            )

    def _fill(self) -> None:
        """Read up to the buffer's free room, queue by bucket, move full batches to ready."""
        fresh = self._read(self._buffer_size - self._held)
        if self.plan is None:
            self._plan_from(fresh)
        assert self.plan is not None
        self._held += len(fresh)
        self.max_buffered = max(self.max_buffered, self._held)
        if self._shuffle and len(fresh) > 1:
            fresh = [fresh[i] for i in self._rng.permutation(len(fresh))]
        ready: list[tuple[int, list, bool]] = []
        for item in fresh:
            bucket = self.plan._bucket_scalar(item[1], record=False)
            queue = self._queues.setdefault(bucket, [])
            queue.append(item)
            if len(queue) >= self._rows_for(bucket):
                ready.append((bucket, queue[:], False))
                queue.clear()
        if self._done:  # the remainders, bucket by bucket
            for bucket in sorted(self._queues):
                queue = self._queues[bucket]
                if queue:
                    ready.append((bucket, queue[:], True))
                    queue.clear()
        elif not ready and self._held >= self._buffer_size:
            # the buffer is full of partial batches: flush the fullest as a remainder
            bucket = max(self._queues, key=lambda b: (len(self._queues[b]) / self._rows_for(b), b))
            ready.append((bucket, self._queues[bucket][:], True))
            self._queues[bucket].clear()
        if self._shuffle and len(ready) > 1:
            ready = [ready[i] for i in self._rng.permutation(len(ready))]
        self._ready = ready[::-1]  # pop() from the end

    def __next__(self) -> Batch:
        while True:
            while not self._ready:
                if self._done and not any(self._queues.values()):
                    raise StopIteration
                self._fill()
            bucket, items, partial = self._ready.pop()
            self._held -= len(items)
            if partial and self._remainder == "drop" and len(items) < self._rows_for(bucket):
                self.dropped += len(items)
                continue
            rows = self._rows_for(bucket)
            if not partial or self._remainder == "keep":
                rows = len(items)
            out = self._build(bucket, items, rows)
            self.batches += 1
            self.shapes[(rows, bucket)] += 1
            return out

    def _build(self, bucket: int, items: list[tuple[list[np.ndarray], int]], rows: int) -> Batch:
        assert self._spec is not None and self.plan is not None
        spec = self._spec
        out_leaves = []
        for i, (is_seq, shape, dtype) in enumerate(zip(spec.seq, spec.shapes, spec.dtypes)):
            full = (rows, bucket, *shape) if is_seq else (rows, *shape)
            arr = np.full(full, self._pad_value, dtype=dtype)
            for r, (leaves, n) in enumerate(items):
                if is_seq:
                    arr[r, :n] = leaves[i]
                else:
                    arr[r] = leaves[i]
            out_leaves.append(arr)
        lengths = np.zeros(rows, dtype=np.int64)
        lengths[: len(items)] = [n for _, n in items]
        mask = np.arange(bucket) < lengths[:, None]
        self.plan._note(bucket)
        from jax.tree_util import tree_unflatten

        return Batch(
            tree_unflatten(spec.treedef, out_leaves), mask, lengths, int(bucket), len(items)
        )

    @property
    def max_shapes(self) -> int | None:
        """Distinct batch shapes promised with ``remainder`` "pad" or "drop": one per bucket used,
        counting extended lengths (None before the plan exists)."""
        if self.plan is None:
            return None
        return len(self.plan.boundaries) + len(self.plan.extended)


def group_by_length(
    examples: Iterable[Any],
    *,
    batch_size: int | None = None,
    token_budget: int | None = None,
    buckets: Buckets | Iterable[int] | None = None,
    max_buckets: int | str = 8,
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
) -> GroupByLength:
    """Group single examples into length-homogeneous padded batches.

    Args:
        examples: any iterable of examples: a 1-D array or list of tokens, or a
            dict/tuple/pytree of arrays sharing their leading (length) axis. Scalar
            leaves (and, with a custom ``length_of``, leaves whose leading axis is not
            the length) are stacked as they are.
        batch_size: rows per batch (with ``token_budget``: the most rows).
        token_budget: rows per batch = ``max(1, token_budget // bucket)``.
        buckets: a :class:`Buckets` plan or boundaries (``overflow="extend"``); None:
            learned with :func:`propose` from the first ``buffer_size`` examples.
        max_buckets: most buckets, or ``"auto"`` (needs ``compile_seconds``, ``steps``
            and ``step_seconds``: see :func:`propose`).
        length_of: the example's length; the default ``len`` means the shared leading
            length of every array leaf (leaves that disagree raise ``ValueError``).
        shuffle, seed: shuffle within the buffer and the order of batches, with
            ``numpy.random.default_rng(seed)``; the same seed gives the same batches.
        buffer_size: the most examples held at once (``max_buffered`` reports the peak).
            When the buffer fills up with partial batches, the fullest is flushed as
            a remainder.
        remainder: partial batches (end of stream, or a flush): ``"pad"`` pads the
            rows to the batch size (padded rows have length 0 and an all-False mask),
            ``"drop"`` drops them (counted in ``.dropped``), ``"keep"`` yields them short.
        pad_value: fill value.
        multiple_of: every boundary learned is a multiple of it.

    Returns:
        An iterator of :class:`Batch` (``rows`` real rows first); see :class:`GroupByLength`.

    Raises:
        ValueError: (``[shapewatch] ...``) for bad arguments, examples without a length,
            mixed ranks or leaves of one example with different lengths.

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
    )
