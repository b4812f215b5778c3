"""``bucketed`` across the processes of a ``jax.distributed`` job.

Each round (see ``_lockstep``) every process reads its next ``warmup`` batches (at
least one) and publishes their sizes and rows; all derive the same plan from
everyone's sizes (online: from process 0's measured costs). The batches are then
matched across processes by size: each process's batches sorted by size, the
largest with the largest, a process with fewer batches getting batches of padding
only at the smallest ranks. A step's bucket is the largest of its batches' buckets
and its rows the most rows (padded rows have length 0 and an all-False mask); the
steps of a round go in one seeded order, the same on every process.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

import numpy as np

from ._batch import Batch
from ._bucketed_batches import Held
from ._buckets import Buckets
from ._checks import fail
from ._lockstep import AgreedCosts, agreed_plan, histogram, lengths_of, planner_record
from ._pad import pad_batch

__all__ = ["in_step", "next_in_step"]


def in_step(loader: Any, size: int | None) -> None:
    """Set up a ``Bucketed`` whose ``_session`` is set (several processes)."""
    loader._schedule = []  # (bucket, rows, this process's held batch or None), next first
    loader._order = np.random.default_rng([0, 2])  # the steps' order: the same on every process
    loader._used = 0
    loader._size = size
    loader._template = None  # a batch of this process, to shape batches of padding only
    if loader._online is not None:
        loader._online.costs = AgreedCosts(loader._online.costs)


def next_in_step(loader: Any) -> Batch:
    s = loader._session
    if loader._online is not None:
        loader._online.request()
    while not loader._schedule:
        _round(loader)
    bucket, rows, held = loader._schedule.pop(0)
    out = _emit(loader, bucket, rows, held)
    if loader._online is not None:
        loader._online.yielded(bucket, 1)
    loader.seen += 1
    loader.shapes[bucket] += 1
    s.yielded()
    loader._history.append((bucket,) if rows is None else (rows, bucket))
    return out


def _rows(held: Any, axis: int) -> int | None:
    return None if axis == 0 or not held.lengths.ndim else int(held.lengths.shape[0])


def _round(loader: Any) -> None:
    s, online = loader._session, loader._online
    try:
        loader._read_last()
        while len(loader._held) < max(loader._warmup, 1) and not loader._done and loader._pull():
            pass
    except Exception as exc:
        s.fail(exc)
        raise
    held = loader._held
    if held and loader._template is None:
        loader._template = held[0]
    rec: dict[str, Any] = {"sizes": [h.size for h in held], "rows": [_rows(h, loader._axis) for h in held],
                           "lengths": histogram([h.size for h in held[loader._sent:]]),
                           "used": loader._used, "size": loader._size, "template": loader._template is not None}
    if online is not None and s.me == 0:
        rec["planner"] = planner_record(online)
    records = s.exchange(rec)
    loader._sent = len(held)
    if not any(r["sizes"] for r in records):
        raise StopIteration
    _share_template(loader, records)
    lengths, counts = lengths_of(records)
    _plan(loader, records, lengths, counts)
    loader._schedule = _match(loader, records)
    loader._held, loader._sent = [], 0


def _share_template(loader: Any, records: list[dict[str, Any]]) -> None:
    """Where a process read no batch yet (an empty shard), the first process that did sends it
    one, cut to a row, to shape its batches of padding only (one more exchange, once)."""
    if all(r["template"] for r in records) or not any(r["template"] for r in records):
        return
    giver = min(p for p, r in enumerate(records) if r["template"])
    blob = None
    if loader._session.me == giver:
        held = loader._template
        if held.ragged:
            held = Held(held.batch[:1], held.size, held.lengths[:1], True)
        elif _rows(held, loader._axis) is not None:
            from jax.tree_util import tree_map

            held = Held(tree_map(lambda x: np.asarray(x)[:1], held.batch), held.size, held.lengths[:1], False)
        try:
            blob = base64.b64encode(pickle.dumps(held)).decode("ascii")
        except Exception:  # not picklable: that process raises when it must pad
            blob = None
    got = loader._session.exchange({"template": blob})[giver]["template"]
    if loader._template is None and got:
        loader._template = pickle.loads(base64.b64decode(got))


def _plan(loader: Any, records: list[dict[str, Any]], lengths: np.ndarray, counts: np.ndarray) -> None:
    online = loader._online
    if online is not None:
        try:
            plan = agreed_plan(online, loader.plan, records, lengths, counts)
        except ValueError:  # at the cap: every process raises alike; the batches above the
            top = loader.plan.max_length  # plan are left out, their lengths taken back
            over = np.repeat(lengths, counts)
            online.forget(over[over > top].tolist())
            loader._held = [h for h in loader._held if h.size <= top]
            loader._sent = len(loader._held)  # the rest's lengths went out already
            raise
        loader.plan = plan or loader.plan
        return
    if loader.plan is None:
        loader.plan = loader._plan_for(np.repeat(lengths, counts).tolist())


def _match(loader: Any, records: list[dict[str, Any]]) -> list[tuple[int, int | None, Any]]:
    """The round's steps: batches matched by size across processes, in one seeded order."""
    plan = loader.plan
    steps = max(len(r["sizes"]) for r in records)
    buckets = [0] * steps
    rows: list[int | None] = [None] * steps
    mine: list[Any] = [None] * steps
    for p, rec in enumerate(records):
        order = np.argsort(rec["sizes"], kind="stable")
        first = steps - len(order)  # fewer batches: padding only at the smallest ranks
        for rank, i in enumerate(order):
            at = first + rank
            buckets[at] = max(buckets[at], int(plan._bucket_scalar(int(rec["sizes"][i]))))
            if rec["rows"][i] is not None:
                rows[at] = max(rows[at] or 0, rec["rows"][i])
            if p == loader._session.me:
                mine[at] = loader._held[i]
    out = list(zip(buckets, rows, mine, strict=True))
    return [out[i] for i in loader._order.permutation(steps)]


def _emit(loader: Any, bucket: int, rows: int | None, held: Any) -> Batch:
    """This process's batch padded to the step's bucket and rows (or padding only)."""
    padding = held is None
    if padding:
        if loader._template is None:
            raise fail(
                f"bucketed: process {loader._session.me} read no batch yet and must yield a batch of "
                f"padding only at step {loader._session.steps}: it cannot know the batches' structure; "
                "fix: give every process at least one batch")
        held = loader._template
    plan = loader.plan
    loader.plan = Buckets((bucket,), overflow="truncate")
    try:
        out = loader._pad(held)
    finally:
        loader.plan = plan
    loader._used += 0 if padding else 1
    data, mask, lengths = out.data, out.mask, out.lengths
    if padding:
        from jax.tree_util import tree_map

        data = tree_map(lambda x: np.full_like(np.asarray(x), loader._pad_value), data)
        mask = None if mask is None else np.zeros_like(np.asarray(mask))
        lengths = np.zeros_like(lengths)
    have = out.rows
    if rows is not None and have is not None and (padding or have < rows):
        keep = 0 if padding else have
        data = _rows_to(data, keep, rows, loader._pad_value)
        mask = None if mask is None else _rows_to(mask, keep, rows, False)
        lengths = _rows_to(lengths, keep, rows, 0)
    return Batch(data, mask, lengths, int(bucket), 0 if padding else out.rows)


def _rows_to(tree: Any, keep: int, rows: int, value: Any) -> Any:
    """Keep the first ``keep`` rows of every leaf and pad to ``rows`` with ``value``."""
    from jax.tree_util import tree_map

    cut = tree_map(lambda x: x[:keep], tree)
    if keep == 0:
        return tree_map(lambda x: np.full((rows, *x.shape[1:]), value, dtype=x.dtype), cut)
    return pad_batch(cut, rows, value)[0]
