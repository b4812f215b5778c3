"""The fix for an axis whose length varied: weighed by cost, and safe for what padding changes.

A report's fix for a varying length is one of three, from the lengths in the order
they compiled and what each compile cost:

- **growing step by step** (a decoding loop's context, one compile per new length):
  one shape at the largest length with the true index of the last position, or a
  cache, first; buckets only after it;
- **bounded**: a few lengths, each compiled once: on a grid (a pipeline's buckets), a
  schedule that multiplies the length in order (a curriculum: 10, 20, 40, 80), or two (a
  last, partial batch; two shapes on another axis): padding saves a few one-time compiles
  and adds work to every call, so the fix says when it pays (the run's step time it must
  stay under; shapewatch does not time calls, so the step time itself is unknown), not to
  pad;
- **storm**: each new length compiles: pad to the buckets that ``shapewatch.buckets.propose``
  finds for the lengths seen.

Every padding fix says what padding changes on its axis (a batch axis: the padded rows
must be masked out of losses and metrics, as ``pad_batch`` and the loaders' ``Batch.rows``
and ``Batch.mask`` do; a sequence axis: what reads positions must read the true length)
and that lengths longer than those seen compile again, with how to give the maximum.

A length may be what the program asks for, not the size of its data (the save times of an
ODE solve, a curriculum's horizon): then the output's length follows it, and padding changes
what the function returns. Where the output shapes of each compile are known
(:func:`output_follows`), the fix names the output axis that follows the length and says so
first; where they are not, the fix of axis 0 of a vector (the shape of such an input) says
that it cannot tell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

UNCOUNTED = ("how often each came is unknown: cached calls do not reach shapewatch; "
             "count them with watched_jit(..., count_calls=True)")
_BOUNDED_MAX = 8  # most lengths a pipeline's buckets (or a last batch) make, compiled once each
_GROWING_MIN = 4  # fewest lengths that grow by one step each, in order, to be a decoding loop
_SCHEDULE_MIN = 3  # fewest lengths, each the last times one factor, in order, to be a schedule
STEP_UNKNOWN = ("the step time is unknown: shapewatch does not time calls; shapewatch.bench(fn, *args) "
                "measures one")


def _n(n: int, noun: str) -> str:
    return f"{n} {noun if n == 1 else noun + 's'}"


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def growing_step(order: Sequence[int]) -> int | None:
    """The step by which the lengths grew, one new length per compile in the order compiled, or None.

    A few lengths on a grid of 8 or more, compiled in rising order, are a pipeline's
    buckets met in order (an epoch's first batches), not a growing context.
    """
    if len(order) < _GROWING_MIN:
        return None
    steps = {b - a for a, b in zip(order, order[1:])}
    step = next(iter(steps)) if len(steps) == 1 else 0
    if step <= 0 or (step >= 8 and len(order) <= _BOUNDED_MAX):
        return None
    return step


def schedule_factor(order: Sequence[int]) -> int | None:
    """The factor by which each length multiplied the last, in the order compiled (a curriculum
    10, 20, 40, 80: 2), or None: at least three lengths, each compiled once, one factor of 2 or more."""
    if len(order) < _SCHEDULE_MIN or len(set(order)) != len(order) or min(order) <= 0:
        return None
    factors = {b // a if b % a == 0 else 0 for a, b in zip(order, order[1:])}
    factor = next(iter(factors)) if len(factors) == 1 else 0
    return factor if factor >= 2 else None


#: an output axis that is the length plus or minus this much follows it too (a solve that also
#: returns its start: n + 1 points; a jnp.diff: n - 1)
_OFFSET = 2


def output_follows(order: Sequence[int],
                   outputs: Sequence[Sequence[tuple[str, Sequence[int]]] | None] | None) -> str | None:
    """The output axis whose length was the varying length on every compile that traced.

    Args:
      order: the varying length of each compile, in order.
      outputs: for each of those compiles, the output leaves it traced, as ``(path, shape)``
        (``path`` as ``jax.tree_util.keystr`` writes it after ``out``: ``"out"``,
        ``"out[0]"``, ``"out['ys']"``), or None for a compile that did not trace (its outputs
        unknown); ``outputs`` None where no output shapes were recorded.

    Returns:
      ``"out[0].shape[0]"``, the first such axis (``"out.shape[0] - 1"`` for an axis one longer
      than the length on every compile, up to two either way; an exact one first); ``""`` where the outputs are known and no
      axis had the length on every compile; None where fewer than two lengths had their
      outputs known (nothing to tell).
    """
    if outputs is None or len(outputs) != len(order):
        return None
    known = [(n, leaves) for n, leaves in zip(order, outputs) if leaves is not None]
    if len({n for n, _ in known}) < 2:
        return None
    candidates: set[tuple[int, str, int]] | None = None  # (offset, path, axis): the axis is the length + offset
    for n, leaves in known:
        here = {(d - n, path, i) for path, shape in leaves for i, d in enumerate(shape)
                if d >= 0 and abs(d - n) <= _OFFSET}
        candidates = here if candidates is None else candidates & here
        if not candidates:
            return ""
    offset, path, axis = min(candidates or (), key=lambda c: (abs(c[0]), c[1], c[2]))
    shift = "" if offset == 0 else f" {'-' if offset > 0 else '+'} {abs(offset)}"
    return f"{path}.shape[{axis}]{shift}"


def _follows(output: str | None, kind: str) -> str:
    """What padding changes when the length may be what the program asks for."""
    if kind == "batch":  # per-row outputs follow the rows: the batch's own fix (a mask) says what padding changes
        return ""
    if output:
        return (f"the output's length follows this one ({output} had it on every compile): padding changes "
                "what the function returns; if the length is what the program asks for (the save times of an "
                "ODE solve, a curriculum's horizon), keep these shapes; pad only where padded inputs are valid "
                "ones (repeat the last value) and slice the output back to the true length")
    if output is None and kind == "":
        return ("if this length is what the program asks for (the output's length follows it: the save times "
                "of an ODE solve, a curriculum's horizon), padding changes the result: keep these shapes, or "
                "pad only where padded inputs are valid ones and slice the output back to the true length "
                "(the output's shapes are unknown here: an output of more than 64 leaves or of other nodes than "
                "tuples, lists and dicts, or a report read back from JSON)")
    return ""


def _grid(distinct: Sequence[int]) -> int:
    return math.gcd(*distinct) if len(distinct) > 1 else 0


def _plan(lengths: Sequence[int], calls: Sequence[int] | None,
          max_buckets: int) -> tuple[str, float, int, int] | None:
    """``(the bucket sentence, the padding's extra work per call, compiles saved, largest bucket)``, or None."""
    distinct = sorted(set(lengths))
    try:
        import numpy as np

        from shapewatch.buckets import propose
    except Exception:  # the planner is optional here
        return None
    if calls is None:
        weighed, over = np.array(distinct), (f"over the {len(distinct)} lengths seen, if each came equally "
                                             f"often ({UNCOUNTED})")
    else:
        weighed = np.repeat(np.array(lengths), np.array(calls))
        over = f"over the {_n(int(weighed.size), 'call')} counted"
    k = min(max_buckets, max(1, len(distinct) // 3))
    plan = propose(weighed, max_buckets=k, multiple_of=8 if distinct[-1] >= 64 else 1)
    waste = float(plan.waste(weighed))
    sentence = (f"pad to the buckets {list(plan.boundaries)} (shapewatch.buckets.propose): "
                f"{_n(len(plan.boundaries), 'compile')} instead of {len(distinct)}, adding {waste:.0%} padding {over}")
    return sentence, waste, len(distinct) - len(plan.boundaries), max(plan.boundaries)


def _axis_safety(kind: str) -> str:
    if kind == "batch":
        return ("padded rows change what is computed over the batch: mask them out of losses and metrics (a "
                "mean over shape[0] counts them); shapewatch.buckets.pad_batch(batch, batch_size) pads a batch and "
                "returns the mask of its real rows, and the loaders' batches carry Batch.rows and Batch.mask")
    if kind == "sequence":
        return ("padding moves the last real position: what reads positions (x[:, -1], a cumulative sum, the "
                "end of a causal mask) must read the true length (the loaders' Batch.mask and Batch.lengths)")
    return ""


def _longer(largest: int) -> str:
    return (f"lengths longer than {largest} will compile again: give the largest the program can see "
            "(shapewatch.buckets.propose(lengths, max_length=...), or a loader's buckets=[..., maximum])")


def axis_fix(lengths: Sequence[int], order: Sequence[int], kind: str, compile_s: float | None,
             calls: Sequence[int] | None = None, calls_total: int | None = None,
             output: str | None = None) -> str:
    """The fix for an axis that took ``lengths`` (distinct, sorted; ``order``: one per compile, in order).

    Args:
      lengths: the distinct lengths, sorted.
      order: the length of each compile, in the order they happened.
      kind: ``"batch"`` (axis 0 of an array of 2 or more axes), ``"sequence"`` (a later
        axis) or ``""`` (axis 0 of a vector: either).
      compile_s: the function's mean seconds per compile (trace, lower, compile), or None.
      calls: the calls counted for each of ``lengths`` (``count_calls=True``), or None.
      calls_total: the calls counted in all, or None.
      output: what :func:`output_follows` found: the output axis that had the length on
        every compile, ``""`` for none, None where the output shapes are unknown.
    """
    largest = max(lengths)
    each = "" if compile_s is None else f", {_seconds(compile_s)} each"
    step = growing_step(order) if kind != "batch" else None  # rows that grow are not a decoding context
    found = _plan(lengths, calls, 4)
    covered = largest if found is None else max(largest, found[3])  # the fix's largest shape
    follows = _follows(output, kind)
    first_follows = [follows] if output else []  # known: said first; else a caveat after the axis's own
    tail = [t for t in (_axis_safety(kind), "" if output else follows, _longer(covered)) if t]
    if step is not None:
        first = (f"the length grows by {step} per compile, in order ({order[0]} to {order[-1]}: a decoding loop's "
                 f"context, {_n(len(order), 'compile')}{each}): compile one shape at the largest length (the "
                 "model's maximum context) and pass the true index of the last real position (read it, not "
                 "x[:, -1]), or keep a cache of fixed size (updated with jax.lax.dynamic_update_slice)")
        then = [] if found is None else [f"buckets only after that ({found[0]}), reading positions at the "
                                         "true length"]
        return "; ".join([first, *first_follows, *then, *([follows] if follows and not output else []),
                          _longer(covered)])
    if found is None:
        return "; ".join([*first_follows, f"pad this axis to a few fixed sizes (e.g. multiples of 8 up to {largest})",
                          *tail])
    sentence, waste, saved, _ = found
    grid = _grid(lengths)
    factor = schedule_factor(order)
    two = len(lengths) == 2
    if (factor is not None or len(lengths) <= _BOUNDED_MAX and (two or (grid >= 8 and len(lengths) > 2))):
        last_batch = kind == "batch" and two and calls is None
        if last_batch:  # the padding falls on the short batches only, not on every call
            small = min(lengths)
            waste, saved = (largest - small) / max(small, 1), 1
            sentence = (f"pad the short batch to {largest} rows (shapewatch.buckets.pad_batch(batch, {largest})): "
                        f"1 compile instead of 2, {largest - small} padded rows in each short batch")
            if small == 0:  # an empty batch: no rows to compute
                sentence = f"skip the empty batch (0 rows: nothing to compute), or {sentence}"
        if factor is not None:
            shape = f"each {factor} times the last, in order: a schedule, such as a curriculum"
        elif kind == "batch" and two:
            shape = "a full and a short batch: a last, partial one"
        elif two:
            shape = f"{lengths[0]} and {lengths[1]}: two shapes"
        else:
            shape = f"on a grid of {grid}: the program's own buckets"
        once = "each compiled once" if len(order) == len(lengths) else f"{_n(len(order), 'compile')} in all"
        verdict = f"bounded: {_n(len(lengths), 'length')} ({shape}), {once}{each}"
        work = f"{waste:.0%} work to each short batch" if last_batch else f"{waste:.0%} work to every call"
        if compile_s is None or waste <= 0:
            pays = f"padding saves one-time compiles and adds {work}: it pays only in a short run ({STEP_UNKNOWN})"
        else:
            budget = saved * compile_s / waste
            per = (f", a step under {_seconds(budget / calls_total)} over the {_n(calls_total, 'call')} counted"
                   if calls_total else "")
            steps = "the short batches' steps" if last_batch else "the run's steps"
            pays = (f"padding would save {_n(saved, 'compile')} ({_seconds(saved * compile_s)}, once) and add "
                    f"{work}: it pays only if {steps} take under {_seconds(budget)} in all{per} ({STEP_UNKNOWN}); "
                    "otherwise keep these shapes")
        if factor is not None and follows and not output:  # a schedule: likely the program's own lengths
            first_follows, tail = [follows], [t for t in tail if t != follows]
        return "; ".join([verdict, *first_follows, pays, f"if it pays: {sentence}", *tail])
    verdict = f"storm: each new length compiles ({_n(len(order), 'compile')} so far{each})"
    return "; ".join([verdict, *first_follows, sentence, *tail])
