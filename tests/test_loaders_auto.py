"""``max_buckets="auto"`` with no numbers: online planning from measured costs (injected clock)."""

from __future__ import annotations

import json
import logging
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapewatch.buckets import LengthObserver, bucketed, group_by_length, propose

FAST = settings(max_examples=30, deadline=None)
SMALL_BUFFER = "ignore:.*buffer_size=.* is below one full batch per bucket"


class Clock:
    """A clock the test moves: each batch costs a compile on a new shape, then steps."""

    def __init__(self, compile_s: float = 2.0, per_token: float = 1e-4) -> None:
        self.t, self.compile_s, self.per_token, self.seen = 0.0, compile_s, per_token, set()

    def __call__(self) -> float:
        return self.t

    def consume(self, shape: tuple[int, ...]) -> None:
        self.t += (self.compile_s if shape not in self.seen else 0.0) + self.per_token * np.prod(shape)
        self.seen.add(shape)


def tokens(n: int, start: int = 0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int64)


def stream(seed: int, n: int, top: int = 300):
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield tokens(int(np.clip(rng.lognormal(3.0, 1.0), 1, top)), start=1000 * i)


def drain(it, clock: Clock) -> list:
    out = []
    for b in it:
        clock.consume(b.data.shape)
        out.append(b)
    return out


def real_rows(batches) -> Counter:
    return Counter(tuple(b.data[r, : b.lengths[r]].tolist()) for b in batches for r in range(b.rows))


@pytest.mark.filterwarnings(SMALL_BUFFER)
@FAST
@given(seed=st.integers(0, 50), n=st.integers(0, 400), batch=st.integers(1, 9),
       buffer_size=st.integers(1, 200), budget=st.booleans())
def test_auto_loses_duplicates_and_alters_no_example_and_keeps_the_buffer_bounded(
        seed, n, batch, buffer_size, budget):
    examples = list(stream(seed, n))
    sizing = {"token_budget": 40 * batch} if budget else {"batch_size": batch}
    clock = Clock()
    it = group_by_length(iter(examples), **sizing, buffer_size=buffer_size, seed=seed,
                         clock=clock)
    out = drain(it, clock)
    assert real_rows(out) == Counter(tuple(e.tolist()) for e in examples)
    assert it.max_buffered <= buffer_size


@pytest.mark.filterwarnings(SMALL_BUFFER)
@pytest.mark.parametrize("budget", [False, True])
@pytest.mark.parametrize("cap", [2, 4, 16])
def test_no_shape_outside_the_cap_over_a_long_random_stream_even_after_re_planning(cap, budget):
    clock = Clock(compile_s=0.01)  # cheap compiles: the planner wants many buckets
    sizing = {"token_budget": 1024} if budget else {"batch_size": 8}
    it = group_by_length(stream(cap, 6000, top=250), **sizing, buffer_size=256, max_shapes=cap,
                         clock=clock)
    shapes = {b.data.shape for b in drain(it, clock)}
    assert len(shapes) <= cap == it.max_shapes
    assert cap < 16 or any(d.action in ("replan", "extend") for d in it.decisions)


def test_decisions_are_reproducible_for_a_seed_and_a_cost_sequence():
    def run():
        clock = Clock()
        it = group_by_length(list(stream(3, 2000)), batch_size=16, seed=5, clock=clock)
        order = [b.data.tolist() for b in drain(it, clock)]
        return [str(d) for d in it.decisions], order

    assert run() == run()


def test_expensive_compiles_keep_few_buckets_and_cheap_ones_buy_more():
    data = list(stream(4, 3000))
    dear, cheap = Clock(compile_s=100.0), Clock(compile_s=0.001)
    a = group_by_length(data, batch_size=16, clock=dear)
    b = group_by_length(data, batch_size=16, clock=cheap)
    drain(a, dear), drain(b, cheap)
    assert len(a.shapes) <= 2 < len(b.shapes)
    assert a.decisions[0].action == "start"


def test_every_decision_is_logged_and_explained(caplog):
    clock = Clock(compile_s=0.05)
    with caplog.at_level(logging.INFO, logger="shapewatch"):
        it = group_by_length(list(stream(6, 1500)), batch_size=16, clock=clock)
        drain(it, clock)
    logged = [r.getMessage() for r in caplog.records if "group_by_length" in r.getMessage()]
    assert len(logged) == len(it.decisions) >= 2
    assert logged[0].startswith("[shapewatch] group_by_length: batch 0: start")
    text = it.plan.explain()
    assert "online" in text and "compile" in text


def saved_report(tmp_path, data):
    """A first run over ``data`` (compiles of 0.5 s on the test's clock): it and the path of its
    saved report."""
    clock = Clock(compile_s=0.5)
    first = group_by_length(data, batch_size=16, clock=clock)
    drain(first, clock)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(first.report()))
    return first, str(path)


def test_a_second_run_from_the_saved_report_starts_on_the_plan_and_re_plans_nothing(tmp_path):
    data = list(stream(7, 3000))
    first, path = saved_report(tmp_path, data)
    clock2 = Clock(compile_s=0.5)
    second = group_by_length(data, batch_size=16, clock=clock2, prior=path)
    drain(second, clock2)
    assert [d.action for d in second.decisions] == ["start"]
    assert second.decisions[0].compile_s == pytest.approx(0.5, rel=0.2)
    assert second.plan.boundaries == second.decisions[0].boundaries
    assert len(second.shapes) <= len(first.shapes)


@pytest.mark.parametrize("strategy", ["bucket", "auto"])
def test_a_saved_report_with_max_shapes_1_starts_on_one_bucket_and_yields_every_example(tmp_path, strategy):
    """With one shape allowed there is none to keep back for a longer example: the start from a
    saved report's costs plans one bucket (was: no plan, an AssertionError at the first batch)."""
    data = list(stream(7, 600))
    _, path = saved_report(tmp_path, data)
    clock2 = Clock(compile_s=0.5)
    second = group_by_length(data, batch_size=16, clock=clock2, prior=path, max_shapes=1, strategy=strategy)
    out = drain(second, clock2)
    firsts = [b.data[(b.positions == 0) & (b.segment_ids > 0)] // 1000 for b in out]  # each example's first token
    assert sorted(np.concatenate(firsts).tolist()) == list(range(600))
    assert len({b.data.shape for b in out}) == 1
    assert "from measured costs" in str(second.decisions[0])


@pytest.mark.parametrize("strategy", ["bucket", "auto"])
@pytest.mark.parametrize("max_shapes", [1, None])
def test_an_empty_source_with_a_saved_report_yields_nothing(tmp_path, strategy, max_shapes):
    """A source of length 0 leaves nothing to come: the start from a saved report's costs planned
    nothing (an AssertionError at the first batch); it yields nothing, as without a report."""
    _, path = saved_report(tmp_path, list(stream(7, 600)))
    options = {} if max_shapes is None else {"max_shapes": max_shapes}
    assert list(group_by_length([], batch_size=16, prior=path, strategy=strategy, **options)) == []


def test_propose_and_the_loaders_accept_a_saved_observer():
    obs = LengthObserver([3, 5, 8, 9, 30, 31])
    assert propose(obs.to_dict(), 2).boundaries == propose(obs, 2).boundaries
    it = group_by_length([tokens(4)], batch_size=1, max_buckets=2, prior=obs)
    assert next(it).bucket in propose(obs, 2).boundaries + (4,)


def test_a_longer_example_than_every_shape_at_the_cap_raises_and_loses_nothing_else():
    data = [tokens(5, 10 * i) for i in range(20)] + [tokens(50, 999)]
    clock = Clock()
    it = group_by_length(iter(data), batch_size=4, buffer_size=20, max_shapes=1, clock=clock,
                         shuffle=False)
    with pytest.raises(ValueError, match=r"^\[shapewatch\] group_by_length: an example of length 50"):
        drain(it, clock)


def test_bucketed_auto_plans_online_and_stays_within_the_cap():
    rng = np.random.default_rng(0)
    sizes = np.clip(rng.lognormal(3.5, 0.8, 400), 2, 256).astype(int)
    sizes[3] = 256  # the longest within the warm-up: past it, one more shape is held in reserve
    clock = Clock(compile_s=0.01)
    it = bucketed([np.ones((4, n)) for n in sizes], max_shapes=5, clock=clock)
    out = drain(it, clock)
    assert len(out) == 400 and len({b.data.shape for b in out}) <= 5
    assert all(b.data.shape[1] >= n for b, n in zip(out, sizes, strict=True))
    assert it.decisions[0].action == "start"


def test_linked_compile_records_give_the_compile_seconds_exactly():
    class Record:
        total_s = 3.0

    records: list = []
    clock = Clock(compile_s=3.0)
    it = group_by_length(list(stream(8, 1000)), batch_size=16, clock=clock,
                         compile_records=lambda: records)
    for b in it:
        if b.data.shape not in clock.seen:
            records.append(Record())
        clock.consume(b.data.shape)
    assert it.report()["compile_seconds"] == pytest.approx(3.0)


def test_partial_cost_numbers_are_refused_naming_what_is_missing():
    with pytest.raises(ValueError, match=r"^\[shapewatch\] .*or none of them.*missing steps"):
        group_by_length([tokens(3)], batch_size=2, compile_seconds=1.0, step_seconds=0.1)


def test_bucketed_starts_a_second_run_on_the_saved_plan(tmp_path):
    rng = np.random.default_rng(1)
    sizes = np.clip(rng.lognormal(3.5, 0.8, 300), 2, 256).astype(int)
    clock = Clock(compile_s=0.5)
    first = bucketed([np.ones((4, n)) for n in sizes], clock=clock)
    drain(first, clock)
    path = tmp_path / "bucketed.json"
    path.write_text(json.dumps(first.report()))
    clock2 = Clock(compile_s=0.5)
    second = bucketed([np.ones((4, n)) for n in sizes], clock=clock2, prior=path)
    out = drain(second, clock2)
    assert second.decisions[0].action == "start"
    assert {d.action for d in second.decisions[1:]} <= {"keep"}  # re-plans nothing
    assert "from measured costs" in second.decisions[0].reason
    assert {b.bucket for b in out} <= set(second.decisions[0].boundaries)


def test_loaders_with_a_fixed_count_plan_from_the_prior_and_report_their_lengths():
    obs = LengthObserver([3] * 50 + [100] * 50)
    it = bucketed([np.ones((1, 5))], max_buckets=2, prior=obs)
    assert next(it).bucket == 100 and it.plan.boundaries == (3, 100)
    assert it.report()["lengths"] == LengthObserver([5]).to_dict()
    g = group_by_length([tokens(4), tokens(7)], batch_size=1, max_buckets=2, shuffle=False)
    list(g)
    saved = g.report()
    assert saved["lengths"] == LengthObserver([4, 7]).to_dict()
    assert propose(saved, 2).boundaries == (4, 7)


@pytest.mark.parametrize("cap", [384, 100])  # 100: 60 examples at it (truncated to a maximum)
def test_the_first_batches_measure_the_step_on_the_longest_examples_read(cap):
    """While nothing is measured, the plan is one bucket at the longest length: its first two
    batches (a compile, then a step measured) hold the longest examples of the first buffer, which
    the top bucket holds under any later plan, rather than a shuffled mix padded to the top."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(40), 0.9, 400), 2, cap).astype(int)
    clock = Clock()
    it = group_by_length([tokens(n, 1000 * i) for i, n in enumerate(lengths)], batch_size=8, seed=0, clock=clock)
    first = []
    for k, b in enumerate(it):
        clock.consume(b.data.shape)
        if k < 2:
            first += [int(n) for n in b.lengths]
    assert it.decisions[0].action == "start" and "no costs measured yet" in it.decisions[0].reason
    assert sorted(first) == sorted(lengths.tolist())[-16:]
    assert cap == 384 or first == [cap] * 16
