"""The loaders in real jax.distributed jobs (gloo on the CPU): every process in step, nothing lost."""

import json
import os
import signal
import subprocess
import sys

import pytest

from tests._interrupt import share_of
from tests._jobs import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "_loader_worker.py")
#: the loader modules the interrupts below land in, by the end of their path (what the worker's hook matches)
AUTO_PLANNER = os.path.join("_online", "auto_planner.py")
GROUP_BY_LENGTH = os.path.join("_loaders", "group_by_length.py")
BUCKETED = os.path.join("_loaders", "bucketed.py")
SCHEDULERS = os.path.join("_distributed", "schedulers.py")
LOCKSTEP = os.path.join("_distributed", "lockstep.py")
GROUP_BY_LENGTH_LOCKSTEP = os.path.join("_distributed", "group_by_length_lockstep.py")
CHOOSE = os.path.join("_online", "choose.py")
STEP_METER = os.path.join("_online", "step_meter.py")
CHOOSE_BY_LENGTH = os.path.join("_loaders", "choose_by_length.py")
PACK = os.path.join("_loaders", "pack.py")


def run_job(tmp_path, count, timeout_s=None, limit_s=240, **opts):
    """Run one job; each process's result (its steps, example ids, compiles, error); a process still
    running after ``limit_s`` is killed (no result)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    if timeout_s is not None:
        env["SHAPEWATCH_LOADER_TIMEOUT"] = str(timeout_s)
    procs = [subprocess.Popen([sys.executable, WORKER, str(i), str(count), str(port), str(tmp_path),
                               json.dumps(opts)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for i in range(count)]
    try:
        errs = []
        for p in procs:
            try:
                errs.append(p.communicate(timeout=limit_s)[1])
            except subprocess.TimeoutExpired:  # processes that parted wait for each other: a hang
                p.kill()
                errs.append(p.communicate()[1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for i in range(count):
        path = tmp_path / f"result-{i}.json"
        results.append(json.loads(path.read_text()) if path.exists() else {})
        results[-1].update(rc=procs[i].returncode, stderr=errs[i][-3000:])
        if path.exists():
            path.unlink()
    return results


@pytest.mark.parametrize("loader, count, uneven", [
    ("group_by_length", 2, False), ("group_by_length", 3, True),
    ("bucketed", 2, True), ("bucketed", 3, False), ("grain", 2, True),
], ids=["group_by_length 2 even", "group_by_length 3 uneven", "bucketed 2 uneven", "bucketed 3 even",
        "grain GroupByLengthIterDataset 2 uneven"])
def test_data_parallel_training_keeps_every_process_in_step_and_every_example_once(tmp_path, loader, count, uneven):
    results = run_job(tmp_path, count, loader=loader, uneven=uneven)
    assert all("steps" in r for r in results), [r.get("stderr") for r in results]
    for r in results:
        assert r["error"] is None
        assert r["steps"] == results[0]["steps"]  # same shapes at every step, same step count
        assert sorted(r["ids"]) == sorted(r["shard"])  # each of its own examples exactly once
        assert r["bad"] == 0  # unaltered, padded with zeros
        assert r["compiles"] == results[0]["compiles"]
        assert r["agreed"] is True
    if uneven:  # the short shard yields batches of padding only rather than stopping
        assert len(results[-1]["ids"]) < len(results[0]["ids"])


def test_group_by_length_on_a_process_with_an_empty_shard_yields_padding_only_in_step(tmp_path):
    results = run_job(tmp_path, 2, loader="group_by_length", examples=200, empty=1)
    assert all("steps" in r for r in results), [r.get("stderr") for r in results]
    for r in results:
        assert r["error"] is None
        assert r["steps"] == results[0]["steps"]
        assert sorted(r["ids"]) == sorted(r["shard"])
        assert r["agreed"] is True
    assert results[1]["ids"] == [] and len(results[0]["ids"]) == 100


def test_bucketed_on_a_process_with_an_empty_shard_yields_padding_only_in_step(tmp_path):
    results = run_job(tmp_path, 2, loader="bucketed", examples=200, empty=1)
    assert all("steps" in r for r in results), [r.get("stderr") for r in results]
    for r in results:
        assert r["error"] is None
        assert r["steps"] == results[0]["steps"]
        assert sorted(r["ids"]) == sorted(r["shard"])
        assert r["agreed"] is True
    assert results[1]["ids"] == []


@pytest.mark.parametrize("loader", ["group_by_length", "bucketed"])
def test_an_example_above_the_last_shape_is_refused_once_on_every_process_and_the_job_goes_on(tmp_path, loader):
    # max_shapes=1 and one example of 1,500 on process 1, read in a later round: every process
    # raises once (the same plan everywhere), the loop goes on, nothing else is lost or doubled
    results = run_job(tmp_path, 2, loader=loader, max_shapes=1, long_at=1, go_on=True, buffer=64)
    assert all("steps" in r for r in results), [r.get("stderr") for r in results]
    long_id = results[1]["shard"][160]
    for r in results:
        assert r["error"] is None, r["error"]
        assert len(r["errors"]) == 1 and "max_shapes=1" in r["errors"][0], r["errors"]
        assert r["steps"] == results[0]["steps"] and len({tuple(s) for s in r["steps"]}) == 1
        assert r["bad"] == 0 and len(r["ids"]) == len(set(r["ids"]))
        assert r["agreed"] is True
    assert sorted(results[0]["ids"]) == sorted(results[0]["shard"])
    left = sorted(set(results[1]["shard"]) - set(results[1]["ids"]))
    if loader == "group_by_length":  # the example alone
        assert left == [long_id]
    else:  # its batch of 8, whole
        assert long_id in left and len(left) == 8


def test_a_source_that_raises_on_one_process_is_named_on_the_others(tmp_path):
    results = run_job(tmp_path, 3, fail_at=1, buffer=32)
    assert results[1]["error"] == "OSError: disk read failed on shard file 7"
    for i in (0, 2):
        assert results[i]["error"].startswith(
            "LoaderProcessError: [shapewatch] group_by_length: process 1 of 3 failed at step ")
        assert f"(seen from process {i}): OSError: disk read failed on shard file 7" in results[i]["error"]
        assert results[i]["steps"] == results[1]["steps"]


def test_a_process_that_dies_in_the_loader_is_named_within_the_timeout(tmp_path):
    results = run_job(tmp_path, 2, timeout_s=10, die_at=1, buffer=32)
    assert "steps" not in results[1]  # it exited
    assert results[0]["error"].startswith(
        "LoaderProcessError: [shapewatch] group_by_length: process 1 of 2 sent nothing within 10 s at step ")


JAX_ENDS_IT = "Terminating process because the JAX distributed service detected fatal errors"


@pytest.mark.parametrize("count", [2, 3])
def test_a_killed_coordinator_ends_every_other_process_by_jax_and_the_loader_never_lets_a_runtime_error_out(
        tmp_path, count):
    # Process 0 hosts JAX's coordination service. When it dies, JAX's own client in every other
    # process ends it (its error-polling RPC fails; the client's default missed-heartbeat callback
    # is LOG(QFATAL), SIGABRT), on every jax from 0.5.0 to 0.12, whatever jax_enable_recoverability
    # and the heartbeat timeout say: no process can go on. A process whose loader reaches the store
    # before that raises LoaderProcessError naming process 0 (its result is written then); none
    # raises JAX's raw runtime error from the loader. The worker waits after its error rather than
    # exit, so every survivor meets JAX's ending.
    results = run_job(tmp_path, count, timeout_s=60, kill_at=0, buffer=32)
    assert "steps" not in results[0] and results[0]["rc"] == -signal.SIGKILL
    for i in range(1, count):
        r = results[i]
        assert r["rc"] == -signal.SIGABRT and JAX_ENDS_IT in r["stderr"], (r["rc"], r["stderr"])
        assert "JaxRuntimeError" not in r["stderr"]
        if "steps" in r:  # its loader reached the store first
            assert r["error"].startswith(
                f"LoaderProcessError: [shapewatch] group_by_length: the job's key-value store (hosted by process 0 "
                f"of {count}, the coordinator) could not be reached to "), r["error"]
            assert f"(seen from process {i}): process 0 died or shut the job down (" in r["error"]


@pytest.mark.parametrize("count", [2, 3])
def test_a_source_that_raises_on_the_coordinator_is_its_own_error_there_and_named_on_the_others(
        tmp_path, count):
    results = run_job(tmp_path, count, fail_at=0, buffer=32)
    assert results[0]["error"] == "OSError: disk read failed on shard file 7"
    for i in range(1, count):
        assert results[i]["error"].startswith(
            f"LoaderProcessError: [shapewatch] group_by_length: process 0 of {count} failed at step ")
        assert f"(seen from process {i}): OSError: disk read failed on shard file 7" in results[i]["error"]


@pytest.mark.parametrize("value", ["abc", "", "inf", "nan", "-1", "0", "1e-7"])
def test_a_bad_loader_timeout_warns_and_the_job_runs_on_the_default(tmp_path, value):
    results = run_job(tmp_path, 2, timeout_s=value, examples=120, buffer=32)
    for r in results:
        assert "steps" in r, r.get("stderr")
        assert r["error"] is None and r["steps"] == results[0]["steps"]
        assert sorted(r["ids"]) == sorted(r["shard"])
        assert r["timeout_warnings"] == [
            f"[shapewatch] SHAPEWATCH_LOADER_TIMEOUT={value!r} is not valid: use a number of seconds from 0.001 "
            "to 2,147,484. Ignoring it (the loaders wait 300 s for the other processes)"]


def test_a_job_resumed_while_re_planning_online_yields_each_example_left_once(tmp_path):
    opts = {"uneven": True, "clock": True, "buffer": 48, "examples": 240}
    first = run_job(tmp_path, 2, stop=5, **opts)
    rest = run_job(tmp_path, 2, resume=str(tmp_path / "state-{process}.pkl"), **opts)
    for i in range(2):
        assert sorted(first[i]["ids"] + rest[i]["ids"]) == sorted(first[i]["shard"])
        assert rest[i]["steps"] == rest[0]["steps"] and rest[i]["agreed"] is True


def test_in_a_job_the_first_steps_measure_on_each_process_s_longest_examples(tmp_path):
    """As on one process: while the online planner has measured nothing, every process's first two
    steps (one bucket at the job's longest length: a compile, then a step measured) hold the longest
    examples of its first buffer, which the top bucket holds under any later plan."""
    for cap in (384, 100):  # 100: about 30 examples a process at it (truncated to a maximum)
        results = run_job(tmp_path, 2, clock=True, cap=cap)
        for r in results:
            assert r["error"] is None and r["steps"] == results[0]["steps"], r.get("stderr")
            assert r["decisions"][0].startswith("batch 0: start")
            lengths = {int(i): n for i, n in r["lengths"].items()}
            first = sorted(lengths[i] for i in r["ids"][:16])
            assert first == sorted(lengths.values())[-16:]
            assert cap == 384 or first == [cap] * 16


def test_a_job_resumed_within_its_first_steps_measures_and_re_plans_as_one_not_interrupted(tmp_path):
    # a state saved before the planner measured a step (its first two steps: a compile, a step) is
    # resumed in fresh processes, which measure anew: their rounds wait for a compile and a step
    # again and re-plan (they went on at the one bucket of the start, every step at the top)
    whole = run_job(tmp_path, 2, clock=True)
    assert any(" replan " in d for d in whole[0]["decisions"]), whole[0]["decisions"]
    for stop in (1, 2):
        first = run_job(tmp_path, 2, stop=stop, clock=True)
        rest = run_job(tmp_path, 2, resume=str(tmp_path / "state-{process}.pkl"), clock=True)
        for i in range(2):
            assert rest[i]["error"] is None and rest[i]["steps"] == rest[0]["steps"], rest[i].get("stderr")
            assert sorted(first[i]["ids"] + rest[i]["ids"]) == sorted(first[i]["shard"])
            assert any(" replan " in d for d in rest[i]["decisions"]), rest[i]["decisions"]
            assert len({tuple(s) for s in rest[i]["steps"]}) > 1


def test_check_hosts_agree_names_the_step_where_loaders_part(tmp_path):
    results = run_job(tmp_path, 2, uneven=True, local=True)
    # each on its own: its own shard only, no padding-only batches (the step counts follow each
    # process's own plan, from its own timings: which process takes more steps is not fixed)
    assert len(results[0]["shard"]) > len(results[1]["shard"])
    for r in results:
        assert sorted(r["ids"]) == sorted(r["shard"])
    a, b = results[0]["steps"], results[1]["steps"]
    part = next(k for k in range(len(a)) if k >= len(b) or a[k] != b[k])
    there = "nothing (it had stopped)" if part >= len(b) else f"rows {b[part][0]} x length {b[part][1]}"
    for i, r in enumerate(results):
        assert r["agreed"] is False
        assert r["told"][0] == (
            f"[shapewatch] processes took different batch shapes from their loaders (seen from process {i} of 2):\n"
            f"  loader group_by_length#0: processes part at step {part}: process 0: rows {a[part][0]} x length "
            f"{a[part][1]}; process 1: {there} (steps so far p0: {len(a)}, p1: {len(b)})\n"
            "  fix: make the loaders in the same order on every process, after jax.distributed.initialize(), "
            "without across_processes=False, so that they agree on every step's shapes.")


@pytest.mark.parametrize("loader", ["group_by_length", "bucketed"])
def test_examples_refused_at_the_cap_round_after_round_each_reach_every_planner_and_no_other_shape_comes(
        tmp_path, loader):
    # max_shapes=1 and every example of process 1 from its 150th on 1,500 long: the rounds after a
    # refusal read more of them, and each round's lengths must all reach every process's planner (a
    # length kept back would be queued under the plan, extended: one more shape, on no refusal)
    results = run_job(tmp_path, 2, loader=loader, max_shapes=1, long_at=1, long_from=150, go_on=True, buffer=64)
    assert all("steps" in r for r in results), [r.get("stderr") for r in results]
    for r in results:
        assert r["error"] is None, r["error"]
        assert r["errors"] and all("max_shapes=1" in e for e in r["errors"]), r["errors"]
        assert len(r["errors"]) == len(results[0]["errors"])
        assert r["steps"] == results[0]["steps"] and len({tuple(s) for s in r["steps"]}) == 1
        assert r["bad"] == 0 and len(r["ids"]) == len(set(r["ids"]))
        assert r["agreed"] is True
    assert sorted(results[0]["ids"]) == sorted(results[0]["shard"])
    kept = 150 if loader == "group_by_length" else 150 // 8 * 8  # bucketed refuses the batch of 8 whole
    assert sorted(results[1]["ids"]) == sorted(results[1]["shard"][:kept])


def _check_one_interrupt_lost_nothing(results, interrupts=1):
    """Process 1 was interrupted once (or ``interrupts`` times) and went on: every process yielded
    the same steps, each of its own examples exactly once, and the processes agreed."""
    assert all("steps" in r for r in results), [r.get("stderr") for r in results]
    assert [r["interrupts"] for r in results] == [0, interrupts]
    for r in results:
        assert r["error"] is None, r["error"]
        assert r["steps"] == results[0]["steps"]
        assert sorted(r["ids"]) == sorted(r["shard"]) and r["bad"] == 0
        assert r["agreed"] is True


@pytest.mark.parametrize("loader", ["group_by_length", "bucketed"])
def test_an_interrupt_while_a_step_waits_for_the_device_loses_no_step_on_any_process(tmp_path, loader):
    # a KeyboardInterrupt in the online planner's wait for the device around a step (process 1,
    # once): the loop goes on, and the step is yielded then, on every process alike, and every
    # process records the same decisions, word for word (what measured the costs: process 0's
    # words; before, each process's own count of waits, which the interrupt changed on process 1)
    results = run_job(tmp_path, 2, loader=loader, interrupt_wait=1)
    _check_one_interrupt_lost_nothing(results)
    assert results[1]["decisions"] == results[0]["decisions"], (results[0]["decisions"], results[1]["decisions"])


def test_interrupts_through_every_line_of_a_wait_for_the_device_leave_the_decisions_the_same_on_every_process(tmp_path):
    # a KeyboardInterrupt at each line of the step meter's wait for the device in turn (process 1,
    # one call after another, from its 2nd step): some land after the wait was counted, so process
    # 1's count of waits runs ahead of process 0's; every decision quotes process 0's words, the
    # same on both. Before, each quoted its own count ("at 4 point(s)" against "at 7 point(s)")
    results = run_job(tmp_path, 2, timeout_s=15, limit_s=90, loader="bucketed", examples=1600,
                      interrupt_in=[1, "sync", STEP_METER], sweep=True, after=1)
    assert results[1]["interrupts"] > 1, results[1].get("stderr")
    _check_one_interrupt_lost_nothing(results, interrupts=results[1]["interrupts"])
    assert results[1]["decisions"] == results[0]["decisions"], (results[0]["decisions"], results[1]["decisions"])


@pytest.mark.parametrize("loader, function, file", share_of([
    pytest.param("group_by_length", "yielded", AUTO_PLANNER, id="group_by_length AutoPlanner.yielded"),
    pytest.param("group_by_length", "took", GROUP_BY_LENGTH_LOCKSTEP, id="group_by_length took"),
    pytest.param("group_by_length", "_commit", GROUP_BY_LENGTH, id="group_by_length _commit"),
    pytest.param("bucketed", "yielded", AUTO_PLANNER, id="bucketed AutoPlanner.yielded"),
    pytest.param("bucketed", "took", SCHEDULERS, id="bucketed Lockstep.took"),
    pytest.param("bucketed", "_commit", BUCKETED, id="bucketed _commit"),
    pytest.param("group_by_length", "_count", GROUP_BY_LENGTH, id="group_by_length _count"),
    pytest.param("bucketed", "_count", BUCKETED, id="bucketed _count"),
]))
def test_an_interrupt_while_a_step_is_taken_loses_and_repeats_no_step_on_any_process(tmp_path, loader, function, file):
    # a KeyboardInterrupt (a Ctrl-C) on process 1 at the first line of a call that takes the step
    # agreed (its batch built, the wait for the device over): the loop goes on, and every process
    # yields the same steps, each of its own examples exactly once
    results = run_job(tmp_path, 2, timeout_s=15, limit_s=60, loader=loader, interrupt_in=[1, function, file])
    _check_one_interrupt_lost_nothing(results)


@pytest.mark.parametrize("loader, function, file, lines", share_of([
    ("group_by_length", "__next__", SCHEDULERS, 5),
    ("group_by_length", "_commit", GROUP_BY_LENGTH, 5),
    ("group_by_length", "took", GROUP_BY_LENGTH_LOCKSTEP, 6),
    ("group_by_length", "yielded", AUTO_PLANNER, 14),
    ("group_by_length", "_count", GROUP_BY_LENGTH, 9),
    ("bucketed", "__next__", SCHEDULERS, 5),
    ("bucketed", "_commit", BUCKETED, 5),
    ("bucketed", "took", SCHEDULERS, 4),
    ("group_by_length", "_round_in_step", GROUP_BY_LENGTH, 14),
    ("group_by_length", "_read_and_publish", GROUP_BY_LENGTH, 6),
    ("group_by_length", "exchange", LOCKSTEP, 10),
    ("group_by_length", "publish", SCHEDULERS, 5),
    ("group_by_length", "agree_steps", GROUP_BY_LENGTH_LOCKSTEP, 6),
    ("bucketed", "_round_in_step", BUCKETED, 19),
    ("bucketed", "exchange", LOCKSTEP, 10),
    ("bucketed", "share", SCHEDULERS, 3),
]))
def test_interrupts_at_every_line_of_taking_a_step_lose_and_repeat_no_step_on_any_process(
        tmp_path, loader, function, file, lines):
    # process 1 is interrupted at the first line of one call of the function, its second line in a
    # later call, and so on through its last (``lines``: the line events of the path that commits): each time the loop goes on, and every process yields
    # the same steps, each of its own examples exactly once (a step half taken is finished by the
    # next next(), once)
    results = run_job(tmp_path, 2, timeout_s=15, limit_s=90, loader=loader, interrupt_in=[1, function, file],
                      sweep=True)
    assert results[1].get("interrupts", 0) >= lines, results[1].get("interrupts")
    _check_one_interrupt_lost_nothing(results, interrupts=results[1]["interrupts"])


def test_interrupts_at_every_line_of_ordering_a_round_s_examples_lose_and_repeat_no_step_on_any_process(tmp_path):
    # as above, in the shuffle of what a round read (``_shuffled``); a small buffer, so that later
    # rounds read examples and run its every line
    results = run_job(tmp_path, 2, timeout_s=15, limit_s=90, interrupt_in=[1, "_shuffled", GROUP_BY_LENGTH],
                      sweep=True, buffer=48)
    assert results[1].get("interrupts", 0) >= 4, results[1].get("interrupts")
    _check_one_interrupt_lost_nothing(results, interrupts=results[1]["interrupts"])


@pytest.mark.parametrize("processes, uneven, prior", [(2, False, None), (3, True, None), (2, True, "steep")])
def test_strategy_auto_in_a_job_chooses_alike_on_every_process_and_yields_each_example_once(
        tmp_path, processes, uneven, prior):
    # strategy="auto" in step: the choice between packing and bucketing (and bucketing's plan) is
    # made at each round from every process's lengths and process 0's measured costs, so every
    # process takes the same decisions and yields the same shapes, each of its examples once
    # ("steep": a saved report whose step grows like L^2 starts it bucketing)
    extra = {"prior_step": [0.001, 0.0, 1e-6]} if prior else {}
    results = run_job(tmp_path, processes, strategy="auto", uneven=uneven, buffer=48, examples=320, **extra)
    for r in results:
        assert r["error"] is None, r["error"]
        assert r["steps"] == results[0]["steps"] and r["decisions"] == results[0]["decisions"]
        assert sorted(r["ids"]) == sorted(r["shard"]) and r["bad"] == 0
        assert r["agreed"] is True
        assert r["planner_processes"] == processes  # its buckets priced as the job steps (spread_of)
    decisions = results[0]["decisions"]
    assert decisions[0].startswith("batch 0: start"), decisions
    if prior:  # bucketing from the start on the report's plan, as on one process: no packing start
        assert "from measured costs" in decisions[0] and not any("start pack" in d for d in decisions), decisions
        assert len({tuple(s) for s in results[0]["steps"]}) > 1, results[0]["steps"]
    else:
        assert any(": choose " in d or ": switch " in d or ": wait " in d for d in decisions), decisions


def test_strategy_auto_from_a_saved_report_with_max_shapes_1_in_a_job_yields_every_example_in_step(tmp_path):
    # with one shape allowed the planner kept one back for a longer example and planned nothing:
    # every process raised an AssertionError at its first batch; now it starts on one bucket, and
    # auto packs (a longer example of 1,500 on process 1 in a later round: rows doubled)
    results = run_job(tmp_path, 2, strategy="auto", prior_step=[0.001, 0.0, 1e-6], max_shapes=1, long_at=1,
                      buffer=64)
    assert all("steps" in r for r in results), [r.get("stderr") for r in results]
    for r in results:
        assert r["error"] is None, r["error"]
        assert r["steps"] == results[0]["steps"] and r["decisions"] == results[0]["decisions"]
        assert sorted(r["ids"]) == sorted(r["shard"]) and r["bad"] == 0
        assert r["agreed"] is True
    assert "from measured costs" in results[0]["decisions"][0], results[0]["decisions"]


_FIXED = [16, 32, 64, 128, 384]


@pytest.mark.parametrize("opts, stop", [
    ({"loader": "group_by_length", "uneven": True, "buffer": 48, "examples": 240, "buckets": _FIXED}, 7),
    ({"loader": "bucketed", "uneven": True, "buffer": 48, "examples": 240, "buckets": _FIXED}, 7),
    ({"loader": "group_by_length", "uneven": True, "buffer": 48, "examples": 240, "max_buckets": 3}, 9),
    ({"loader": "bucketed", "uneven": True, "buffer": 48, "examples": 240, "max_buckets": 3}, 9),
    ({"strategy": "auto", "uneven": True, "buffer": 96, "examples": 1600, "clock": True}, 9),
    ({"strategy": "auto", "uneven": True, "buffer": 96, "examples": 1600, "clock": True}, 15),
    ({"strategy": "auto", "buffer": 96, "examples": 1600, "clock": True}, 20),
    ({"examples": 4800, "clock": True}, 150),
], ids=["group_by_length fixed", "bucketed fixed", "group_by_length learned", "bucketed learned", "strategy auto",
        "strategy auto, later", "strategy auto, a bucket's step not measured yet", "group_by_length auto, a settled plan"])
def test_a_job_resumed_half_way_yields_exactly_the_batches_that_were_left(tmp_path, opts, stop):
    # a fixed or learned plan, or strategy="auto" in step (its decisions from the state's
    # measurements and a clock that ticks once per read: the same on both runs); a resumed job's
    # rounds end where the saved run's would have (its count of each measured bucket's batches
    # kept), else its rounds read and pack different buffers (auto packing into rows of 242 and
    # 484: other rows from step 19 on, and one step more)
    whole = run_job(tmp_path, 2, **opts)
    first = run_job(tmp_path, 2, stop=stop, **opts)
    rest = run_job(tmp_path, 2, resume=str(tmp_path / "state-{process}.pkl"), **opts)
    for i in range(2):
        assert len(first[i]["steps"]) == stop
        assert first[i]["steps"] + rest[i]["steps"] == whole[i]["steps"]
        assert first[i]["ids"] + rest[i]["ids"] == whole[i]["ids"]
        assert rest[i]["bad"] == 0 and rest[i]["agreed"] is True


def _gaps(rounds_at):
    return [b - a for a, b in zip(rounds_at, rounds_at[1:])]


def test_a_settled_plan_is_re_planned_less_often_in_a_job(tmp_path):
    # each round waits for the slowest process: once the plan is settled, each periodic re-plan that
    # keeps it doubles the steps to the next (32, 64, 128: 8 rounds after the first buffer's,
    # where every 32 steps held 15); a bucket's first two batches (a compile, a step) share a round
    whole = run_job(tmp_path, 2, examples=4800, clock=True)
    for r in whole:
        assert r["error"] is None and r["bad"] == 0 and sorted(r["ids"]) == sorted(r["shard"]), r.get("stderr")
        assert r["steps"] == whole[0]["steps"] and r["rounds_at"] == whole[0]["rounds_at"]
    rounds_at = whole[0]["rounds_at"]
    assert _gaps(rounds_at)[-3:] == [32, 64, 128], rounds_at
    assert whole[0]["period"] == 256 and len(whole[0]["steps"]) == 300
    last_change = max(int(d.split(":")[0].split()[1]) for d in whole[0]["decisions"])
    assert all(gap >= 32 for gap in _gaps([k for k in rounds_at if k >= last_change])), rounds_at


def test_strategy_auto_packing_in_a_job_holds_a_round_at_the_chooser_s_weighing_not_at_every_step(tmp_path):
    # packing does not re-plan: the rounds come where the chooser weighs the costs again (32 steps
    # after the last), not at every step once the planner's re-plan would be due (21 rounds in 48
    # steps, one a step from step 32 on)
    results = run_job(tmp_path, 2, examples=4800, clock=True, strategy="auto")
    for r in results:
        assert r["error"] is None and r["bad"] == 0 and sorted(r["ids"]) == sorted(r["shard"]), r.get("stderr")
        assert r["rounds_at"] == results[0]["rounds_at"] and r["decisions"] == results[0]["decisions"]
    assert any(" choose pack " in d for d in results[0]["decisions"]), results[0]["decisions"]
    assert results[0]["rounds_at"] == [0, 2, 3, 5, 6, 38] and len(results[0]["steps"]) == 49, results[0]["rounds_at"]


def test_interrupts_at_every_line_of_the_planner_s_plan_record_each_decision_once_on_every_process(tmp_path):
    # process 1 interrupted at each line of AutoPlanner.plan in turn (its computation of a round's
    # plan): the round, called again, plans again from where the planner was when it began, so
    # every process records the same decisions, once, takes the same rounds and steps, and yields
    # each of its examples once
    results = run_job(tmp_path, 2, timeout_s=15, limit_s=120, examples=4800, clock=True,
                      interrupt_in=[1, "plan", AUTO_PLANNER], sweep=True)
    assert results[1].get("interrupts", 0) >= 30, results[1].get("interrupts")  # its longest path: 35 line events
    _check_one_interrupt_lost_nothing(results, interrupts=results[1]["interrupts"])
    assert results[1]["decisions"] == results[0]["decisions"], (results[0]["decisions"], results[1]["decisions"])
    assert results[1]["rounds_at"] == results[0]["rounds_at"]


_SWITCHING = {"examples": 4800, "clock": True}  # packs blind, waits on bucketing [144, 384] at batch 3, packs at 6
_FROM_REPORT = {"uneven": True, "buffer": 48, "examples": 320, "prior_step": [0.001, 0.0, 1e-6]}  # buckets, then packs


@pytest.mark.parametrize("function, file, opts, lines, after", share_of([
    ("decide", CHOOSE, _SWITCHING, 7, 0),  # the round at step 2: put off for the row's second step
    ("decide", CHOOSE, _SWITCHING, 15, 3),
    ("_wait", CHOOSE, _SWITCHING, 32, 0),  # 39 line events before Python 3.13
    ("_record", CHOOSE, _SWITCHING, 9, 0),
    ("start", CHOOSE, _SWITCHING, 8, 0),
    ("adopt", AUTO_PLANNER, _SWITCHING, 4, 0),
    ("_choose", CHOOSE_BY_LENGTH, _SWITCHING, 16, 3),
    ("_round_in_step", CHOOSE_BY_LENGTH, _SWITCHING, 17, 0),
    ("decide", CHOOSE, _FROM_REPORT, 27, 3),
    ("_round_in_step", CHOOSE_BY_LENGTH, _FROM_REPORT, 16, 0),
]))
def test_interrupts_at_every_line_of_the_strategy_chooser_s_weighing_choose_alike_on_every_process(
        tmp_path, function, file, opts, lines, after):
    # strategy="auto" in step, process 1 interrupted at each line of the chooser's weighing in turn
    # (from the round at step ``after`` on: a weighing put off for a length's second step, a wait on
    # bucketing, a switch each way, a choice from a saved report's costs): the round, called again,
    # weighs again from where the chooser was when it began (or takes the answer made, a switch half
    # made finished), so every process records the same choices, once, and takes the same rounds and
    # steps; before, process 1 went on with its strategy (the weighing was no longer due) and
    # recorded no choice, or one twice
    results = run_job(tmp_path, 2, timeout_s=15, limit_s=120, strategy="auto", interrupt_in=[1, function, file],
                      sweep=True, after=after, **opts)
    assert results[1].get("interrupts", 0) >= lines, results[1].get("interrupts")
    _check_one_interrupt_lost_nothing(results, interrupts=results[1]["interrupts"])
    assert results[1]["decisions"] == results[0]["decisions"], (results[0]["decisions"], results[1]["decisions"])
    assert results[1]["rounds_at"] == results[0]["rounds_at"]


def _without_meter_counts(decisions):
    """Decisions without their "(steps: measured ... at N point(s))" ending: a resumed loader's step
    meter counts its waits afresh (the choices and plans are the same)."""
    return [d.split(" (steps: ")[0] for d in decisions]


@pytest.mark.parametrize("opts, cases", [
    ({"strategy": "auto", **_SWITCHING, "prior_step": [0.001, 0.0, 1e-6]},
     [("decide", CHOOSE, 8, 26), ("decide", CHOOSE, 8, [4, 5])]),
    ({"strategy": "auto", **_SWITCHING}, [("start", CHOOSE, 0, 7), ("_choose", CHOOSE_BY_LENGTH, 0, 15)]),
    (_SWITCHING, [("plan", AUTO_PLANNER, 9, 30)]),
    # a buffer that each round fills again: the rounds after step 9 read, shuffle and pack
    ({**_SWITCHING, "buffer": 256}, [("_enqueue", GROUP_BY_LENGTH, 9, 0)]),
    ({"strategy": "auto", **_SWITCHING, "buffer": 256}, [("packed", PACK, 9, 3)]),
], ids=["the chooser's weighing", "the first round's start, a switch half made", "the planner's plan",
        "bucketing's draws", "packing's draws"])
def test_a_state_saved_after_an_interrupt_inside_a_round_s_decision_resumes_as_the_run_not_interrupted(
        tmp_path, opts, cases):
    # every process interrupted at a line of a round's decision (after ``after`` steps, at its line
    # event ``at``; [4, 5]: process 0 a line before the weighing notes its costs, process 1 a line
    # after), where a Ctrl-C handler saves state_dict() and stops: the job resumed from those states
    # makes the decision again and goes on exactly as the run not interrupted: its steps, which
    # examples they hold, its decisions. Before, the state held the decision half made: the
    # weighing no longer due (the switch to packing at batch 41 for 9, 82 steps for 54), the
    # periodic re-plan not due, the first plan recorded twice (the first round's start cut short),
    # or (a switch to bucketing cut short after its shuffle; a round's reads shuffled, or packed,
    # and not yet moved) the generator drawn from already: the same steps holding other examples
    whole = run_job(tmp_path, 2, **opts)
    for function, file, after, at in cases:
        first = run_job(tmp_path, 2, timeout_s=15, limit_s=60, interrupt_in=[[0, 1], function, file], after=after,
                        at=at, save_on_interrupt=True, **opts)
        assert [r.get("interrupts") for r in first] == [1, 1], (function, at, [r.get("stderr") for r in first])
        rest = run_job(tmp_path, 2, timeout_s=15, limit_s=60, resume=str(tmp_path / "state-{process}.pkl"), **opts)
        for i in range(2):
            assert rest[i]["error"] is None and rest[i]["bad"] == 0 and rest[i]["agreed"] is True, (function, at)
            assert first[i]["steps"] + rest[i]["steps"] == whole[i]["steps"], (function, at)
            assert first[i]["ids"] + rest[i]["ids"] == whole[i]["ids"], (function, at)
            assert (_without_meter_counts(rest[i]["decisions"])
                    == _without_meter_counts(whole[i]["decisions"])), (function, at)
            # a decision made before the resumed job measured a step names the run it resumed
            # from, not "no JAX arrays in the process" (the words of a loop without JAX)
            assert not any("no JAX arrays" in d for d in rest[i]["decisions"]), rest[i]["decisions"]
        assert rest[1]["decisions"] == rest[0]["decisions"], (function, at)


def test_a_job_resumed_with_another_period_goes_on_with_it(tmp_path):
    # saved at step 150 with 79 steps agreed (to the round at step 229) and a period of 128: the
    # steps agreed go first, then the period loaded decides: a state without "period" (saved by an
    # earlier release) re-plans 32 steps after the last, as that release did (due at once: kept, so
    # the next round is 64 steps on); 256 holds no round more (the run's 300 steps end first)
    first = run_job(tmp_path, 2, examples=4800, clock=True, stop=150)
    for edit, rounds_at in (({"period": None}, [79, 143]), ({"period": 32}, [79, 143]), ({"period": 256}, [79])):
        rest = run_job(tmp_path, 2, examples=4800, clock=True, resume=str(tmp_path / "state-{process}.pkl"),
                       lockstep_edit=edit)
        for i in range(2):
            assert rest[i]["error"] is None and rest[i]["bad"] == 0, (edit, rest[i].get("stderr"))
            assert sorted(first[i]["ids"] + rest[i]["ids"]) == sorted(first[i]["shard"]), edit
            assert rest[i]["rounds_at"] == rounds_at and rest[i]["agreed"] is True, (edit, rest[i]["rounds_at"])
            assert rest[i]["period"] == (256 if edit["period"] == 256 else 128), edit


_PERIOD = "an int from 32 to 256 (the steps between periodic re-plans)"
_LAST = "None or the bucket of the last step (an int >= 1)"


def test_a_state_with_a_bad_period_or_last_step_is_refused_by_name(tmp_path):
    # each process loads every edited state in turn, in one job (a state refused leaves the loader as it was)
    run_job(tmp_path, 2, examples=480, clock=True, stop=20)
    cases = (("period", 7, _PERIOD), ("period", 512, _PERIOD), ("period", "64", _PERIOD),
             ("period", 64.0, _PERIOD), ("last", 0, _LAST), ("last", "384", _LAST))
    rest = run_job(tmp_path, 2, examples=480, clock=True, resume=str(tmp_path / "state-{process}.pkl"),
                   lockstep_edits=[{field: value} for field, value, _ in cases])
    for r in rest:
        assert r["rc"] == 0 and len(r.get("refusals", [])) == len(cases), r.get("stderr")
        for (field, value, expected), refusal in zip(cases, r["refusals"], strict=True):
            assert refusal is not None and (
                f"load_state_dict: state['lockstep'][{field!r}] is {type(value).__name__} {value!r}, expected "
                f"{expected}") in refusal, (field, value, refusal)


def test_a_bucketed_job_resumed_while_re_planning_online_yields_each_batch_left_once(tmp_path):
    opts = {"loader": "bucketed", "uneven": True, "clock": True, "examples": 320}
    first = run_job(tmp_path, 2, stop=6, **opts)
    rest = run_job(tmp_path, 2, resume=str(tmp_path / "state-{process}.pkl"), **opts)
    for i in range(2):
        assert len(first[i]["steps"]) == 6
        assert sorted(first[i]["ids"] + rest[i]["ids"]) == sorted(first[i]["shard"])
        assert rest[i]["steps"] == rest[0]["steps"] and rest[i]["agreed"] is True and rest[i]["bad"] == 0


@pytest.mark.parametrize("loader", ["group_by_length", "bucketed"])
def test_a_state_saved_by_a_job_of_two_processes_is_refused_by_every_process_of_a_job_of_three(tmp_path, loader):
    opts = {"loader": loader, "examples": 240, "buffer": 48, "buckets": [16, 32, 64, 128, 384]}
    run_job(tmp_path, 2, stop=5, **opts)
    (tmp_path / "state-2.pkl").write_bytes((tmp_path / "state-1.pkl").read_bytes())
    results = run_job(tmp_path, 3, limit_s=120, resume=str(tmp_path / "state-{process}.pkl"), **opts)
    for i, r in enumerate(results):
        assert "steps" not in r and r["rc"] != 0
        assert "load_state_dict: the state was saved by process [" in r["stderr"], r["stderr"]
        assert f"is loaded into [{i}, 3]: a loader resumes only in a job of as many processes" in r["stderr"]


@pytest.mark.parametrize("loader", ["group_by_length", "bucketed"])
def test_states_swapped_between_the_processes_of_a_job_are_refused_by_each(tmp_path, loader):
    # each process's state holds its own shard's position: process 0 resuming from process 1's
    # state would skip process 1's count of its own examples (and hold process 1's examples)
    opts = {"loader": loader, "examples": 240, "buffer": 48, "buckets": [16, 32, 64, 128, 384]}
    run_job(tmp_path, 2, stop=5, **opts)
    zero, one = (tmp_path / "state-0.pkl").read_bytes(), (tmp_path / "state-1.pkl").read_bytes()
    (tmp_path / "state-0.pkl").write_bytes(one)
    (tmp_path / "state-1.pkl").write_bytes(zero)
    results = run_job(tmp_path, 2, limit_s=120, resume=str(tmp_path / "state-{process}.pkl"), **opts)
    for i, r in enumerate(results):
        assert "steps" not in r and r["rc"] != 0
        assert f"the state was saved by process [{1 - i}, 2] (index, count) and is loaded into [{i}, 2]" in r["stderr"]


def test_bucketed_batches_above_a_plan_with_overflow_error_are_refused_once_on_every_process_and_the_job_goes_on(
        tmp_path):
    # a fixed plan with overflow="error" and batches longer than 128 on both processes: each round
    # that holds one raises the same ValueError on every process, the batches above the plan are
    # left out where they are held, and next() goes on in step (it raised again and again, the
    # batches kept, so that a loop that skips a refused batch never ended)
    results = run_job(tmp_path, 2, timeout_s=30, limit_s=60, loader="bucketed", buckets=[16, 32, 64, 128],
                      overflow="error", go_on=True, examples=200)
    assert all("steps" in r for r in results), [r.get("stderr") for r in results]
    for r in results:
        assert r["error"] is None, r["error"]
        assert r["errors"] and all("above the largest boundary 128 (overflow='error'" in e for e in r["errors"])
        assert r["errors"] == results[0]["errors"] and r["steps"] == results[0]["steps"]
        assert r["bad"] == 0 and r["agreed"] is True
        lengths = {i: n for i, n in r["lengths"].items()}
        batches = [r["shard"][k:k + 8] for k in range(0, len(r["shard"]), 8)]
        kept = [i for b in batches if max(lengths[str(i)] for i in b) <= 128 for i in b]
        assert sorted(r["ids"]) == sorted(kept) and len(kept) < len(r["shard"])
