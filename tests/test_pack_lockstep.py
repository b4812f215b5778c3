"""``group_by_length(..., strategy="pack")`` in step across the processes of real jax.distributed
jobs (gloo on the CPU; tests/_pack_worker.py is one process): the same row length, batch shape
and number of steps on every process, each process's examples once and whole, padding-only rows
where a shard ran out, resumable, and a failure on one process named on the others.

Each job runs several scenarios, one after the other (each with its own loaders); the tests
read what each process saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests._interrupt import sweep
from tests._jobs import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "_pack_worker.py")

RESUMED = {"n": 200, "uneven": 0.7, "loader": {"buffer_size": 48, "row_length": 32, "batch_size": 2}}
SCENARIOS = {
    # the row length chosen: the last process's first example is the longest of any first buffer
    "chosen": {"n": 300, "top": 30, "uneven": 0.6, "long_first": 45, "train": True,
               "loader": {"buffer_size": 64, "multiple_of": 8}},
    # a row length given (longer examples get rows of their own length), in order, drop
    "given": {"n": 200, "top": 40, "uneven": 0.8,
              "loader": {"row_length": 24, "multiple_of": 8, "shuffle": False, "remainder": "drop",
                         "buffer_size": 40, "batch_size": 3}},
    "empty": {"n": 120, "empty": 1, "loader": {"remainder": "keep", "buffer_size": 32}},
    # sorted by length: the row chosen from the shortest, longer examples in rows of it doubled
    "sorted": {"n": 300, "top": 60, "sorted": True, "loader": {"buffer_size": 32}},
    "small_buffer": {"n": 120, "uneven": 0.5, "loader": {"buffer_size": 5, "row_length": 32}},
    "whole": RESUMED,
    "resumed": {**RESUMED, "stop": 5},
    "alone": {"n": 200, "uneven": 0.5, "loader": {"across_processes": False, "row_length": 32}},
    "fails": {"n": 300, "fail_at": "last", "loader": {"buffer_size": 32}},
    "fails_on_0": {"n": 300, "fail_at": 0, "loader": {"buffer_size": 32}},
    "bad": {"n": 160, "bad_at": 0, "go_on": True, "loader": {"buffer_size": 32}},
}


def run_job(tmp_path, count, plan, timeout_s=60):
    """Run one job of ``count`` processes; each process's results, per scenario."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", "SHAPEWATCH_LOADER_TIMEOUT": str(timeout_s)}
    procs = [subprocess.Popen([sys.executable, WORKER, str(i), str(count), str(port), str(tmp_path), json.dumps(plan)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(count)]
    try:
        errs = [p.communicate(timeout=300)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for i, p in enumerate(procs):
        path = tmp_path / f"result-{i}.json"
        assert p.returncode == 0 and path.exists(), f"process {i}: rc {p.returncode}\n{errs[i][-3000:]}"
        results.append(json.loads(path.read_text()))
    return results


@pytest.fixture(scope="module", params=[2, 3], ids=["2 processes", "3 processes"])
def job(request, tmp_path_factory):
    count = request.param
    plan = {name: {**opts, "fail_at": count - 1} if opts.get("fail_at") == "last" else opts
            for name, opts in SCENARIOS.items()}
    return count, run_job(tmp_path_factory.mktemp(f"pack{count}"), count, plan)


def scenario(job, name):
    count, results = job
    return count, [r[name] for r in results]


def in_step(runs):
    """The same batch shape at every step and the same number of steps on every process."""
    for r in runs:
        assert r["steps"] == runs[0]["steps"]
    assert runs[0]["steps"]


@pytest.mark.parametrize("name", ["chosen", "given", "empty", "small_buffer", "whole", "sorted"])
def test_every_process_yields_the_same_shapes_for_as_many_steps(job, name):
    _, runs = scenario(job, name)
    in_step(runs)
    for r in runs:
        assert r["errors"] == []
        assert r["row_length"] == runs[0]["row_length"]


@pytest.mark.parametrize("name", ["chosen", "empty", "small_buffer", "whole", "sorted"])
def test_each_process_yields_each_of_its_examples_once_and_whole_with_positions_right(job, name):
    _, runs = scenario(job, name)
    for r in runs:
        assert sorted(r["ids"]) == sorted(r["shard"])
        assert r["bad"] == 0
    everyone = [i for r in runs for i in r["ids"]]
    assert sorted(everyone) == sorted(i for r in runs for i in r["shard"]) and len(set(everyone)) == len(everyone)


def test_a_sorted_source_packs_longer_examples_into_rows_of_the_row_length_doubled(job):
    _, runs = scenario(job, "sorted")
    row = runs[0]["row_length"]
    rows = sorted({step[1] for step in runs[0]["steps"]})
    assert rows == [row * 2**k for k in range(len(rows))] and len(rows) > 1


def test_the_row_length_chosen_is_the_most_of_each_processs_first_buffer(job):
    count, runs = scenario(job, "chosen")
    choices = [r["choice"] for r in runs]
    assert choices[-1] == 48 and max(choices[:-1]) == 32  # the last process: its 45 rounded up to 8
    for r in runs:
        assert r["row_length"] == 48
        assert {tuple(s) for s in r["steps"]} >= {(4, 48)}


def test_a_shard_that_ran_out_yields_padding_only_rows_until_every_process_is_done(job):
    count, runs = scenario(job, "chosen")
    assert len(runs[-1]["shard"]) < len(runs[0]["shard"])  # the last process's shard is 60% of the others'
    assert runs[-1]["padding_only"] > 0
    assert runs[-1]["padding_only"] > runs[0]["padding_only"]


def test_a_jitted_step_over_the_jobs_global_batch_sees_every_token_of_every_process(job):
    _, runs = scenario(job, "chosen")
    everyone = sum(r["tokens"] for r in runs)
    for r in runs:
        assert r["job_tokens"] == everyone


def test_a_process_with_an_empty_shard_yields_padding_only_in_step_and_keep_pads(job):
    count, runs = scenario(job, "empty")
    assert runs[1]["shard"] == [] and runs[1]["ids"] == []
    assert runs[1]["padding_only"] == len(runs[1]["steps"])
    assert {s[0] for r in runs for s in r["steps"]} == {4}  # remainder="keep" in step: padded rows too


def test_a_row_length_given_extends_for_longer_examples_and_drop_drops_only_short_end_batches(job):
    count, runs = scenario(job, "given")
    lengths = {s[1] for s in runs[0]["steps"]}
    assert 24 in lengths and lengths - {24} and all(n % 8 == 0 for n in lengths)  # extended rows: 32, 40
    for r in runs:
        assert {s[0] for s in r["steps"]} == {3}
        assert len(r["ids"]) == len(set(r["ids"])) and set(r["ids"]) <= set(r["shard"])
        assert len(r["ids"]) + r["dropped"] == len(r["shard"])
        assert r["bad"] == 0


def test_a_job_resumed_mid_epoch_on_every_process_yields_exactly_the_batches_that_were_left(job):
    count, whole = scenario(job, "whole")
    _, resumed = scenario(job, "resumed")
    for w, r in zip(whole, resumed):
        assert r["first_steps"] == 5 and r["format"] == "shapewatch.pack-state/3"
        assert len(r["steps"]) > 10  # steps were left to resume
        assert r["steps"] == w["steps"]  # the 5 steps before the state was saved and those after it
        assert r["ids"] == w["ids"]
        assert r["errors"] == [] and r["bad"] == 0


def test_a_state_of_another_process_count_or_with_a_bad_schedule_is_refused_and_changes_nothing(job):
    count, resumed = scenario(job, "resumed")
    for i, r in enumerate(resumed):
        assert r["refused"][0].startswith(
            f"ValueError: [shapewatch] load_state_dict: state['lockstep']['processes'] is [{i}, {count + 1}] "
            f"(index, count), but this is process [{i}, {count}]")
        assert r["refused"][1].startswith(
            "TypeError: [shapewatch] load_state_dict: state['lockstep']['schedule'] is list ['32'], expected "
            "a list of row lengths")
    # and the same loader then took its own state: the test above sees exactly the batches left


def test_across_processes_false_packs_each_processs_shard_on_its_own(job):
    _, runs = scenario(job, "alone")
    for r in runs:
        assert sorted(r["ids"]) == sorted(r["shard"]) and r["bad"] == 0
        assert r["padding_only"] == 0
    assert len(runs[-1]["steps"]) < len(runs[0]["steps"])  # half a shard: fewer steps, none padding only


@pytest.mark.parametrize("name", ["fails", "fails_on_0"])
def test_a_source_that_raises_on_one_process_is_its_own_error_there_and_named_on_the_others(job, name):
    count, runs = scenario(job, name)
    failing = count - 1 if name == "fails" else 0
    assert runs[failing]["errors"] == ["OSError: disk read failed on shard file 7"]
    for i, r in enumerate(runs):
        assert r["steps"] == runs[failing]["steps"]
        if i != failing:
            assert len(r["errors"]) == 1
            assert r["errors"][0].startswith(
                f"LoaderProcessError: [shapewatch] group_by_length: process {failing} of {count} failed at step "
                f"{len(r['steps'])} (seen from process {i}): OSError: disk read failed on shard file 7"), r["errors"]


def test_a_bad_example_on_one_process_is_left_out_and_every_process_goes_on_in_step(job):
    count, runs = scenario(job, "bad")
    bad_id = runs[0]["shard"][10]
    assert len(runs[0]["errors"]) == 1 and runs[0]["errors"][0].startswith(
        "ValueError: [shapewatch] an example has length 0"), runs[0]["errors"]
    for i, r in enumerate(runs):
        assert r["steps"] == runs[0]["steps"]
        assert sorted(r["ids"]) == sorted(set(r["shard"]) - {bad_id})
        if i:
            assert len(r["errors"]) == 1 and r["errors"][0].startswith(
                f"LoaderProcessError: [shapewatch] group_by_length: process 0 of {count} failed at step "), r["errors"]
            assert "ValueError: [shapewatch] an example has length 0" in r["errors"][0]


def test_interrupted_at_any_line_of_next_on_every_process_each_example_comes_once_in_step(tmp_path):
    # a KeyboardInterrupt at line event k of the packing loader's modules, the agreement's included
    # (not the key-value store's own calls), on both processes at once; next() is called again
    plan = {"interrupt": {"n": 16, "top": 14, "uneven": 0.5, "loader": {"buffer_size": 4}}}
    results = [r["interrupt"] for r in run_job(tmp_path, 2, plan, timeout_s=30)]
    assert min(r["lines"] for r in results) > 1000
    for p, r in enumerate(results):
        clean, runs = r["runs"][0], r["runs"][1:]
        swept = sweep(max(x["lines"] for x in results))  # every line event (or this run's share of them)
        assert len(runs) == len(swept)
        assert sorted(clean["ids"]) == sorted(r["shard"]) and clean["bad"] == 0
        for k, (at, run) in enumerate(zip(swept, runs)):
            assert run["fired"] == (at < r["lines"]), (p, at)
            assert run["steps"] == results[0]["runs"][k + 1]["steps"], (p, at)
            assert sorted(run["ids"]) == sorted(r["shard"]) and run["bad"] == 0, (p, at)
    assert len(results[1]["shard"]) < len(results[0]["shard"])
