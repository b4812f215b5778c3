"""The auto planner (``max_buckets="auto"`` with no numbers given): one test per defect found
in its reviews (issue 14, and the DP bound of a later change).

Real numpy (and, where the step matters, real JAX on the CPU); the consumer's cost is an
injected clock that the test moves (a compile on each new shape, then steps).
"""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest

from shapewatch.buckets import bucketed, group_by_length, propose
from shapewatch.buckets._online.auto_planner import AutoPlanner
from shapewatch.buckets._plan.buckets import Buckets

SMALL_BUFFER = "ignore:.*buffer_size=.* is below one full batch per bucket"


class Clock:
    """Each batch costs ``compile_s`` on a new shape, plus ``fixed + per_token * rows * L**power``."""

    def __init__(self, compile_s: float = 2.0, per_token: float = 1e-4, power: int = 1,
                 fixed: float = 0.0) -> None:
        self.t, self.compile_s, self.per_token, self.power, self.fixed = 0.0, compile_s, per_token, power, fixed
        self.seen: set = set()

    def __call__(self) -> float:
        return self.t

    def consume(self, shape: tuple[int, ...]) -> None:
        rows, length = shape[0], shape[-1]
        self.t += (self.compile_s if shape not in self.seen else 0.0) + self.fixed
        self.t += self.per_token * rows * float(length) ** self.power
        self.seen.add(shape)


def tokens(n: int, start: int = 0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int64)


def run(it, clock: Clock, limit: int = 100_000) -> tuple[list, list[str]]:
    """Drain ``it`` as a training loop that catches the loader's ValueErrors and goes on."""
    out, errors = [], []
    for _ in range(limit):
        try:
            b = next(it)
        except StopIteration:
            break
        except ValueError as exc:
            errors.append(str(exc))
            continue
        clock.consume(b.data.shape)
        out.append(b)
    return out, errors


def real_rows(batches) -> Counter:
    return Counter(tuple(b.data[r, : b.lengths[r]].tolist()) for b in batches for r in range(b.rows))


# -- a longer example at the cap ------------------------------------------------------------


def test_the_cap_error_names_the_length_of_the_example_it_leaves_out():
    # 20 examples of length 5 plan [5]; an example of length 7 at max_shapes=1 is refused.
    data = [tokens(5, 10 * i) for i in range(20)] + [tokens(7, 999)] + [tokens(5, 5000 + i) for i in range(8)]
    clock = Clock()
    it = group_by_length(iter(data), batch_size=4, buffer_size=20, max_shapes=1, clock=clock,
                         shuffle=False)
    out, errors = run(it, clock)
    assert len(errors) == 1
    # seen: "an example of length 10" (twice the top bucket, the headroom), not the example's 7
    assert "an example of length 7 " in errors[0], errors[0]


@pytest.mark.filterwarnings(SMALL_BUFFER)
def test_every_example_left_out_at_the_cap_is_reported():
    # The first buffer plans [5]; the next read holds three examples of length 9: all three are
    # left out, but one ValueError is raised, naming one length.
    data = [tokens(5, 10 * i) for i in range(8)] + [tokens(9, 1000 + 100 * i) for i in range(3)]
    data += [tokens(5, 5000 + 10 * i) for i in range(5)]
    clock = Clock()
    it = group_by_length(iter(data), batch_size=4, buffer_size=8, max_shapes=1, clock=clock,
                         shuffle=False)
    out, errors = run(it, clock)
    left_out = len(data) - sum(b.rows for b in out)
    assert left_out == 3
    reported = sum(int(m.group(1)) if (m := re.search(r"(\d+) examples", e)) else 1 for e in errors)
    assert reported == left_out, errors


def test_an_example_left_out_at_the_cap_raises_once_not_again_at_every_re_plan():
    rng = np.random.default_rng(0)
    data = [tokens(int(rng.integers(1, 40)), 100 * i) for i in range(200)] + [tokens(900, 10**6)]
    data += [tokens(int(rng.integers(1, 40)), 100 * i) for i in range(200, 400)] + [tokens(2000, 2 * 10**6)]
    data += [tokens(int(rng.integers(1, 40)), 100 * i) for i in range(400, 1400)]
    clock = Clock(compile_s=5.0)
    it = group_by_length(iter(data), batch_size=1, buffer_size=64, max_shapes=2, clock=clock,
                         shuffle=False)
    out, errors = run(it, clock)
    assert len(data) - sum(b.rows for b in out) == 1  # only the 2000 is left out
    # seen: the same "length 2000" error again every REPLAN_EVERY batches (32 in all)
    assert len(errors) == 1, f"{len(errors)} errors for one example left out"


def test_bucketed_goes_on_after_a_batch_left_out_at_the_cap():
    sizes = [5] * 10 + [50] + [5] * 5
    clock = Clock()
    it = bucketed([np.full((2, n), i) for i, n in enumerate(sizes)], max_shapes=1, clock=clock)
    out, errors = run(it, clock, limit=60)
    # seen: the batch of 50 raises at every next(), forever; the five batches after it never come
    assert len(errors) == 1, f"{len(errors)} errors"
    assert [int(b.data[0, 0]) for b in out] == [i for i, n in enumerate(sizes) if n == 5]


# -- headroom for a longer example once costs are measured -----------------------------------


@pytest.mark.filterwarnings(SMALL_BUFFER)
def test_with_measured_costs_a_longer_example_extends_with_headroom():
    # README: "one held back for a longer example (extended to twice the top)". The first buffer
    # is at most 29 long, later ones up to 39; max_shapes=2 (a step with max_recompiles=1).
    rng = np.random.default_rng(0)
    data = [tokens(int(rng.integers(1, 30)), 100 * i) for i in range(20)]
    data += [tokens(int(rng.integers(1, 40)), 100 * i) for i in range(20, 600)]
    clock = Clock(compile_s=0.01)
    it = group_by_length(iter(data), batch_size=4, buffer_size=20, max_shapes=2, clock=clock,
                         shuffle=False)
    out, errors = run(it, clock)
    # seen: the reserve is spent on [34] (the measured-cost path extends to exactly the longest
    # length seen), then every example of 35..39 is refused: dozens of errors, examples lost
    assert errors == [], f"{len(errors)} errors, first: {errors[:1]}"
    assert real_rows(out) == Counter(tuple(e.tolist()) for e in data)


def test_bucketed_with_defaults_does_not_run_out_of_shapes_on_a_lognormal_stream():
    # Cheap compiles, sizes capped at 256, the default max_shapes=16: each slightly longer batch
    # used to take a new top bucket at exactly its size until all 16 were spent; the next batch
    # of 256 then raised "an example of length 328" (an example that does not exist) forever.
    sizes = np.clip(np.random.default_rng(0).lognormal(3.5, 0.8, 300), 2, 256).astype(int)
    clock = Clock(compile_s=0.05)
    it = bucketed([np.ones((4, n)) for n in sizes], clock=clock)
    out, errors = run(it, clock, limit=400)
    assert errors == [], f"{len(errors)} errors, first: {errors[:1]}"
    assert len(out) == len(sizes)
    assert len({b.data.shape for b in out}) <= 16


def _extension_of(per_token: float, compile_s: float) -> tuple[int, list]:
    """bucketed on 300 batches of 8, lengths lognormal capped at 384, the longest 357 until
    batch 19 brings the cap (issue 36: extended to 714, then 84% padding)."""
    rng = np.random.default_rng(0)
    sizes = np.minimum(rng.lognormal(5.3, 0.4, 300).astype(int) + 1, 384)
    sizes[:19], sizes[5], sizes[19] = np.minimum(sizes[:19], 357), 357, 384
    clock = Clock(compile_s=compile_s, per_token=per_token)
    it = bucketed([np.ones((8, int(n))) for n in sizes], clock=clock)
    out, errors = run(it, clock)
    assert errors == [] and len(out) == len(sizes)
    return max(b.data.shape[1] for b in out), [d for d in it.decisions if d.action == "extend"]


def test_a_longer_example_extends_to_its_own_length_when_the_padding_would_cost_more():
    top, extends = _extension_of(per_token=1e-4, compile_s=0.05)
    assert top == 384, [str(d) for d in extends]
    assert any("no headroom: padding to" in d.reason for d in extends)


def test_a_longer_example_extends_with_headroom_when_the_measured_padding_is_cheaper():
    # steps of nanoseconds, a compile of seconds: the padding of headroom is worth one compile
    top, extends = _extension_of(per_token=1e-9, compile_s=5.0)
    assert top > 384 and any("headroom to" in d.reason and "costs less" in d.reason for d in extends)


# -- learning from an earlier run -------------------------------------------------------------


def test_a_saved_report_with_a_malformed_step_model_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"shapewatch": "buckets-report",
                                "lengths": {"lengths": [5, 50], "counts": [3, 3]},
                                "compile_seconds": 1.0, "step_model": [1, 2], "batches": 10}))
    for make in (lambda: list(group_by_length([tokens(3)], batch_size=1, prior=path)),
                 lambda: list(bucketed([np.ones((1, 3))], prior=path)),
                 lambda: propose(path, "auto")):
        # seen: "not enough values to unpack (expected 3, got 2)", no prefix, no file
        with pytest.raises(ValueError, match=r"^\[shapewatch\] .*report\.json"):
            make()


def test_a_saved_report_with_a_non_numeric_compile_seconds_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"shapewatch": "buckets-report",
                                "lengths": {"lengths": [5, 50], "counts": [3, 3]},
                                "compile_seconds": "x", "step_model": "abc", "batches": 10}))
    # seen: ValueError "could not convert string to float: 'a'" / TypeError from propose
    with pytest.raises(ValueError, match=r"^\[shapewatch\] .*report\.json"):
        propose(path, "auto")
    with pytest.raises(ValueError, match=r"^\[shapewatch\] .*report\.json"):
        list(group_by_length([tokens(3)], batch_size=1, prior=path))


def _quadratic_run(prior=None):
    rng = np.random.default_rng(7)
    data = [tokens(int(np.clip(rng.lognormal(3.0, 1.0), 1, 500)), 1000 * i) for i in range(3000)]
    clock = Clock(compile_s=0.5, per_token=1e-6, power=2, fixed=0.001)  # attention-like steps
    it = group_by_length(data, batch_size=16, clock=clock, multiple_of=8, prior=prior)
    run(it, clock)
    return it


def test_a_second_run_from_a_saved_report_keeps_its_plan_with_an_attention_like_step():
    first = _quadratic_run()
    report = json.loads(json.dumps(first.report()))
    second = _quadratic_run(prior=report)
    # seen: the prior's quadratic step model is replaced by a one-point proportional model at
    # batch 1, which drops to 4 buckets, then re-adds 7 compiles at batch 3, and re-plans again
    replans = [str(d) for d in second.decisions if d.action == "replan"]
    assert replans == [], replans  # the issue: "starts on the right plan and re-plans nothing"
    assert second.decisions[0].action == "start"
    assert {b for _, b in second.shapes} <= set(second.decisions[0].boundaries)


def test_propose_of_a_saved_report_gives_the_plan_the_next_run_starts_on():
    # README: "shapewatch buckets loader.json --max-buckets auto prints that plan from the
    # report's lengths and measured costs" (propose(report, "auto") is what it runs).
    first = _quadratic_run()
    report = json.loads(json.dumps(first.report()))
    second = _quadratic_run(prior=report)
    # seen: 14 buckets from propose (linear cost at the top's step) vs 9 for the loader
    assert propose(report, "auto", multiple_of=8).boundaries == second.decisions[0].boundaries


# -- max_shapes ----------------------------------------------------------------------------


@pytest.mark.parametrize("sizing", [{"batch_size": 8}, {"token_budget": 512}])
def test_remainder_keep_yields_no_more_lengths_than_max_shapes(sizing):
    # README: "At most max_shapes distinct shapes are ever yielded (with remainder="keep",
    # lengths: each short batch is one more shape)". Full batches stay within the cap.
    rng = np.random.default_rng(3)
    data = [tokens(int(np.clip(rng.lognormal(3.0, 1.0), 1, 250)), 1000 * i) for i in range(3000)]
    clock = Clock(compile_s=0.01)
    it = group_by_length(data, **sizing, buffer_size=64, max_shapes=5, clock=clock,
                         remainder="keep")
    out, errors = run(it, clock)
    assert errors == []
    assert len({b.data.shape[1] for b in out}) <= it.max_shapes == 5
    full = {b.data.shape for b in out if b.rows == it._rows_for(b.bucket)}
    assert len(full) <= 5
    assert any(b.rows < it._rows_for(b.bucket) for b in out)  # keep did keep short batches


# -- a real watched step ----------------------------------------------------------------------


def _step():
    import jax.numpy as jnp

    import shapewatch

    def loss(x, m):
        return (jnp.tanh(x * 1.0) * m).sum()

    return shapewatch.watched_jit(loss)


def test_compile_records_takes_the_configured_default_budget():
    import shapewatch

    shapewatch.configure(max_recompiles=2)
    try:
        step = _step()
        # README: max_shapes defaults to "the linked step's max_recompiles + 1"; the step's budget
        # here comes from configure(max_recompiles=2) (watched_jit's documented default).
        # seen: compile_records(step).max_shapes is None, so the loader allows 16 shapes
        assert shapewatch.compile_records(step).max_shapes == 3
        it = group_by_length([tokens(4)], batch_size=1, compile_records=shapewatch.compile_records(step))
        assert it.max_shapes == 3
    finally:
        shapewatch.configure(max_recompiles=None)


def test_linked_compile_seconds_survive_a_full_record_list():
    import jax.numpy as jnp

    import shapewatch

    shapewatch.configure(max_records=2)
    try:
        step = _step()
        for n in (3, 4, 5):  # the step's record list is full before the loader starts
            float(step(jnp.ones((2, n)), jnp.ones((2, n))))
        rng = np.random.default_rng(3)
        data = [tokens(int(np.clip(rng.lognormal(3.0, 1.0), 6, 200)), 1000 * i) for i in range(600)]
        it = group_by_length(data, batch_size=8, compile_records=shapewatch.compile_records(step),
                             max_shapes=8)
        for b in it:
            float(step(b.data, b.mask))
        # seen: every compile measured as 0.0 s (the list stays at 2 records, so "new records"
        # are never found), and the planner buys buckets as if compiles were free
        compiles = it._online.costs.compiles
        assert compiles and min(compiles.values()) > 0, compiles
    finally:
        shapewatch.configure(max_records=1000)


def test_at_the_cap_a_longer_example_keeps_the_compiled_shapes_below_it():
    # shapes 24 and 512 compiled, max_shapes=3: a longer example's plan is [24, 512, top] (the
    # compiled shapes take nothing from the cap), not [top] alone, which padded every short
    # example to the top, one a batch (the cheapest 2- and 3-bucket plans need new shapes, so a
    # DP by number of buckets found none within the cap but one bucket)
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 25, 2000).tolist()
    lengths[:4] = [512, 300, 150, 90]
    lengths[1500], lengths[1800] = 2000, 5000
    for strategy in ("bucket", "auto"):
        clock = Clock(compile_s=1.0, per_token=1e-9, power=3)
        it = group_by_length([tokens(n) for n in lengths], token_budget=4096, buffer_size=256, max_shapes=3,
                             clock=clock, strategy=strategy)
        out, errors = run(it, clock)
        assert not errors
        assert sum(int(b.segment_ids.max(1).sum()) for b in out) == 2000  # examples (segments)
        top = [b for b in out if b.data.shape[-1] == 5000]
        assert len(top) == 2 and sorted(int(b.mask.sum()) for b in top) == [2000, 5000], strategy
        assert it.plan.boundaries[-1] == 5000 and len(it.plan.boundaries) == 3, strategy
        assert clock.t < 1000, (strategy, clock.t)  # 28,255 simulated s before


def test_a_compiled_top_that_is_none_of_the_lengths_is_priced_at_its_own_length():
    # a headroom top of 2200 compiled, then examples of 50 and 1100 only: the plan in use, [50, 2200],
    # was priced as if 2200 cost what 1100 does (the nearest length seen), so [50, 1100] seemed to
    # "save -2 s" and was never taken; priced at its own length it saves 6.25 s net of its compile
    from shapewatch.buckets import Buckets
    from shapewatch.buckets._online.auto_planner import rows_rule

    p = AutoPlanner(name="t", multiple_of=1, rows_for=rows_rule(8, None), max_shapes=16, horizon=None,
                    unit_size=256, clock=lambda: 0.0, records=None, prior=None)
    p.observer.update([50] * 3000 + [1100] * 3000)
    p._step_seconds = lambda lengths: 0.001 + 1e-5 * np.asarray(lengths, float)  # the step model, given
    p.costs.compile_seconds = lambda: 2.0
    p.compiled = {50, 2200}
    p._dirty = True
    plan = p.plan(Buckets((50, 2200), strategy="auto", multiple_of=1, overflow="extend"))
    assert plan is not None and plan.boundaries == (50, 1100)
    assert p.decisions[-1].action == "replan" and p.decisions[-1].saving_s == pytest.approx(6.25)


def test_the_dp_bound_stops_only_at_a_plan_within_the_cap():
    # the layer-4 best plan adds a shape over the cap (the caller skips it); the DP's bound must
    # not take it for the best found, or the layer-5 plan of compiled shapes (cheaper, within
    # the cap) is never computed and a worse plan is chosen
    p = AutoPlanner(name="t", multiple_of=1, rows_for=lambda b: 19, max_shapes=6, horizon=1000,
                    unit_size=64, clock=None, records=None, prior=None)
    values = np.array([10, 20, 30, 40, 50, 60])
    per_unit = np.array([0.16, 0.192, 0.272, 0.335, 0.421, 0.62])
    weights = np.array([1.376, 7.951, 7.795, 9.084, 7.563, 5.687])
    p.compiled = {10, 20, 30, 50, 60}
    bounds, total, new = p._best(values, weights, per_unit, 0.42, 5, 60)
    ref, _ = p._cost(np.array([10, 20, 30, 50, 60]), values, weights, per_unit, 0.42)
    assert total <= ref + 1e-9
    assert len(p.compiled | set(bounds.tolist())) <= 5


# -- a step measured at two lengths only (issue 36) -------------------------------------------

#: Milliseconds of a batch of 16 of bench_autobuckets' attention step on one CPU core, by length:
#: past ~350 its L x L scores outgrow a cache and it grows faster than L^2.
CACHE_STEP = ([32, 59, 96, 128, 192, 256, 320, 384, 411, 450, 512],
              [0.32, 0.63, 1.16, 1.99, 3.83, 7.76, 12.06, 33.49, 37.13, 45.30, 72.82])


class CacheClock(Clock):
    """A compile on each new shape, then the measured step above (``scale`` times it)."""

    def __init__(self, compile_s: float, scale: float = 1.0) -> None:
        super().__init__(compile_s=compile_s)
        self.scale = scale

    def consume(self, shape: tuple[int, ...]) -> None:
        self.t += self.compile_s if shape not in self.seen else 0.0
        self.t += 1e-3 * self.scale * float(np.interp(shape[-1], *CACHE_STEP))
        self.seen.add(shape)


def _bimodal(n: int = 1600) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    raw = np.where(rng.random(n) < 0.7, rng.normal(40, 8, n), rng.normal(380, 40, n))
    return [np.ones(int(v)) for v in np.clip(raw, 2, 512)]


def _explored(compile_s: float, scale: float) -> tuple[set, list[str]]:
    clock = CacheClock(compile_s, scale)
    it = group_by_length(_bimodal(), batch_size=16, seed=0, clock=clock)
    out, errors = run(it, clock)
    assert errors == []
    return {b.data.shape[1] for b in out}, [str(d) for d in it.decisions if "too few to tell" in d.reason]


def test_a_step_measured_at_two_lengths_only_measures_a_third_where_a_steeper_step_would_pay():
    # the first re-plan keeps two buckets (a short one and the top); fitted through those two
    # points, a step like L^2 says a boundary in the long mode saves less than its compile, but
    # the steps through them like L^3 say it saves more: the planner buys the third length
    shapes, explored = _explored(compile_s=1.26, scale=2.0)
    assert len(shapes) == 3 and explored, shapes
    assert "measures the step at more lengths" in explored[0]


def test_a_step_measured_at_two_lengths_keeps_its_plan_where_no_model_through_them_pays_a_compile():
    # the same step, a compile four times as long: no step model through the two points pays it
    shapes, explored = _explored(compile_s=5.0, scale=2.0)
    assert len(shapes) == 2 and explored == [], shapes


def test_in_step_across_processes_the_points_explored_are_process_0s():
    from shapewatch.buckets._distributed.lockstep import AgreedCosts

    planner = AutoPlanner(name="t", multiple_of=1, rows_for=lambda b: 16, max_shapes=16, horizon=100,
                          unit_size=100, clock=None, records=None, prior=None)
    planner.costs.first = {512: (512, 1.0)}
    planner.costs.steps = {512: [0.07]}
    planner.costs = AgreedCosts(planner.costs)  # process 0's, as the scheduler makes it
    lead = planner.shared()
    assert lead["costs"]["step_points"] == [[512.0], [0.07]]
    other = AutoPlanner(name="t", multiple_of=1, rows_for=lambda b: 16, max_shapes=16, horizon=100,
                        unit_size=100, clock=None, records=None, prior=None)
    other.costs = AgreedCosts(other.costs)  # as the scheduler makes it: its own points are none
    other.costs.first = {256: (256, 1.0)}
    other.costs.steps = {256: [0.01]}  # measured on this process: not what decisions read
    other.agree([512], lead, 100, 0)
    x, y = other.costs.step_points()  # what the planner's and strategy='auto''s decisions read
    assert x.tolist() == [512.0] and y.tolist() == [0.07]
    assert other.costs.measured()["step_points"] == [[256.0], [0.01]]  # what it would publish


# -- a job's steps: each bucket's are its fullest process's (issue 36) ---------------------------

def _job_planner(processes: int, compile_s: float) -> AutoPlanner:
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(4.5, 0.7, 6400).astype(int), 2, 512)
    planner = AutoPlanner(name="t", multiple_of=1, rows_for=lambda b: 16, max_shapes=16, horizon=1600,
                          unit_size=1600, clock=None, records=None, prior=None)
    planner.agree(lengths.tolist(), None, 1600, 0, processes=processes)  # as each round of a job sets them
    planner._step_seconds = lambda at: 0.002 + 0.06 * (np.asarray(at, float) / 512) ** 2  # the step model, given
    planner.costs.compile_seconds = lambda: compile_s
    return planner


def _best_of(planner: AutoPlanner, compile_s: float) -> tuple[list[int], float]:
    values, probs = planner._distribution()
    per_unit_of = lambda at: planner._step_seconds(at) / planner._rows_of(at)  # noqa: E731
    bounds, seconds, _ = planner._best(values, probs * planner.remaining(), per_unit_of(values), compile_s, 15,
                                       int(values[-1]), per_unit_of)
    return bounds.tolist(), seconds


def test_in_a_job_a_bucket_costs_the_steps_of_its_fullest_process():
    # every process steps together: a bucket takes as many steps as the process holding the most of
    # its examples needs (the others pad), about spread_of(P) standard deviations of a binomial count
    # above one process's. With those steps counted a job of 4 takes a bucket fewer than one
    # process would at the same costs, and each plan is the cheapest by its own count
    from shapewatch.buckets._online.auto_planner import spread_of

    assert spread_of(1) == 0.0 and spread_of(2) == pytest.approx(1 / np.sqrt(np.pi), abs=1e-6)
    assert spread_of(4) == pytest.approx(1.0294, abs=1e-4)
    one, job = _job_planner(1, 0.18), _job_planner(4, 0.18)
    assert job.processes == 4 and one.processes == 1
    alone, ours = _best_of(one, 0.18), _best_of(job, 0.18)
    assert alone[0] == [105, 191, 307, 512] and ours[0] == [133, 260, 512]
    values, probs = job._distribution()
    weights = probs * job.remaining()
    per_unit = job._step_seconds(values) / job._rows_of(values)

    def priced(planner: AutoPlanner, bounds: list[int]) -> float:
        return planner._cost(np.array(bounds), values, weights, per_unit, 0.18)[0]

    assert priced(job, ours[0]) == pytest.approx(ours[1]) and priced(one, alone[0]) == pytest.approx(alone[1])
    assert priced(job, ours[0]) < priced(job, alone[0]) and priced(one, alone[0]) < priced(one, ours[0])
    bounds = np.array(ours[0])  # the job's count over one process's: spread x a step per row x sd of the count
    held = np.bincount(np.searchsorted(bounds, values), weights=weights)
    per = job._step_seconds(bounds) / 16
    extra = spread_of(4) * np.sum(per * np.sqrt(held * (1 - held / weights.sum())))
    assert priced(job, ours[0]) - priced(one, ours[0]) == pytest.approx(extra)
    one.horizon = job.horizon = None  # no horizon (one process's stream; a job's rounds estimate one): no end to price
    assert priced(job, ours[0]) == priced(one, ours[0])


def test_in_a_job_packing_costs_the_batches_of_its_fullest_process_too():
    # strategy="auto" weighs packing against bucketing: packing's batches of a row length are, in a
    # job, its fullest process's too (each process's tokens of that row length vary over its examples)
    from shapewatch.buckets._online.auto_planner import Estimate, spread_of
    from shapewatch.buckets._online.choose import StrategyChooser

    def pack_seconds(processes: int) -> tuple[float, list]:
        planner = _job_planner(processes, 0.18)
        chooser = StrategyChooser(planner, lambda n, row: row if n <= row else 2 * row)
        estimate = Estimate((512,), 0.0, 0, 0.18, planner.remaining(), (0.002, 0.0, 0.06 / 512**2))
        return chooser._pack_seconds(512, estimate, None)[0], chooser._pools(512)

    alone, pools = pack_seconds(1)
    ours, _ = pack_seconds(4)
    ((row, share, mean, fill, square),) = pools  # one row length: every example fits 512
    assert share == 1.0 and square > mean**2
    batches = spread_of(4) * np.sqrt(1600 * (square - mean**2)) / (row * fill * 16)
    assert ours - alone == pytest.approx(batches * (0.002 + 0.06), rel=1e-9)


def _lockstep(processes: int, shares: list[float], old_of: list[int], new_of: list[int], at: float,
              n: int = 1600, rows: int = 16, buffer: int = 256, trials: int = 300) -> tuple[float, float]:
    """The lockstep's rule, simulated: each round every process reads ``buffer`` of its ``n``
    examples (length class ``k`` with chance ``shares[k]``) and queues them under the plan in use
    (``old_of``: class -> bucket; from ``at`` of the run ``new_of``, what every process holds
    re-bucketed), the job steps the full batches every process holds, and at the end each
    bucket's fullest process's. Returns the mean steps after the re-plan and the mean examples
    yielded per process before it."""
    from collections import deque

    rng = np.random.default_rng(0)
    after, used_at = [], []
    for _ in range(trials):
        labels = rng.choice(len(shares), size=(processes, n), p=shares)
        group, queues = list(old_of), [{} for _ in range(processes)]
        used = steps = read = 0
        mark = None
        while read < n:
            if mark is None and read >= at * n:
                group, mark = list(new_of), steps
                used_at.append(used)
                for p in range(processes):
                    items = [x for q in queues[p].values() for x in q]
                    queues[p] = {}
                    for x in items:
                        queues[p].setdefault(group[x], deque()).append(x)
            chunk = labels[:, read : read + buffer]
            read += chunk.shape[1]
            for p in range(processes):
                for x in chunk[p]:
                    queues[p].setdefault(group[x], deque()).append(x)
            if read < n:
                for g in set().union(*queues):
                    full = min(len(q.get(g, ())) for q in queues) // rows
                    steps, used = steps + full, used + full * rows
                    for q in queues:
                        for _ in range(full * rows):
                            q[g].popleft()
        steps += sum(max(-(-len(q.get(g, ())) // rows) for q in queues) for g in set().union(*queues))
        after.append(steps - mark)
    return float(np.mean(after)), float(np.mean(used_at))


@pytest.mark.parametrize("processes, shares, old, new", [
    (2, [0.3, 0.7], (10, 40), (10, 40)),  # the plan kept
    (4, [0.1, 0.2, 0.3, 0.4], (10, 20, 30, 40), (10, 20, 30, 40)),
    (2, [0.1, 0.2, 0.3, 0.4], (20, 40), (10, 20, 30, 40)),  # each bucket split late
    (4, [0.1, 0.2, 0.3, 0.4], (20, 40), (10, 20, 30, 40)),
    (2, [0.1, 0.2, 0.3, 0.4], (10, 20, 30, 40), (20, 40)),  # buckets merged late
    (4, [0.1, 0.2, 0.3, 0.4], (10, 20, 30, 40), (20, 40)),
])
@pytest.mark.parametrize("at", [0.5, 0.9])
def test_a_late_re_plan_in_a_job_counts_what_its_processes_read_beyond_the_others(processes, shares, old, new, at):
    # the lockstep takes only the full batches every process holds: what a process read beyond the
    # others stays held until the end, where the job takes each bucket's fullest process's steps.
    # Priced with it, a plan's steps to come are the job's (simulated) within a fifth of a step a
    # bucket, kept, split or merged; the examples to come alone count too few, the more the later
    values = np.array([10, 20, 30, 40]) if len(shares) == 4 else np.array([10, 40])
    job, used = _lockstep(processes, shares, np.searchsorted(old, values).tolist(),
                          np.searchsorted(new, values).tolist(), at)
    planner = AutoPlanner(name="t", multiple_of=1, rows_for=lambda b: 16, max_shapes=16, horizon=1600,
                          unit_size=1600, clock=None, records=None, prior=None)
    planner.agree(np.repeat(values, np.round(np.array(shares) * 1000).astype(int)).tolist(), None, 1600, used,
                  processes=processes)
    v, probs = planner._distribution()
    weights, per = probs * planner.remaining(), np.full(v.size, 1 / 16)  # a second a batch: seconds are steps
    current = Buckets(old, strategy="auto", multiple_of=1, overflow="extend")
    held = planner._held_under(current, v, probs)
    counted = planner._cost(np.array(new), v, weights, per, 0.0, held)[0]
    to_come = planner._cost(np.array(new), v, weights, per, 0.0)[0]
    assert abs(counted - job) <= 0.2 * len(new), (counted, job)
    if at == 0.9 and len(new) >= len(old):
        assert job - to_come > 0.5 and abs(counted - job) < job - to_come, (counted, to_come, job)
    # every bucket merged into one: each process holds all it read beyond the steps taken, which
    # is as many on every process (the counts of a multinomial's buckets sum to what was read)
    assert planner._cost(np.array([40]), v, weights, per, 0.0, held)[0] == pytest.approx(
        planner._cost(np.array([40]), v, weights, per, 0.0)[0])
    assert planner._held_under(None, v, probs) is None  # no plan in use: nothing held under one
    one = AutoPlanner(name="t", multiple_of=1, rows_for=lambda b: 16, max_shapes=16, horizon=1600,
                      unit_size=1600, clock=None, records=None, prior=None)
    one.agree([10, 40], None, 1600, used, processes=1)
    assert one._held_under(current, v, probs) is None  # one process: no lockstep
    planner.held_over = False  # bucketed's lockstep matches each round's batches whole
    assert planner._held_under(current, v, probs) is None


def _measured_at(planner: AutoPlanner, points: dict[int, float], compile_s: float) -> None:
    """The step measured at ``points`` (length -> seconds of a batch), each shape compiled."""
    planner.costs.first = {b: (b, compile_s + t) for b, t in points.items()}
    planner.costs.steps = {b: [t, t] for b, t in points.items()}
    planner.compiled = set(points)
    planner._dirty = True


def _measured_at_512(processes: int) -> AutoPlanner:
    """A job's planner (see ``_job_planner``) whose step is measured at 512 only (its costs the
    measured ones, not given), 512 compiled."""
    planner = _job_planner(processes, 0.3)
    del planner._step_seconds, planner.costs.compile_seconds
    _measured_at(planner, {512: 0.062}, 0.3)
    return planner


def _job_first_plan(processes: int) -> tuple[list[int], AutoPlanner]:
    planner = _measured_at_512(processes)
    plan = planner.plan(planner._buckets(np.array([512])))
    assert plan is not None
    return list(plan.boundaries), planner


def test_in_a_job_a_step_measured_at_one_length_adds_one_shape_until_a_second_length_is_measured():
    # from one length the step is taken proportional to it, which overstates what a split saves
    # where the step has a fixed part, as every step of a job has (the collective's wait): at the
    # same measured costs one process splits in three at once ([104, 223, 512]), a job adds one
    # shape ([165, 512]), which measures a second length
    alone, _ = _job_first_plan(1)
    ours, job = _job_first_plan(4)
    assert len(alone) >= 3 and len(ours) == 2 and ours[-1] == 512, (alone, ours)
    assert "until a second length is measured" in job.decisions[-1].reason
    # measured at the second length: a step with a fixed part (a + b*L through both points) prices
    # the rest, and the job may split on, by the fitted model's own count, without the cap
    fixed = 0.03  # of 0.062 s at 512: the step at ours[0] is 0.03 + 0.032 * ours[0] / 512
    _measured_at(job, {512: 0.062, ours[0]: fixed + 0.032 * ours[0] / 512}, 0.3)
    assert job._one_length_more(15) == (15, "")
    a, beta, gamma = job.costs.step_model()
    assert a == pytest.approx(fixed) and beta == pytest.approx(0.032 / 512) and gamma == 0
    assert _job_planner(1, 1.2)._one_length_more(15) == (15, "")  # one process: no cap


@pytest.mark.parametrize("processes", [1, 4])
def test_in_a_job_a_longer_example_measured_at_one_length_gets_its_new_top_and_no_split(processes):
    # a longer example forces a new plan: in a job still measured at one length that plan is the
    # new top alone (which measures a second length), not the top with a split priced as if the
    # step had no fixed part; one process splits as before ([104, 223, 512, 1024] here)
    planner = _measured_at_512(processes)
    planner.agree([900], None, 1600, 0, processes=processes)  # the round that reads it
    plan = planner.plan(planner._buckets(np.array([512])), force=True)
    assert plan is not None and plan.max_length >= 900
    new = set(plan.boundaries) - {512}
    assert (len(new) == 1) == (processes > 1), plan.boundaries
    said = planner.decisions[-1].reason
    assert ("until a second length is measured" in said) == (processes > 1), said
