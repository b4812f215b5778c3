"""group_by_length(strategy="auto"): pack or bucket, whichever the measured step and compile costs
favour, re-decided online; every example once and whole across a switch; resumable; bad input refused."""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
import warnings
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapewatch.buckets import Batch, group_by_length
from shapewatch.buckets._online.choose import Choice
from shapewatch.buckets._online.cost_model import STEPS_TO_SETTLE
from tests._interrupt import Interrupter, buckets_files, sweep, ticking
from tests._jobs import free_port, run_processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPAN = 10_000
FLUSH = "ignore:.*buffer_size=.* is below one full"


def examples(lengths):
    """Example ``i``: ``i * SPAN + 1 + arange(n)``: every token names its example and place."""
    return [(i * SPAN + 1 + np.arange(n)).astype(np.int64) for i, n in enumerate(lengths)]


def want(items):
    return sorted(tuple(np.asarray(e).tolist()) for e in items)


def segments(batch: Batch):
    """Every example of a batch as a tuple of its tokens, read through ``segment_ids``; checks the
    mask, lengths and positions, and that padding only ends a row."""
    ids, pos, data = np.asarray(batch.segment_ids), np.asarray(batch.positions), np.asarray(batch.data)
    assert ids.dtype == np.int32 and pos.dtype == np.int32 and ids.shape == data.shape == pos.shape
    assert (np.asarray(batch.mask) == (ids > 0)).all()
    assert (batch.lengths == (ids > 0).sum(axis=1)).all()
    assert (pos[ids == 0] == 0).all() and (data[ids == 0] == 0).all()
    got = []
    for r in range(ids.shape[0]):
        used = int((ids[r] > 0).sum())
        assert (ids[r][used:] == 0).all() and (ids[r][:used] > 0).all()
        if r >= batch.rows:
            assert used == 0
        count = int(ids[r].max(initial=0))
        assert sorted(set(ids[r][:used].tolist())) == list(range(1, count + 1))
        assert (np.diff(ids[r][:used]) >= 0).all()
        for k in range(1, count + 1):
            where = ids[r] == k
            assert (pos[r][where] == np.arange(where.sum())).all()
            got.append(tuple(data[r][where].tolist()))
    return got


def choices(loader):
    return [d for d in loader.decisions if isinstance(d, Choice)]


# ---------------------------------------------------------------- steps with known cost shapes

D, LAYERS = 128, 12
_W = jnp.asarray(np.random.default_rng(1).normal(size=(D,)), jnp.float32)


@jax.jit
def attention_step(tokens, segment_ids):
    """Self-attention masked by segment: each row costs O(L^2)."""
    h = (tokens.astype(jnp.float32) % 97)[..., None] * _W / 97
    same = (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids[:, None, :] > 0)

    def layer(_, h):
        scores = jnp.einsum("bld,bmd->blm", h, h) / D
        return jnp.tanh(jnp.einsum("blm,bmd->bld", jax.nn.softmax(jnp.where(same, scores, -1e9), axis=-1), h))

    # a loop, not unrolled: the step's cost grows with LAYERS, its compile does not, so the choice
    # stays clear on a loaded machine (compiles slow down there more than steps)
    h = jax.lax.fori_loop(0, LAYERS, layer, h)
    return jnp.sum(h * (segment_ids > 0)[..., None])


_M = jnp.asarray(np.random.default_rng(2).normal(size=(384, 384)) / 20, jnp.float32)


@jax.jit
def per_token_step(tokens, segment_ids):
    """A per-token MLP (linear in the tokens) and a fixed part (an optimizer-like update of a
    weight matrix, the same whatever the batch's length)."""
    h = jnp.tanh((tokens.astype(jnp.float32) % 97)[..., None] * _M[0] / 97) @ _M
    fixed = _M
    for _ in range(6):
        fixed = jnp.tanh(fixed @ _M)
    return jnp.sum(h * (segment_ids > 0)[..., None]) + jnp.sum(fixed)


def run(loader, step, stall=0.0):
    """Drain ``loader`` through a real jitted ``step`` that the loop waits on; the examples out.
    ``stall``: seconds the loop stalls (a busy host, a collection) in the first step of each length
    shorter than 512 (its second batch: the first holds its compile), a step the loader measures."""
    out, batches = [], Counter()
    for batch in loader:
        float(step(batch.data, batch.segment_ids))
        out += segments(batch)
        length = batch.data.shape[1]
        batches[length] += 1
        if stall and length < 512 and batches[length] == 2:
            time.sleep(stall)
    return out


def long_tailed(count, seed=0):
    """Mostly short (4..24), a few long ones up to 512: attention over rows of 512 is costly."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 25, size=count)
    lengths[rng.choice(count, size=4, replace=False)] = [512, 300, 150, 90]
    return lengths.tolist()


@pytest.mark.alone  # real steps timed: CI's run beside the other worker's jobs chose packing on them
@pytest.mark.parametrize("stall", [0.0, 0.3], ids=["", "a stall in a measured step"])
def test_an_attention_step_on_long_tailed_lengths_is_bucketed(stall):
    """A stall of 0.3 s in the first step measured at a short length (its steps take ~20 ms; the
    step at 512, ~80 ms) made that length look as costly as 512's, and packing was chosen on it:
    a length is weighed from its second step on, at the lower of its two."""
    data = examples(long_tailed(4000))
    loader = group_by_length(data, token_budget=4096, strategy="auto")
    out = run(loader, attention_step, stall)
    print("\n".join(str(d) for d in loader.decisions))  # shown where the test fails
    assert sorted(out) == want(data)
    first = choices(loader)[-1]
    assert first.action == "choose" and first.strategy == "bucket"
    assert loader.strategy == "bucket" and len(first.boundaries) > 1
    assert first.bucket_s < first.pack_s and first.row_length == 512
    assert first.reason.startswith("bucketing [")
    assert any(d.action == "wait" for d in choices(loader))  # measured at more lengths before choosing


def test_a_per_token_step_on_short_examples_is_packed():
    rng = np.random.default_rng(3)
    data = examples(rng.integers(2, 40, size=600).tolist())
    loader = group_by_length(data, batch_size=8, strategy="auto")
    out = run(loader, per_token_step)
    assert sorted(out) == want(data)
    chosen = [d for d in choices(loader) if d.action not in ("wait", "start")]
    assert chosen[0].action == "choose" and chosen[0].strategy == "pack", [str(d) for d in loader.decisions]
    assert chosen[-1].strategy == "pack" and loader.strategy == "pack"
    assert chosen[0].pack_s < chosen[0].bucket_s
    row = chosen[0].row_length
    assert row == 39 and loader.plan.boundaries == (39,)
    # after the first batches (bucketing's measure), only full rows of the row length
    assert {length for _, length in loader.shapes} <= {row} | set(b for d in loader.decisions
                                                                    for b in d.boundaries)


# ---------------------------------------------------------------- every example once and whole

class Clock:
    """A clock the test moves: a batch of length ``L`` costs ``cost(L)``, a new length a compile more."""

    def __init__(self, cost, compile_s=1.0):
        self.t, self.cost, self.compile_s, self.seen = 0.0, cost, compile_s, set()

    def __call__(self):
        return self.t

    def consume(self, batch):
        length = batch.data.shape[1]
        self.t += self.cost(length) + (self.compile_s if length not in self.seen else 0.0)
        self.seen.add(length)


def linear(length):
    return 0.05 + 1e-4 * length


def quadratic(length):
    return 1e-5 * length * length


def drain(loader, clock):
    batches = []
    for batch in loader:
        clock.consume(batch)
        batches.append(batch)
    return batches


@pytest.mark.filterwarnings(FLUSH)
@pytest.mark.parametrize("cost", [linear, quadratic])
@pytest.mark.parametrize("shuffle, buffer_size, remainder, budget", [
    (True, 4096, "pad", False), (False, 4096, "pad", False), (True, 48, "pad", False), (False, 40, "keep", False),
    (True, 64, "drop", False), (True, 4096, "pad", True),
], ids=["shuffled", "in order", "buffers of 48", "in order, keep", "drop", "token budget"])
def test_every_example_comes_once_and_whole_whichever_strategy_is_chosen(cost, shuffle, buffer_size, remainder,
                                                                          budget):
    data = examples(long_tailed(300, seed=4))
    sizing = {"token_budget": 512} if budget else {"batch_size": 4}
    clock = Clock(cost)
    loader = group_by_length(data, **sizing, strategy="auto", shuffle=shuffle, buffer_size=buffer_size,
                             remainder=remainder, clock=clock)
    batches = drain(loader, clock)
    got = sorted(t for b in batches for t in segments(b))
    if remainder == "drop":
        assert len(got) == len(set(got)) and set(got) <= set(want(data))
        assert len(got) + loader.dropped == len(data)
    else:
        assert got == want(data)
    chosen = [d for d in choices(loader) if d.action not in ("wait", "start")]
    # a run that ends before its packed row's second step is measured (3 batches) packs throughout, unchosen
    assert (chosen[-1].strategy if chosen else "pack" if len(batches) <= 1 + STEPS_TO_SETTLE else None) \
        == loader.strategy, [str(d) for d in loader.decisions]
    if buffer_size == 4096 and cost is linear:  # the first buffer holds the long examples
        assert loader.strategy == "pack", [str(d) for d in loader.decisions]
    # (quadratic: the blind start packs most of these 300 examples into its first rows of 512; what is
    # left is too little for a compile that would measure a second length: see the tests of the wait)
    if remainder == "pad":
        rows = {b.data.shape[0] for b in batches if not budget}
        assert rows <= {4}


@pytest.mark.filterwarnings(FLUSH)
@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 80), max_size=150), batch=st.integers(1, 6), buffer_size=st.integers(1, 90),
       remainder=st.sampled_from(["pad", "drop", "keep"]), budget=st.booleans(), shuffle=st.booleans(),
       grows=st.booleans(), fixed=st.floats(0.0, 0.1), square=st.floats(0.0, 1e-4), compile_s=st.floats(0.0, 2.0))
def test_no_example_is_lost_or_altered_whatever_the_costs_choose(lengths, batch, buffer_size, remainder, budget,
                                                                 shuffle, grows, fixed, square, compile_s):
    if grows:  # longer examples later: a longer one may come while packing
        lengths = sorted(lengths)
    data = examples(lengths)
    clock = Clock(lambda length: fixed + 1e-4 * length + square * length * length, compile_s)
    sizing = {"token_budget": batch * 40} if budget else {"batch_size": batch}
    loader = group_by_length(data, **sizing, strategy="auto", buffer_size=buffer_size, remainder=remainder,
                             shuffle=shuffle, clock=clock)
    batches = drain(loader, clock)
    got = sorted(t for b in batches for t in segments(b))
    assert len(got) + loader.dropped == len(data)
    assert len(got) == len(set(got)) and set(got) <= set(want(data))
    if remainder != "drop":
        assert got == want(data)
    assert loader.max_buffered <= buffer_size


def test_a_switch_mid_run_moves_every_held_example_to_the_other_strategy(tmp_path):
    """A saved report of an attention-like run starts the next one on bucketing; its own steps,
    measured at three lengths, cost a fixed part plus L: it switches to packing, once, and every
    example comes once (those queued for buckets at the switch packed)."""
    data = examples(np.random.default_rng(5).integers(4, 257, size=600).tolist())
    first_clock = Clock(quadratic)
    first = group_by_length(data, batch_size=4, strategy="auto", clock=first_clock)
    drain(first, first_clock)
    assert first.strategy == "bucket"
    clock = Clock(linear)
    saved = tmp_path / "loader.json"
    saved.write_text(json.dumps(first.report(), allow_nan=False))  # its choices too, as strict JSON
    loader = group_by_length(data, batch_size=4, strategy="auto", clock=clock, prior=str(saved))
    batches = drain(loader, clock)
    assert sorted(t for b in batches for t in segments(b)) == want(data)
    made = [d for d in choices(loader) if d.action not in ("wait", "start")]
    assert [(d.action, d.strategy) for d in made] == [("choose", "bucket"), ("switch", "pack")], [
        str(d) for d in loader.decisions]
    switch = made[1]
    assert switch.pack_s < switch.bucket_s and "packing into rows of" in switch.reason
    before = [b for b in batches[:switch.batch]]
    after = batches[switch.batch:]
    assert any(int(np.asarray(b.segment_ids).max()) > 1 for b in after)  # packed rows
    assert all(int(np.asarray(b.segment_ids).max()) <= 1 for b in before)  # one example a row


@pytest.mark.filterwarnings(FLUSH)
def test_longer_examples_while_packing_switch_to_bucketing_and_every_held_example_moves():
    """Short examples first (packed: a fixed part dominates their steps), then examples of 65 and 129:
    packed, they go into the rows of 16 doubled (128 and 256: twice their length, at 128^2 and
    256^2 a row); bucketing is cheaper, so it switches (the examples packed and waiting are queued
    for buckets) and every example comes once."""
    lengths = np.random.default_rng(9).integers(4, 17, size=200).tolist() + [65, 129] * 100
    data = examples(lengths)
    clock = Clock(lambda length: 0.01 + 1e-5 * length * length)
    loader = group_by_length(data, batch_size=4, strategy="auto", buffer_size=32, shuffle=False, clock=clock)
    batches = drain(loader, clock)
    assert sorted(t for b in batches for t in segments(b)) == want(data)
    made = [(d.action, d.strategy) for d in choices(loader) if d.action not in ("wait", "start")]
    assert made[:2] == [("choose", "pack"), ("switch", "bucket")], [str(d) for d in loader.decisions]
    switch = [d for d in choices(loader) if d.action == "switch"][0]
    assert switch.bucket_s < switch.pack_s and switch.row_length == 16
    assert "packing into rows of 16 (and of 128, 256 for longer examples)" in switch.reason
    started = [d for d in loader.decisions if not isinstance(d, Choice) and d.batch == switch.batch]
    assert started[0].action == "start" and started[0].boundaries == switch.boundaries
    # packed rows before the switch, one example a row just after it
    assert any(int(np.asarray(b.segment_ids).max()) > 1 for b in batches[:switch.batch])
    assert all(int(np.asarray(b.segment_ids).max()) == 1 for b in batches[switch.batch:switch.batch + 4])


def sorted_run(cost, **options):
    """``strategy="auto"`` over 3,000 lengths 1 to 199 sorted, batches of 8: the loader and its
    batches, each example checked to come once and whole."""
    data = examples(np.sort(np.random.default_rng(0).integers(1, 200, 3000)).tolist())
    clock = Clock(cost)
    loader = group_by_length(data, batch_size=8, strategy="auto", clock=clock, **options)
    batches = drain(loader, clock)
    assert sorted(t for b in batches for t in segments(b)) == want(data)
    json.dumps(loader.report(), allow_nan=False)  # strict JSON: no infinite seconds in a decision
    return loader, batches


@pytest.mark.filterwarnings(FLUSH)
@pytest.mark.parametrize("cost", [linear, quadratic])
def test_a_source_sorted_by_length_loses_no_example_and_keeps_within_max_shapes(cost):
    """Packing from a first buffer of the shortest, each longer length rows of its own would use up
    ``max_shapes`` (23 shapes, then examples refused as no shape was left); rows doubled are a few."""
    loader, batches = sorted_run(cost, buffer_size=512)
    assert len({b.data.shape for b in batches}) <= loader.max_shapes


@pytest.mark.filterwarnings(FLUSH)
def test_bucketing_with_no_plan_within_max_shapes_is_not_priced_as_free():
    """max_shapes=3 over a source sorted by length: packing's rows of 36 and 72 and bucketing's
    third shape leave no bucket plan for the longer lengths to come; that was priced 0 s, so auto
    switched to bucketing and the longer examples were refused (1,540 of 3,000 kept). Packing keeps
    them (its rows, doubled for longer examples, are not capped by max_shapes)."""
    loader, _ = sorted_run(linear, buffer_size=512, max_shapes=3)
    assert all(d.bucket_s is None or d.bucket_s > 0 for d in choices(loader)), [str(d) for d in loader.decisions]
    assert not any("inf s" in str(d) for d in loader.decisions)


@pytest.mark.filterwarnings(FLUSH)
def test_bucketing_at_max_shapes_for_a_longer_example_packs_from_there_and_keeps_every_example():
    """A step that grows like L^2 over a source sorted by length, read 64 at a time: bucketing re-plans
    as the lengths grow and uses every shape max_shapes allows; a longer example then had no bucket
    and was left out (raised). Now auto packs from there (rows of the top, doubled for longer
    examples) and says why; every example once."""
    loader, _ = sorted_run(quadratic, buffer_size=64)
    forced = [d for d in choices(loader) if "bucketing has no shape left within max_shapes=16" in d.reason]
    assert forced and forced[0].action == "switch" and forced[0].strategy == "pack"


# ---------------------------------------------------------------- a blind start, and a step measured at one length

def fixed(length):
    return 0.05


def test_the_first_batches_pack_into_rows_of_the_longest_length_read():
    """Nothing measured: the loader packs into rows of the longest length read (the shape bucketing
    started on), so no batch carries one example a row; short examples and a compile dearer than the
    rest of the run: packing, chosen from one measured length (two steps at it), with no wait."""
    data = examples(np.random.default_rng(11).integers(2, 40, size=400).tolist())
    clock = Clock(cubic, 1.0)
    loader = group_by_length(data, batch_size=4, strategy="auto", clock=clock)
    assert loader.strategy == "pack"
    batches = drain(loader, clock)
    assert sorted(t for b in batches for t in segments(b)) == want(data)
    made = [(d.batch, d.action, d.strategy, d.boundaries) for d in choices(loader)]
    assert made == [(0, "start", "pack", (39,)), (3, "choose", "pack", (39,))], [str(d) for d in loader.decisions]
    start = choices(loader)[0]
    assert start.bucket_s is None and start.pack_s is None and start.row_length == 39
    assert "packing into rows of the longest length read (39)" in start.reason
    chosen = choices(loader)[1]  # a floor under every bucket plan is above packing: no DP run
    assert "vs bucketing at least " in chosen.reason and chosen.bucket_s >= chosen.pack_s
    assert {b.data.shape for b in batches} == {(4, 39)}
    assert all(int(np.asarray(b.segment_ids).max()) > 1 for b in batches[:2])  # several examples a row
    pack = group_by_length(data, batch_size=4, strategy="pack", row_length=39)
    assert len(batches) <= len(list(pack)) + 1


def test_a_step_measured_at_one_length_is_measured_at_one_more_where_packing_could_lose_more():
    """Long examples, a step steeper than L^2: from the one length measured (512) the models that fit
    disagree; packing could lose more than a compile costs, so it buckets with a plan of one length
    more (a wait), which the planner keeps until that length is measured, then chooses bucketing."""
    data = examples(long_lognormal(400))
    clock = Clock(cubic, 0.2)
    loader = group_by_length(data, batch_size=4, strategy="auto", clock=clock)
    batches, explained = [], []
    for batch in loader:
        clock.consume(batch)
        batches.append(batch)
        explained.append(loader.explain().split("\n")[0])
    assert sorted(t for b in batches for t in segments(b)) == want(data)
    made = choices(loader)
    assert [(d.action, d.strategy) for d in made] == [("start", "pack"), ("wait", "bucket"), ("choose", "bucket")]
    wait, chosen = made[1], made[2]
    assert len(wait.boundaries) == 2 and wait.boundaries[-1] == 512  # one length more: one compile
    assert "~L^3: bucket" in wait.reason and "fixed: pack" in wait.reason and "could lose up to" in wait.reason
    assert wait.bucket_s < wait.pack_s
    # the planner kept the wait's plan until its lengths were measured, then re-planned
    waited = [b.data.shape[1] for b in batches[wait.batch:chosen.batch]]
    assert set(waited) <= set(wait.boundaries) and wait.boundaries[0] in waited
    assert chosen.bucket_s < chosen.pack_s and "every step model that fits the 2 length(s)" in chosen.reason
    assert explained[wait.batch].startswith(f"strategy='auto': bucketing; no choice yet: since batch {wait.batch}: "
                                            "the step is measured at 1 length(s) (512)")
    assert explained[-1].startswith(f"strategy='auto': bucketing; chosen at batch {chosen.batch}: bucketing [")
    assert loader.strategy == "bucket" and len(loader.plan.boundaries) > 2


class StallingClock(Clock):
    """A :class:`Clock` whose first step at ``length`` (its second batch) stalls ``stall`` seconds more."""

    def __init__(self, cost, compile_s, length, stall):
        super().__init__(cost, compile_s)
        self.length, self.stall, self.batches = length, stall, 0

    def consume(self, batch):
        super().consume(batch)
        if batch.data.shape[1] == self.length:
            self.batches += 1
            self.t += self.stall if self.batches == 2 else 0.0


@pytest.mark.parametrize("length", [512, 366, 462])
def test_a_stall_in_one_measured_step_does_not_switch_to_packing(length):
    """A 1 s stall in the first step measured at one length (its steps 0.02-0.05 s; 512: packing's
    row, measured first; 366 and 462: lengths bucketing measures later, 462 rarely): bucketing is
    chosen and kept. Before, each made packing cheaper on the one step and packing never measured
    that length again (366: a switch at batch 24, 462: at 42, once the chooser's first put-off had
    run out)."""
    data = examples(long_lognormal(3000))
    clock = StallingClock(cubic, 0.2, length, 1.0)
    loader = group_by_length(data, batch_size=4, strategy="auto", clock=clock)
    batches = drain(loader, clock)
    assert sorted(t for b in batches for t in segments(b)) == want(data)
    assert clock.batches >= 2  # the stall was made
    made = [(d.action, d.strategy) for d in choices(loader) if d.action != "start"]
    assert made == [("wait", "bucket"), ("choose", "bucket")], [str(d) for d in loader.decisions]


def test_once_a_put_off_runs_out_the_chooser_weighs_at_its_usual_times():
    """A length whose second step is slow to come puts the weighing off 8 batches, once: the
    weighings after are at new measurements and every 32 batches (a put-off that stayed due once
    run out would weigh at every batch: 57 in a row, in this run)."""
    from shapewatch.buckets._online.choose import StrategyChooser

    weighed = []
    priced = StrategyChooser._priced

    def counting(self, *args):
        weighed.append(self.planner.batches)
        return priced(self, *args)

    data = examples(long_lognormal(3000))
    clock = Clock(cubic, 0.2)
    loader = group_by_length(data, batch_size=4, strategy="auto", clock=clock)
    StrategyChooser._priced = counting
    try:
        drain(loader, clock)
    finally:
        StrategyChooser._priced = priced
    runs, longest = 1, 1
    for a, b in zip(weighed, weighed[1:]):
        runs = runs + 1 if b == a + 1 else 1
        longest = max(longest, runs)
    assert longest <= 6 and len(weighed) < loader.batches / 16, weighed


@pytest.mark.parametrize("cost", [fixed, linear], ids=["fixed", "linear"])
def test_where_packing_is_right_the_wait_costs_about_what_it_said_and_packing_resumes(cost):
    data = examples(long_lognormal(400))
    clock = Clock(cost, 0.2)
    loader = group_by_length(data, batch_size=4, strategy="auto", clock=clock)
    batches = drain(loader, clock)
    assert sorted(t for b in batches for t in segments(b)) == want(data)
    made = choices(loader)
    assert [(d.action, d.strategy) for d in made] == [("start", "pack"), ("wait", "bucket"), ("choose", "pack")]
    said = float(made[1].reason.split("more than measuring costs if packing is right (")[1].split(" s")[0])
    packing = Clock(cost, 0.2)
    drain(group_by_length(data, batch_size=4, strategy="pack", row_length=512), packing)
    # the measuring cost, in the test clock's seconds (within one step at 512: the last short batch)
    assert clock.t - packing.t <= said + cost(512)
    assert loader.strategy == "pack" and {b.data.shape[1] for b in batches[made[2].batch:]} == {512}


def test_the_step_models_through_one_or_two_points():
    from shapewatch.buckets._online.choose import _fits

    one = _fits(np.array([512.0]), np.array([0.5]))
    assert list(one) == ["fixed", "~L", "~L^2", "~L^3"]
    assert one["~L^3"] == ((3, 0.5 / 512 ** 3),)
    x = np.array([256.0, 512.0])
    cube = _fits(x, 1e-9 * x ** 3)  # exactly cubic: the pairs with an L^3 term fit, their other term 0
    assert set(cube) == {"a+d*L^3", "b*L+d*L^3", "c*L^2+d*L^3"}
    assert all(terms[0][1] == 0.0 and terms[1][1] == pytest.approx(1e-9) for terms in cube.values())
    flat = _fits(x, np.array([0.5, 0.5]))
    assert flat["a+b*L"] == ((0, pytest.approx(0.5)), (1, 0.0))


# ---------------------------------------------------------------- decisions and explain()

def test_decisions_and_explain_name_the_choice_and_the_costs_that_made_it(caplog):
    clock = Clock(linear)
    data = examples(np.random.default_rng(6).integers(2, 40, size=300).tolist())
    with caplog.at_level("INFO", logger="shapewatch"):
        loader = group_by_length(data, batch_size=4, strategy="auto", clock=clock)
        before = loader.explain()
        drain(loader, clock)
    assert before.startswith("strategy='auto': packing; no choice yet: the first batches measure a compile and a step (at the longest length read, packed)")
    choice = [d for d in choices(loader) if d.action == "choose"][0]
    text = str(choice)
    assert text.startswith(f"batch {choice.batch}: choose pack [39]: packing into rows of 39 ")
    assert f"{choice.pack_s:.3g} s" in text and f"{choice.bucket_s:.3g} s" in text
    assert "compile 1 s, step " in text and "*L^2 s a batch" in text
    assert text in caplog.text
    explained = loader.explain()
    lines = explained.split("\n")
    assert lines[0] == f"strategy='auto': packing; chosen at batch {choice.batch}: {choice.reason}"
    assert lines[1].startswith("packed rows of 39 (online auto, max_shapes=16; measured compile 1 s")
    assert lines[2] == "row length 39 (overflow='extend')"
    assert f"  {choice}" in lines
    report = loader.report()
    assert any(d.get("strategy") == "pack" and d["action"] == "choose" for d in report["decisions"])


def test_a_choice_names_and_prices_the_rows_the_loader_packs_into():
    # packing blind into rows of 512 (the first buffer's longest); a 2000 comes before the first
    # choice: the loader goes on in rows of 512 and packs the 2000 into 512 doubled (2048); the
    # choice names that row and prices those rows (it named and priced rows of 2000 for every example)
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 25, 2000).tolist()
    lengths[:4] = [512, 300, 150, 90]
    lengths[300] = 2000
    clock = Clock(linear)
    loader = group_by_length(examples(lengths), token_budget=4096, buffer_size=256, max_shapes=3, clock=clock,
                             strategy="auto")
    batches = drain(loader, clock)
    assert sorted(t for b in batches for t in segments(b)) == want(examples(lengths))
    choice = [d for d in choices(loader) if d.action == "choose"][0]
    assert choice.strategy == "pack" and loader.strategy == "pack"
    assert choice.boundaries == (512,) and choice.row_length == 512 == loader.plan.max_length
    assert "packing into rows of 512 (and of 2048 for longer examples)" in choice.reason
    assert {b.data.shape[1] for b in batches} == {512, 2048}
    assert loader.explain().startswith(f"strategy='auto': packing; chosen at batch {choice.batch}: packing into rows of 512 ")


def test_a_switch_to_bucketing_keeps_the_row_packing_compiled_as_a_bucket():
    # packing into rows of 127 doubled to 2032 for a long example; then longer ones, where bucketing
    # is cheaper: its plan's top is the compiled 2032 (no compile), where a DP over the lengths
    # seen only compiled 2016, and later 2018, for what (2, 2032) holds
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 128, 3000)
    lengths[-300:] = rng.integers(128, 2048, 300)
    clock = Clock(lambda length: 0.001 + 2e-9 * (4096 // length) * length * length, compile_s=2.0)
    loader = group_by_length(examples(lengths.tolist()), token_budget=4096, buffer_size=256, strategy="auto",
                             clock=clock)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = drain(loader, clock)
    assert sorted(t for b in batches for t in segments(b)) == want(examples(lengths.tolist()))
    switch = [d for d in choices(loader) if d.action == "switch"][0]
    assert switch.strategy == "bucket" and switch.boundaries[-1] == 2032, str(switch)
    assert {b.data.shape[1] for b in batches} == {127, 2032}


# ---------------------------------------------------------------- resuming

def cubic(length):
    """Attention whose L x L scores outgrow a cache: steeper than L^2."""
    return 0.05 * (length / 512) ** 3


def long_lognormal(count, seed=7):
    return np.clip(np.random.default_rng(seed).lognormal(np.log(256), 0.4, count), 2, 512).astype(int).tolist()


@pytest.mark.parametrize("cost, at, mode", [(linear, 11, "pack"), (cubic, 11, "bucket"), (cubic, 4, "bucket"),
                                            (linear, 1, "pack"), (linear, 3, "pack")],
                         ids=["packing", "bucketing", "in a wait", "blind start", "just chosen"])
def test_a_loader_restored_mid_epoch_yields_every_example_that_was_left_once(cost, at, mode):
    data = examples(np.random.default_rng(7).integers(2, 40, size=400).tolist() if cost is linear
                    else long_lognormal(400))
    buffer_size = 128 if cost is linear else 4096
    compile_s = 1.0 if cost is linear else 0.2

    def make():
        return group_by_length(data, batch_size=4, strategy="auto", buffer_size=buffer_size, clock=clock)

    clock = Clock(cost, compile_s)
    first = make()
    part = []
    for _, batch in zip(range(at), first):
        clock.consume(batch)
        part += segments(batch)
    state = pickle.loads(pickle.dumps(first.state_dict()))
    assert state["format"] == "shapewatch.auto-state/3" and state["mode"] == first.strategy == mode
    second = make()
    second.load_state_dict(state)
    assert second.strategy == first.strategy and second.plan == first.plan
    assert [str(d) for d in second.decisions] == [str(d) for d in first.decisions]
    rest = [t for b in drain(second, clock) for t in segments(b)]
    assert sorted(part + rest) == want(data)
    assert second.batches > at
    if at == 4 and cost is cubic:  # saved in a wait: the restored loader ends it as the first would have
        assert [d.action for d in choices(second)][:3] == ["start", "wait", "choose"]
        assert second.strategy == "bucket"


@pytest.mark.parametrize("change, error, match", [
    (lambda s: s.update(format="shapewatch.pack-state/1"), ValueError,
     r"expects a dict from state_dict\(\) \('shapewatch.auto-state/3'"),
    (lambda s: s.update(format="shapewatch.auto-state/4"), ValueError, r"got format 'shapewatch.auto-state/4'"),
    (lambda s: s.pop("chooser"), ValueError, r"missing \['chooser'\]"),
    (lambda s: s.update(mode="packed"), TypeError, r"state\['mode'\] is str 'packed', expected 'bucket' or 'pack'"),
    (lambda s: s.update(consumed=-1), TypeError, r"state\['consumed'\] is int -1, expected an int >= 0"),
    (lambda s: s["arguments"].update(batch_size=5), ValueError, r"\['batch_size'\] is 5, but this loader was "
                                                                r"made with 4"),
    (lambda s: s["arguments"].update(extra=1), ValueError, r"state\['arguments'\] has keys \[.*'extra'.*\], "
                                                              r"expected \["),
    (lambda s: s["staged"].append("x"), TypeError, r"state\['staged'\]\[\d+\] is str 'x'"),
    (lambda s: s["chooser"].update(weighed_at="3"), TypeError, r"state\['chooser'\]\['weighed_at'\] is str"),
    (lambda s: s["chooser"].update(unsettled={300: -1}), TypeError,
     r"\['unsettled'\] is dict \{300: -1\}, expected a dict of ints >= 0 \(length: batch\)"),
    (lambda s: s["chooser"].update(settle_due=2.5), TypeError, r"\['settle_due'\] is float 2.5, expected None or"),
    (lambda s: s["chooser"].pop("settle_due"), ValueError, r"is not a shapewatch.chooser-state/1 state"),
], ids=["pack state", "version", "missing", "mode", "consumed", "arguments", "argument keys", "staged",
        "chooser", "unsettled", "settle due", "one of the later two"])
def test_a_state_refused_names_the_field_and_leaves_the_loader_usable(change, error, match):
    data = examples(long_tailed(120, seed=8))
    clock = Clock(linear)
    first = group_by_length(data, batch_size=4, strategy="auto", buffer_size=40, clock=clock)
    for _, batch in zip(range(5), first):
        clock.consume(batch)
    state = first.state_dict()
    change(state)
    second = group_by_length(data, batch_size=4, strategy="auto", buffer_size=40, clock=Clock(linear))
    with pytest.raises(error, match=match):
        second.load_state_dict(state)
    assert sorted(t for b in second for t in segments(b)) == want(data)  # untouched: reads from the start


def test_a_state_saved_before_the_chooser_kept_its_put_offs_loads_and_goes_on_alike():
    """A state without the chooser's ``unsettled`` and ``settle_due`` (saved before they were kept),
    taken where nothing was put off, resumes as the run not interrupted."""
    data = examples(long_lognormal(400))

    def make(clock):
        return group_by_length(data, batch_size=4, strategy="auto", clock=clock)

    whole_clock = Clock(cubic, 0.2)
    whole = [segments(b) for b in drain(make(whole_clock), whole_clock)]
    clock = Clock(cubic, 0.2)
    first = make(clock)
    part = []
    for _, batch in zip(range(40), first):
        clock.consume(batch)
        part.append(segments(batch))
    state = pickle.loads(pickle.dumps(first.state_dict()))
    assert state["chooser"]["settle_due"] is None
    del state["chooser"]["unsettled"], state["chooser"]["settle_due"]
    second = make(clock)
    second.load_state_dict(state)
    assert part + [segments(b) for b in drain(second, clock)] == whole


def test_states_do_not_cross_strategies():
    data = examples([3, 5, 7, 9] * 10)
    auto = group_by_length(data, batch_size=2, strategy="auto", clock=Clock(linear))
    pack = group_by_length(data, batch_size=2, strategy="pack")
    bucket = group_by_length(data, batch_size=2, clock=Clock(linear))
    with pytest.raises(ValueError, match=r"\('shapewatch.auto-state/3', of a loader made with strategy='auto'\)"):
        auto.load_state_dict(pack.state_dict())
    with pytest.raises(ValueError, match=r"got format 'shapewatch.loader-state/2'"):
        auto.load_state_dict(bucket.state_dict())
    with pytest.raises(ValueError, match=r"load_state_dict expects"):
        pack.load_state_dict(auto.state_dict())


# ---------------------------------------------------------------- interrupted at any line

FILES = buckets_files(
    "_loaders.choose_by_length", "_online.choose", "_loaders.group_by_length", "_loaders.pack",
    "_loaders.group_by_length_examples", "_loaders.batch", "_loaders.reading", "_distributed.schedulers")


def interrupter(at):
    """A trace hook that raises KeyboardInterrupt at line event ``at`` of the loader's modules."""
    return Interrupter(at, FILES)


INTERRUPTED = {
    # packs after bucketing's first batches
    "bucket then pack": ([3, 7, 1, 12, 5, 9, 2, 14, 6, 4, 11, 8, 3, 10, 2, 2, 3, 4, 1, 5], linear, True),
    # packs, then longer examples come (into rows of 6 doubled: 48 and 96, nearly twice their length):
    # back to bucketing
    "pack then bucket": ([3, 5, 2, 6, 4, 3, 5, 2, 6, 4, 3, 5, 2, 6, 4, 3] + [25, 49] * 8,
                         lambda length: 0.01 + 1e-4 * length * length, False),
    # sorted, a step like L^3: bucketing re-plans up to max_shapes=4, then packs for a longer example
    "bucket at its cap, then pack": (list(range(1, 101)), lambda length: 1e-6 * length**3, False),
}
COMPILE_S = {"bucket then pack": 1.0, "pack then bucket": 0.05, "bucket at its cap, then pack": 0.01}
OPTIONS = {"bucket at its cap, then pack": {"max_shapes": 4}}


@pytest.mark.filterwarnings(FLUSH)
@pytest.mark.parametrize("name", INTERRUPTED)
def test_an_interrupt_at_any_line_of_next_loses_no_example(name):
    lengths, cost, shuffle = INTERRUPTED[name]

    def make():
        clock = Clock(cost, COMPILE_S[name])
        return group_by_length(examples(lengths), batch_size=2, strategy="auto", buffer_size=10, seed=1,
                               shuffle=shuffle, clock=clock, **OPTIONS.get(name, {})), clock

    def drain_interrupted(loader, clock, hook):
        out = []
        for _ in range(300):
            sys.settrace(hook)
            try:
                batch = next(loader)
            except KeyboardInterrupt:
                continue
            except StopIteration:
                return out
            finally:
                sys.settrace(None)
            clock.consume(batch)
            out.append(segments(batch))
        raise AssertionError("the loader did not end within 300 calls of next()")

    clean = interrupter(-1)
    loader, clock = make()
    first = drain_interrupted(loader, clock, clean)
    assert sorted(t for b in first for t in b) == want(examples(lengths))
    made = [(d.action, d.strategy) for d in choices(loader) if d.action not in ("wait", "start")]
    assert made[:2] == ([("choose", "pack")] if shuffle else [("choose", "pack"), ("switch", "bucket")])
    forced = [d for d in choices(loader) if d.reason.startswith("bucketing has no shape left")]
    assert bool(forced) == (name == "bucket at its cap, then pack")
    assert clean.lines > 200
    for at in sweep(clean.lines, max(1, clean.lines // 400)):
        hook = interrupter(at)
        loader, clock = make()
        got = drain_interrupted(loader, clock, hook)
        assert hook.fired == 1, f"line event {at} of {clean.lines} was never reached"
        assert sorted(t for b in got for t in b) == want(examples(lengths)), at
        # and as the run not interrupted, batch by batch (the same choices, plans and draws)
        assert got == first, at


# ---------------------------------------------------------------- many processes

JOB = """
import sys
import jax
import numpy as np
jax.config.update("jax_cpu_collectives_implementation", "gloo")
pid, port = int(sys.argv[1]), int(sys.argv[2])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid,
                           initialization_timeout=60)
from shapewatch.buckets import group_by_length
data = [np.arange(1, n + 1) + 1000 * i for i, n in enumerate(np.random.default_rng(pid).integers(2, 30, 80))]
loader = group_by_length(data, batch_size=4, strategy="auto", across_processes=False)
print("alone:", sum(int(b.segment_ids.max(axis=1).sum()) for b in loader) == len(data), loader.strategy)
jax.distributed.shutdown()
"""


def test_in_a_job_of_two_processes_auto_with_across_processes_false_chooses_on_each_shard_alone():
    # in step (the default) is tests/test_loaders_multiprocess.py's; here each process on its own
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    outputs = run_processes([[sys.executable, "-c", JOB, str(i), str(port)] for i in range(2)], env)
    for out in outputs:
        assert "alone: True" in out


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs, error, match", [
    (dict(strategy=1), TypeError, r"strategy must be a str, 'bucket', 'pack' or 'auto'; got int 1"),
    (dict(strategy="Auto"), ValueError, r"unknown strategy 'Auto'; expected one of 'bucket', 'pack', 'auto'"),
    (dict(strategy="auto", batch_size=2.0), TypeError, r"batch_size must be an integer >= 1; got float 2.0"),
    (dict(strategy="auto", seed="0"), TypeError, r"seed must be an int; got str '0'"),
    (dict(strategy="auto", clock=3), TypeError, r"clock must be .*callable.*; got int 3"),
    (dict(strategy="auto", prior=3), TypeError, r"prior must be None, .*; got int 3"),
    (dict(strategy="auto", buckets="8"), TypeError, r"buckets must be None, a Buckets or a sequence of ints; got "
                                                    r"str '8'"),
    (dict(strategy="auto", max_buckets=None), TypeError, r"max_buckets must be an integer >= 1 or 'auto'; got "
                                                         r"NoneType None"),
    (dict(strategy="auto", shuffle="no"), TypeError, r"shuffle must be a bool; got str 'no'"),
    (dict(strategy="auto", row_length=8), ValueError,
     r"strategy='auto'\) chooses the row length and the buckets from measured costs: row_length=8 would be "
     r"ignored; fix: leave it out, or pass strategy='pack' \(row_length=\)"),
    (dict(strategy="auto", buckets=(4, 8), max_buckets=3), ValueError,
     r"buckets=\(4, 8\), max_buckets=3 would be ignored; fix: leave them out"),
    (dict(strategy="auto", compile_seconds=1.0, steps=10, step_seconds=0.1), ValueError,
     r"compile_seconds=1.0, steps=10, step_seconds=0.1 would be ignored"),
    (dict(strategy="auto", max_shapes=0), ValueError, r"max_shapes must be an integer >= 1; got 0"),
    (dict(strategy="auto", remainder="spill"), ValueError, r"unknown remainder 'spill'"),
], ids=lambda v: str(v)[:40])
def test_bad_arguments_are_refused_when_the_loader_is_made(kwargs, error, match):
    sizing = {} if "batch_size" in kwargs else {"batch_size": 2}
    with pytest.raises(error, match=match) as info:
        group_by_length(examples([3, 4]), **sizing, **kwargs)
    assert str(info.value).startswith("[shapewatch]")


def test_examples_that_cannot_be_packed_raise_once_and_the_others_are_kept():
    data = [np.arange(1, 4), np.zeros(0, np.int64), np.arange(10, 15)]
    loader = group_by_length(data, batch_size=2, strategy="auto", shuffle=False)
    with pytest.raises(ValueError, match=r"an example has length 0: strategy='auto' may pack"):
        next(loader)
    assert sorted(t for b in loader for t in segments(b)) == [(1, 2, 3), (10, 11, 12, 13, 14)]
    labelled = [{"tokens": np.arange(1, 4), "label": np.int64(1)}, {"tokens": np.arange(1, 6), "label": np.int64(0)}]
    loader = group_by_length(labelled, batch_size=2, strategy="auto", length_of=lambda e: len(e["tokens"]))
    with pytest.raises(ValueError, match=r"strategy='auto' may pack: leaf .*label.* has no leading axis"):
        next(loader)


def test_a_state_saved_before_the_first_batch_loads_and_resumes_every_example():
    # a fresh loader (nothing read, packing's start not made yet) saved its state with no plan,
    # and loading it was refused ("state['plan'] is NoneType None, expected a one-boundary Buckets")
    data = examples([3, 9, 4, 10, 2, 7, 12, 5])
    first = group_by_length(data, batch_size=2, strategy="auto", clock=ticking())
    second = group_by_length(data, batch_size=2, strategy="auto", clock=ticking())
    second.load_state_dict(first.state_dict())
    assert sorted(t for b in second for t in segments(b)) == want(data)
