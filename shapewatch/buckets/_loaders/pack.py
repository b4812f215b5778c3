"""Packing (the batcher of ``group_by_length(..., strategy="pack")``): whole examples into rows
of one length, each example its own segment.

:func:`first_fit` puts each example in the first row with room for it, in the order given;
:func:`first_fit_decreasing` does so longest first; :func:`pack_rows` keeps whichever of the
two uses fewer rows (first-fit on a tie), so its padding is never above first-fit's over the
same examples. :func:`packed` is one step of the batcher: the examples held and the new ones
packed together, full batches of rows made ready, the rest held for the next step. It builds
new lists and changes none it is given: the loader takes its result in one assignment, so an
interrupt anywhere in it loses nothing. :func:`build_packed` writes one batch's rows: the data,
``segment_ids`` (0 = padding, k = the row's k-th example) and ``positions``.

Imports nothing of the loaders: the later loader core can host it as its packing batcher.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._checks import check_batch_shape

__all__ = ["Entry", "build_packed", "first_fit", "first_fit_decreasing", "pack_rows", "packed"]

Item = tuple[list[np.ndarray], int]  # (leaves as numpy, length), as the loader parses an example
#: A batch made ready: (row length, its rows (each a list of examples), "full" | "flush" | "end").
Entry = tuple[int, list[list[Item]], str]


def first_fit(lengths: Sequence[int], capacity: int, order: Sequence[int] | None = None) -> list[list[int]]:
    """Rows of ``capacity`` by first-fit: each index (in ``order``, default ``0, 1, ...``) goes to
    the first row whose room is at least its length (a new row when none has). Lengths above
    ``capacity`` count as ``capacity`` (a row of their own). Returns each row's indices.

    O(n log n): the rows' room is kept in a tree of maxima, searched for the leftmost row that
    fits (rows not opened yet have all their room, so the leftmost fit is first-fit's row).
    """
    idx = range(len(lengths)) if order is None else order
    n = len(idx)
    if n == 0:
        return []
    size = 1
    while size < n:
        size *= 2
    room = [capacity] * (2 * size)  # room[size + r]: row r's room; room[i]: the most of its subtree
    rows: list[list[int]] = []
    for i in idx:
        need = min(int(lengths[i]), capacity)
        node = 1
        while node < size:  # down to the leftmost leaf with room >= need (the root always has)
            node = 2 * node if room[2 * node] >= need else 2 * node + 1
        r = node - size
        if r == len(rows):
            rows.append([])
        rows[r].append(i)
        room[node] -= need
        node //= 2
        while node:
            room[node] = max(room[2 * node], room[2 * node + 1])
            node //= 2
    return rows


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """:func:`first_fit` over the indices longest first (ties in the order given)."""
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    return first_fit(lengths, capacity, order)


def pack_rows(lengths: Sequence[int], capacity: int,
              orders: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """The fewest rows of :func:`first_fit` in each of ``orders`` (default: the order given) and
    :func:`first_fit_decreasing`; on a tie the first of ``orders`` (a shuffled order keeps its mix)."""
    best = None
    for order in orders or [range(len(lengths))]:
        rows = first_fit(lengths, capacity, order)
        if best is None or len(rows) < len(best):
            best = rows
    ffd = first_fit_decreasing(lengths, capacity)
    return ffd if best is None or len(ffd) < len(best) else best


def row_of(length: int, row_length: int, overflow: str, multiple_of: int, doubling: bool = False,
           budget: int | None = None) -> int:
    """The row length an example of ``length`` is packed into: ``row_length``, or for a longer
    one with ``overflow="extend"`` its length rounded up to ``multiple_of`` (one more shape).

    With ``doubling`` (a row length the loader chose, not one given), a longer example's rows are
    ``row_length`` doubled until they hold it: however the lengths grow (a source sorted by
    length), the shapes stay ``log2(longest / row_length) + 1``, where one a length would be as
    many as the lengths above the row; the longer examples share those row lengths. A doubled
    row above ``budget`` (``token_budget``: tokens a batch) is the budget instead (rounded down
    to ``multiple_of``) where that holds the example, else, for an example within the budget, its
    own length rounded up (the least row above the budget); an example longer than the budget, a
    row of its own in any case, keeps the doubled row (shared by the examples it holds: one shape
    for them, where their own lengths would be one each)."""
    if length <= row_length or overflow != "extend":
        return row_length
    own = -(-length // multiple_of) * multiple_of
    if not doubling:
        return own
    row = row_length
    while row < length:
        row *= 2  # a multiple of multiple_of stays one
    if budget is not None and row > budget:
        top = budget // multiple_of * multiple_of
        if top >= length:
            return top
        if length <= budget:
            return own
    return row


def repooled(held: dict[int, list[Item]], pool_of: Callable[[int], int]) -> dict[int, list[Item]]:
    """``held`` (row length -> examples) keyed again by ``pool_of`` (the row length each example
    packs into now), in their order: a state saved when a longer example got rows of its own
    length loads with its examples where new ones join them. The same dict where nothing moves."""
    pools: dict[int, list[Item]] = {}
    for _, items in sorted(held.items()):
        for item in items:
            pools.setdefault(pool_of(item[1]), []).append(item)
    same = all(len(pools.get(k, ())) == len(v) and all(a is b for a, b in zip(pools.get(k, ()), v)) for k, v in held.items())
    return held if same else pools


def packed(held: dict[int, list[Item]], ready: list[Entry], fresh: list[Item], *,
           pool_of: Callable[[int], int], rows_for: Callable[[int], int], done: bool,
           rng: np.random.Generator | None, flush: bool = True) -> tuple[dict[int, list[Item]], list[Entry]]:
    """One step of the batcher, on new lists: ``(held, ready)`` after ``fresh`` joins the examples
    ``held`` (row length -> examples, in their order).

    Each row length's examples (those held first, then ``fresh``) are packed anew
    (:func:`pack_rows`: first-fit in the order read and, with ``rng``, in an order with ``fresh``
    shuffled, and first-fit-decreasing; the fewest rows, the shuffled order's on a tie). Full batches (``rows_for(length)`` rows each) of the fullest rows are
    made ready; the examples of the other rows stay held, to be packed with the next ones. With
    ``done`` (the source ended) every row goes: the emptiest make the short batch of each
    length (``"end"``). When no batch is full and the source goes on (the buffer is full), the row
    length with the most of a batch goes as one short batch (``"flush"``; not with ``flush=False``,
    as a process in step across processes that still holds batches made ready asks). ``rng`` (None: not
    shuffled) shuffles ``fresh``, the rows that go and the order of the batches made.
    """
    shuffled = list(range(len(fresh)))
    if rng is not None and len(fresh) > 1:
        shuffled = rng.permutation(len(fresh)).tolist()
    pools = {length: items[:] for length, items in held.items()}  # held first, then fresh as read
    where = []  # fresh example i: (its row length, its index in that pool)
    for item in fresh:
        pool = pools.setdefault(pool_of(item[1]), [])
        where.append((pool_of(item[1]), len(pool)))
        pool.append(item)
    orders = {length: list(range(len(held.get(length, ())))) for length in pools}
    for i in shuffled:  # the same pools, their fresh examples shuffled
        orders[where[i][0]].append(where[i][1])
    made: list[Entry] = []
    kept: dict[int, list[list[Item]]] = {}
    for length in sorted(pools):
        items = pools[length]
        if not items:
            continue
        read = range(len(items))
        ways = [orders[length], read] if orders[length] != list(read) else [read]
        rows = [[items[i] for i in row] for row in pack_rows([n for _, n in items], length, ways)]
        per = rows_for(length)
        rows.sort(key=lambda row: -sum(min(n, length) for _, n in row))  # the fullest go first
        cut = len(rows) // per * per
        going, rest = rows[:cut], rows[cut:]
        if rng is not None and len(going) > 1:
            going = [going[i] for i in rng.permutation(len(going))]
        made += [(length, going[start:start + per], "full") for start in range(0, cut, per)]
        if rest and done:  # the emptiest rows: the short batch at the end
            made.append((length, rest, "end"))
        elif rest:
            kept[length] = rest
    if flush and not made and not done and kept:  # the buffer is full of partial batches: flush the fullest
        length = max(kept, key=lambda b: (len(kept[b]) / rows_for(b), b))
        made.append((length, kept.pop(length), "flush"))
    if rng is not None and len(made) > 1:
        made = [made[i] for i in rng.permutation(len(made))]
    left = {length: [item for row in rows for item in row] for length, rows in kept.items()}
    return left, made[::-1] + ready  # pop() from the end: those already ready first


def build_packed(spec: Any, rows: list[list[Item]], n_rows: int, length: int,
                 pad_value: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, int]:
    """The batch of ``rows`` (each a list of examples) in ``n_rows`` rows of ``length``:
    ``(tree, segment_ids, positions, lengths, truncated)``. Every leaf of ``spec`` is a sequence
    (the loader refuses other examples). An example longer than ``length`` (``overflow=
    "truncate"``) is cut to it: ``truncated`` counts them."""
    from jax.tree_util import tree_unflatten

    check_batch_shape(n_rows, length)
    spec.frozen = True
    segment_ids = np.zeros((n_rows, length), dtype=np.int32)
    positions = np.zeros((n_rows, length), dtype=np.int32)
    lengths = np.zeros(n_rows, dtype=np.int64)
    spans: list[tuple[int, int, int, int]] = []  # (row, example's index in it, start, size)
    for r, row in enumerate(rows):
        start = 0
        for k, (_, n) in enumerate(row):
            size = min(n, length - start)
            segment_ids[r, start:start + size] = k + 1
            positions[r, start:start + size] = np.arange(size, dtype=np.int32)
            spans.append((r, k, start, size))
            start += size
        lengths[r] = start
    out_leaves = []
    for i, (shape, dtype) in enumerate(zip(spec.shapes, spec.dtypes)):
        arr = np.full((n_rows, length, *shape), pad_value, dtype=dtype)
        for r, k, start, size in spans:
            arr[r, start:start + size] = rows[r][k][0][i][:size]
        out_leaves.append(arr)
    truncated = sum(n > length for row in rows for _, n in row)
    return tree_unflatten(spec.treedef, out_leaves), segment_ids, positions, lengths, truncated
