"""Loader wrappers: pad a stream of batches to buckets, or group examples by length.

``bucketed`` wraps an iterable of ready batches and pads each batch's variable
axis to its bucket. ``group_by_length`` wraps an iterable of single examples and
yields length-homogeneous padded batches from a bounded buffer. Both yield
:class:`Batch` tuples carrying the padded data, the validity mask, the valid
lengths and the bucket used.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from ._common import check_choice, check_int, fail, is_int
from ._plan import Buckets
from ._planner import propose

__all__ = ["Batch", "Bucketed", "GroupByLength", "bucketed", "group_by_length"]

REMAINDERS = ("pad", "drop", "keep")


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
        raise fail(f"buckets must be None, a Buckets or a sequence of ints; got {buckets!r}") from None
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


# --------------------------------------------------------------------------- bucketed


class Bucketed:
    """The iterator returned by :func:`bucketed`.

    Attributes:
        plan: the :class:`Buckets` in use (None until the warm-up batches were seen).
        seen: batches yielded so far.
        shapes: ``Counter`` of padded lengths yielded -> times.
    """

    def __init__(
        self,
        batches: Iterable[Any],
        *,
        axis: int,
        length_of: Callable[[Any], Any] | None,
        buckets: Any,
        max_buckets: int,
        multiple_of: int,
        warmup: int,
        pad_value: Any,
        return_mask: bool,
    ) -> None:
        if not is_int(axis):
            raise fail(f"axis must be an int; got {axis!r}")
        if length_of is not None and not callable(length_of):
            raise fail(f"length_of must be None or a callable; got {length_of!r}")
        _check_max_buckets(max_buckets, allow_auto=False)
        self._multiple_of = check_int("multiple_of", multiple_of, 1)
        self._warmup = check_int("warmup", warmup, 0)
        self.plan: Buckets | None = _check_buckets(buckets, self._multiple_of)
        self._axis = int(axis)
        self._length_of = length_of
        self._max_buckets = int(max_buckets)
        self._pad_value = pad_value
        self._return_mask = bool(return_mask)
        self._it = iter(batches)
        self._held: list[Any] = []
        self.seen = 0
        self.shapes: Counter = Counter()

    @property
    def overflowed(self) -> int:
        """Batches padded to an extended length (above the largest boundary)."""
        return 0 if self.plan is None else sum(self.plan.extended.values())

    def __iter__(self) -> Iterator[Batch]:
        return self

    def _size(self, batch: Any) -> int:
        """The batch's size on the variable axis (validating the leaves agree)."""
        if isinstance(batch, list) and batch and all(
            _is_array(r) or isinstance(r, list | tuple) for r in batch
        ):
            return max((len(r) for r in batch), default=0)
        from jax.tree_util import tree_leaves

        sizes = {
            leaf.shape[self._axis]
            for leaf in tree_leaves(batch)
            if _is_array(leaf) and -leaf.ndim <= self._axis < leaf.ndim
        }
        if not sizes:
            raise fail(f"batch has no array with axis {self._axis}; got {type(batch).__name__}")
        if len(sizes) > 1:
            raise fail(f"leaves of one batch disagree on axis {self._axis}: lengths {sorted(sizes)}")
        return sizes.pop()

    def _freeze(self) -> None:
        sizes = [self._size(b) for b in self._held]
        if not sizes:  # empty stream: nothing to plan
            self.plan = Buckets((max(self._multiple_of, 1),), multiple_of=self._multiple_of,
                                overflow="extend")
            return
        self.plan = propose(sizes, self._max_buckets, multiple_of=self._multiple_of,
                            overflow="extend")

    def __next__(self) -> Batch:
        if self.plan is None:
            while len(self._held) < max(self._warmup, 1):
                try:
                    self._held.append(next(self._it))
                except StopIteration:
                    break
            self._freeze()
            self._held.reverse()  # pop() from the end yields them in order
        batch = self._held.pop() if self._held else next(self._it)
        out = self._pad(batch)
        self.seen += 1
        self.shapes[out.bucket] += 1
        return out

    def _pad(self, batch: Any) -> Batch:
        assert self.plan is not None
        if isinstance(batch, list) and batch and all(
            _is_array(r) or isinstance(r, list | tuple) for r in batch
        ):
            return self._pad_ragged(batch)
        size = self._size(batch)
        if self._return_mask:
            data, mask = self.plan.pad_tree(batch, axis=self._axis, value=self._pad_value,
                                            return_mask=True)
        else:
            data = self.plan.pad_tree(batch, axis=self._axis, value=self._pad_value)
            mask = None
        bucket = self.plan._bucket_scalar(size, record=False)
        lead = self._lead_shape(batch)
        if self._length_of is None:
            lengths = np.full(lead, size, dtype=np.int64)
        else:
            lengths = np.broadcast_to(np.asarray(self._length_of(batch), dtype=np.int64),
                                      lead).copy()
            if lengths.size and (lengths.min() < 0 or lengths.max() > size):
                raise fail(f"length_of returned lengths outside [0, {size}]: {lengths.tolist()}")
            if mask is not None:
                valid = np.arange(bucket) < lengths[..., None]
                mask = mask & (valid if isinstance(mask, np.ndarray) else _to_like(valid, mask))
        rows = int(lead[0]) if lead else None
        return Batch(data, mask, lengths, int(bucket), rows)

    def _lead_shape(self, batch: Any) -> tuple[int, ...]:
        from jax.tree_util import tree_leaves

        for leaf in tree_leaves(batch):
            if _is_array(leaf) and -leaf.ndim <= self._axis < leaf.ndim:
                return tuple(leaf.shape[: self._axis % leaf.ndim])
        raise AssertionError("unreachable: _size checked there is a leaf")

    def _pad_ragged(self, rows: list[Any]) -> Batch:
        assert self.plan is not None
        arrs = [np.asarray(r) for r in rows]
        ndims = {a.ndim for a in arrs}
        if 0 in ndims or len(ndims) > 1 or len({a.shape[1:] for a in arrs}) > 1:
            raise fail(
                "a batch given as a list of sequences needs rows of one rank and trailing shape; "
                f"got shapes {[a.shape for a in arrs]}"
            )
        if self._axis not in (1, -1 if arrs[0].ndim == 1 else 1):
            raise fail(f"a list of ragged sequences is padded on axis 1; got axis={self._axis}")
        sizes = np.array([a.shape[0] for a in arrs], dtype=np.int64)
        bucket = int(self.plan._bucket_scalar(int(sizes.max()), record=False))
        dtype = np.result_type(*arrs)
        out = np.full((len(arrs), bucket, *arrs[0].shape[1:]), self._pad_value, dtype=dtype)
        for i, a in enumerate(arrs):
            out[i, : a.shape[0]] = a
        self.plan._note(bucket)
        lengths = sizes
        if self._length_of is not None:
            lengths = np.broadcast_to(np.asarray(self._length_of(rows), dtype=np.int64),
                                      sizes.shape).copy()
            if (lengths < 0).any() or (lengths > sizes).any():
                raise fail(f"length_of returned lengths outside the rows' sizes: {lengths.tolist()}")
        mask = (np.arange(bucket) < lengths[:, None]) if self._return_mask else None
        return Batch(out, mask, lengths, bucket, len(arrs))


def _to_like(valid: np.ndarray, like: Any) -> Any:
    import jax.numpy as jnp

    return jnp.asarray(valid) if _is_jax(like) else valid


def bucketed(
    batches: Iterable[Any],
    *,
    axis: int = 1,
    length_of: Callable[[Any], Any] | None = None,
    buckets: Buckets | Iterable[int] | None = None,
    max_buckets: int = 8,
    multiple_of: int = 1,
    warmup: int = 8,
    pad_value: Any = 0,
    return_mask: bool = True,
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
        buckets: a :class:`Buckets` plan or boundaries (then ``overflow="extend"``).
            None: learn them from the first ``warmup`` batches (held, then yielded in
            order) with :func:`propose` and ``overflow="extend"``.
        max_buckets, multiple_of: passed to :func:`propose` when learning.
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
    return Bucketed(batches, axis=axis, length_of=length_of, buckets=buckets,
                    max_buckets=max_buckets, multiple_of=multiple_of, warmup=warmup,
                    pad_value=pad_value, return_mask=return_mask)


# --------------------------------------------------------------------------- group_by_length


class _Spec:
    """The structure every example must share: treedef, per-leaf kind, rank, trailing shape."""

    __slots__ = ("treedef", "seq", "shapes", "dtypes")

    def __init__(self, treedef: Any, seq: list[bool], shapes: list[tuple[int, ...]],
                 dtypes: list[np.dtype]) -> None:
        self.treedef = treedef
        self.seq = seq
        self.shapes = shapes  # trailing shape for sequence leaves, full shape otherwise
        self.dtypes = dtypes


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
            missing = [n for n, v in (("compile_seconds", compile_seconds), ("steps", steps),
                                      ("step_seconds", step_seconds)) if v is None]
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
        self._auto = {"compile_seconds": compile_seconds, "steps": steps,
                      "step_seconds": step_seconds}
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
        if self._length_of is len:
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
                length = self._length_of(example)
            except Exception as exc:
                raise fail(f"length_of failed on an example: {exc!r}") from None
            if not is_int(length) or length < 0:
                raise fail(f"length_of must return an int >= 0; got {length!r}")
            length = int(length)
        seq = [leaf.ndim >= 1 and leaf.shape[0] == length for leaf in leaves]
        if not any(seq):
            raise fail(f"no leaf of the example has the leading length {length}")
        if self._spec is None:
            self._spec = _Spec(treedef, seq, [leaf.shape[1:] if s else leaf.shape
                                              for leaf, s in zip(leaves, seq)],
                               [leaf.dtype for leaf in leaves])
            return leaves, length
        spec = self._spec
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
            self.plan = propose(lengths, "auto", multiple_of=self._multiple_of, overflow="extend",
                                **self._auto)
        else:
            self.plan = propose(lengths, int(self._max_buckets), multiple_of=self._multiple_of,
                                overflow="extend")

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

        return Batch(tree_unflatten(spec.treedef, out_leaves), mask, lengths, int(bucket),
                     len(items))

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
        examples, batch_size=batch_size, token_budget=token_budget, buckets=buckets,
        max_buckets=max_buckets, length_of=length_of, shuffle=shuffle, seed=seed,
        buffer_size=buffer_size, remainder=remainder, pad_value=pad_value,
        multiple_of=multiple_of, compile_seconds=compile_seconds, steps=steps,
        step_seconds=step_seconds,
    )
