"""``group_by_length`` across the processes of a ``jax.distributed`` job.

Each round (see ``_lockstep``): every process fills its buffer (until it holds
``buffer_size`` examples or its shard ends) and publishes the lengths it read; all
derive the same plan from everyone's lengths (the online re-planner from the same
inputs: process 0's measured costs); every process queues what it read under that
plan and publishes how many full batches (and partial ones) it holds per bucket. The
schedule is then every full batch that all processes hold, in one seeded order. When
no bucket has a full batch on every process, one step pads: the bucket with the most
real rows across processes, where each process yields a full batch, its partial batch
of that bucket (padded rows), or a batch of padding only (an all-False mask). So every
process yields the same shapes, the same number of times, and each of its own examples
exactly once.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

import numpy as np

from ._auto_planner import REPLAN_EVERY
from ._batch import Batch
from ._checks import fail
from ._lockstep import AgreedCosts, agreed_plan, histogram, lengths_of, planner_record

__all__ = ["next_in_step"]


def next_in_step(loader: Any) -> Batch:
    """The next batch of a multi-process ``GroupByLength`` (its ``_session`` is set)."""
    s = loader._session
    if loader._online is not None:
        loader._online.request()
    while not loader._schedule:
        _round(loader)
    bucket = loader._schedule.pop(0)
    batch = _take(loader, bucket)
    s.yielded()
    loader._yields[bucket] = loader._yields.get(bucket, 0) + 1
    return batch


def _read(loader: Any) -> None:
    """Fill the buffer; an error from the source or an example goes to the others first."""
    try:
        loader._read()
    except Exception as exc:  # the example that raised is left out, as on one process
        loader._session.fail(exc)
        raise


def _round(loader: Any) -> None:
    s, online = loader._session, loader._online
    _read(loader)
    rec: dict[str, Any] = {"lengths": histogram([n for _, n in loader._staged[loader._sent:]]),
                           "done": loader._done, "used": loader._used,
                           "size": loader._size, "spec": loader._spec is not None}
    if online is not None and s.me == 0:
        rec["planner"] = planner_record(online)
    records = s.exchange(rec)
    loader._sent = len(loader._staged)
    lengths, counts = lengths_of(records)
    _plan(loader, records, lengths, counts)
    staged = loader._staged
    if loader._shuffle and len(staged) > 1:
        staged = [staged[i] for i in loader._rng.permutation(len(staged))]
    loader._sent = 0
    loader._enqueue(staged)
    if loader._done and loader._remainder == "drop":  # the partial batches at the end
        short = [r for r in loader._ready if r[2] != "full" and len(r[1]) < loader._rows_for(r[0])]
        loader._ready = [r for r in loader._ready if not any(r is x for x in short)]
        loader.dropped += sum(len(r[1]) for r in short)
    full, partial = _holding(loader)
    rec2 = {"full": full, "partial": partial, "done": loader._done, "empty": loader._done and not loader._held}
    if loader._spec is not None and not all(r["spec"] for r in records) and \
            s.me == min(p for p, r in enumerate(records) if r["spec"]):
        rec2["structure"] = _send_spec(loader._spec)  # a process with an empty shard pads with it
    counts2 = s.exchange(rec2)
    if loader._spec is None:
        sent = [r["structure"] for r in counts2 if r.get("structure")]
        if sent:
            loader._spec = pickle.loads(base64.b64decode(sent[0]))
    loader._schedule = _schedule(loader, counts2)


def _send_spec(spec: Any) -> str | None:
    """The examples' structure (treedef, dtypes, shapes) for a process that read none, or None
    where it cannot be pickled (that process then raises when it must pad)."""
    try:
        return base64.b64encode(pickle.dumps(spec)).decode("ascii")
    except Exception:
        return None


def _plan(loader: Any, records: list[dict[str, Any]], lengths: np.ndarray, counts: np.ndarray) -> None:
    """The same plan on every process, from every process's lengths."""
    online = loader._online
    if online is not None:
        first = loader.plan is None
        try:
            plan = agreed_plan(online, loader.plan, records, lengths, counts)
        except ValueError:  # at the cap: every process raises; the holders leave them out
            top = loader.plan.max_length
            loader._staged = [it for it in loader._staged if it[1] <= top]
            online.forget(np.repeat(lengths, counts)[np.repeat(lengths, counts) > top].tolist())
            raise
        if first:
            loader.plan = plan
            loader._check_buffer(stacklevel=6)
            return
        if plan is not None:
            loader._requeue(plan)
        return
    if loader.plan is None:
        everyone = np.repeat(lengths, counts).tolist()
        loader._plan_from([(None, n) for n in everyone])


def _holding(loader: Any) -> tuple[dict[str, int], dict[str, int]]:
    """Full batches ready and examples in partial batches, per bucket (JSON keys)."""
    full: dict[str, int] = {}
    partial: dict[str, int] = {}
    for bucket, items, kind in loader._ready:
        if kind == "full":
            full[str(bucket)] = full.get(str(bucket), 0) + 1
        else:
            partial[str(bucket)] = partial.get(str(bucket), 0) + len(items)
    for bucket, q in loader._queues.items():
        if q:
            partial[str(bucket)] = partial.get(str(bucket), 0) + len(q)
    return full, partial


def _schedule(loader: Any, records: list[dict[str, Any]]) -> list[int]:
    """The steps until the next round: the same on every process."""
    if all(r["empty"] for r in records):
        raise StopIteration
    buckets = sorted({int(b) for r in records for key in ("full", "partial") for b in r[key]})
    if all(r["done"] for r in records):  # nothing more to read anywhere: every step left, at once
        need = {b: max(r["full"].get(str(b), 0) - (-r["partial"].get(str(b), 0) // loader._rows_for(b))
                       for r in records) for b in buckets}
    else:  # the full batches every process holds (one that holds nothing more pads any bucket)
        need = {b: min(r["full"].get(str(b), 0) for r in records if not r["empty"]) for b in buckets}
    steps = [b for b in buckets for _ in range(need[b])]
    if steps:
        if loader._shuffle:
            steps = [steps[i] for i in loader._order.permutation(len(steps))]
        if loader._online is not None:
            steps = steps[: _window(loader, steps)]
        return steps

    def real_rows(b: int) -> int:
        rows = loader._rows_for(b)
        return sum(rows if r["full"].get(str(b)) else min(r["partial"].get(str(b), 0), rows)
                   for r in records)

    best = max(buckets, key=lambda b: (real_rows(b), -b))
    return [best]


def _window(loader: Any, steps: list[int]) -> int:
    """How many steps before the online planner must see the measurements again: up to and
    including the first or second batch of a bucket (a compile, a first step), and at most
    until its periodic re-plan."""
    seen = dict(loader._yields)
    limit = max(1, REPLAN_EVERY - loader._online._since)
    for i, b in enumerate(steps[:limit]):
        if seen.get(b, 0) < 2:
            return i + 1
        seen[b] = seen.get(b, 0) + 1
    return limit


def _take(loader: Any, bucket: int) -> Batch:
    """This process's batch at ``bucket``: a full one, else a partial one, else padding only."""
    rows = loader._rows_for(bucket)
    ready = loader._ready
    at = [i for i, (b, _, kind) in enumerate(ready) if b == bucket]
    full = [i for i in at if ready[i][2] == "full"]
    if full or at:
        i = (full or at)[-1]  # pop() order: the last is the first ready
        _, items, _ = ready.pop(i)
    elif loader._queues.get(bucket):
        items = loader._queues[bucket][:rows]
        del loader._queues[bucket][:rows]
    else:
        items = []
        if loader._spec is None:
            raise fail(
                f"group_by_length: process {loader._session.me} read no example yet and must yield a "
                f"batch of padding only at step {loader._session.steps}: it cannot know the examples' "
                "structure; fix: give every process at least one example")
    out, truncated = loader._build(bucket, items, max(rows, len(items)))
    loader._count(bucket, max(rows, len(items)), truncated)
    loader._used += len(items)
    if loader._online is not None:
        loader._online.yielded(bucket, len(items))
    return out


def in_step(loader: Any, seed: int, size: int | None) -> None:
    """Set up a ``GroupByLength`` whose ``_session`` is set (several processes)."""
    loader._schedule = []  # buckets of the steps agreed, next first
    loader._order = np.random.default_rng([seed, 1])  # the steps' order: the same on every process
    loader._yields = {}  # bucket -> batches yielded
    loader._used = 0  # examples yielded
    loader._sent = 0  # staged examples whose lengths went out already
    loader._size = size
    if loader._remainder == "keep":  # a short batch would be a shape of this process alone
        loader._remainder = "pad"
    if loader._online is not None:
        loader._online.costs = AgreedCosts(loader._online.costs)
