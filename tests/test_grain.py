"""shapewatch.buckets.grain: group_by_length as a grain IterDataset transformation."""

import json
import os
import sys

import grain
import numpy as np
import pytest
from grain.experimental import assert_equal_output_after_checkpoint

from shapewatch.buckets.grain import GroupByLengthIterDataset
from tests._jobs import free_port, run_processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

rng = np.random.default_rng(0)
EXAMPLES = [np.arange(n) + 1000 * i for i, n in enumerate(np.clip(rng.lognormal(3, 1, 200), 2, 300).astype(int))]


def dataset():
    return GroupByLengthIterDataset(grain.MapDataset.source(EXAMPLES).to_iter_dataset(), batch_size=8,
                                    buffer_size=256, max_buckets=3)


def test_batches_hold_every_example_once_unaltered():
    rows = [row[:n].tolist() for b in dataset() for row, n in zip(b.data, b.lengths) if n]
    assert sorted(rows) == sorted(e.tolist() for e in EXAMPLES)


def test_an_iterator_restored_from_grains_state_goes_on_with_the_batches_left():
    whole = [b.data.tolist() for b in dataset()]
    it = iter(dataset())
    first = [next(it).data.tolist() for _ in range(7)]
    state = json.loads(json.dumps(it.get_state()))  # grain keeps iterator states as JSON
    again = iter(dataset())
    again.set_state(state)
    assert first + [b.data.tolist() for b in again] == whole


def test_bad_keywords_raise_when_the_dataset_is_made():
    with pytest.raises(ValueError, match="needs batch_size or token_budget"):
        GroupByLengthIterDataset(grain.MapDataset.source(EXAMPLES))


def packed(parent=None, **kwargs):
    parent = grain.MapDataset.source(EXAMPLES).to_iter_dataset() if parent is None else parent
    return GroupByLengthIterDataset(parent, **{"batch_size": 4, "strategy": "pack", "row_length": 128,
                                               "buffer_size": 64, **kwargs})


def segments(tokens, segment_ids, positions):
    """Each example of a packed batch, as its segment holds it; its positions must count from 0."""
    out = []
    for row, seg, pos in zip(tokens, segment_ids, positions):
        for k in range(1, int(seg.max()) + 1):
            assert pos[seg == k].tolist() == list(range(int((seg == k).sum())))
            out.append(row[seg == k].tolist())
    return out


def test_packed_batches_hold_every_example_once_and_whole():
    batches = list(packed())
    assert {b.data.shape[1] for b in batches} > {128}  # the longer examples got rows of their own length
    got = [ex for b in batches for ex in segments(b.data, b.segment_ids, b.positions)]
    assert sorted(got) == sorted(e.tolist() for e in EXAMPLES)


def pipeline():
    """Shuffled, mapped to dicts, packed, mapped again: grain on both sides of the packing."""
    source = grain.MapDataset.source(EXAMPLES).shuffle(seed=3).map(lambda x: {"tokens": x, "rest": x % 7})
    return packed(source.to_iter_dataset(), seed=1).map(
        lambda b: {"tokens": b.data["tokens"], "segment_ids": b.segment_ids, "positions": b.positions})


def test_a_packing_pipeline_restored_from_grains_state_at_any_batch_yields_exactly_the_batches_left():
    assert_equal_output_after_checkpoint(pipeline())  # grain's own check, at every batch


def test_a_packing_pipelines_state_survives_json_mid_epoch():
    whole = list(pipeline())
    it = iter(pipeline())
    first = [next(it) for _ in range(5)]
    again = iter(pipeline())
    again.set_state(json.loads(json.dumps(it.get_state())))
    rest = list(again)
    np.testing.assert_equal(first + rest, whole)
    got = [ex for b in first + rest for ex in segments(b["tokens"], b["segment_ids"], b["positions"])]
    assert sorted(got) == sorted(e.tolist() for e in EXAMPLES)


def test_a_bucketing_pipeline_passes_grains_own_checkpoint_check():
    small = grain.MapDataset.source(EXAMPLES[:60]).to_iter_dataset()
    assert_equal_output_after_checkpoint(GroupByLengthIterDataset(small, batch_size=8, buffer_size=32,
                                                                  max_buckets=3))


def test_a_state_refused_leaves_the_iterator_going_on_where_it_was():
    whole = [b.data.tolist() for b in packed()]
    bucketing = iter(dataset())
    next(bucketing)
    it = iter(packed())
    first = [next(it).data.tolist() for _ in range(3)]
    with pytest.raises(ValueError, match=r"expects a dict from state_dict\(\) \('shapewatch.pack-state/\d+'\); "
                                         r"got format 'shapewatch.loader-state/\d+'"):
        it.set_state(bucketing.get_state())
    assert first + [b.data.tolist() for b in it] == whole



@pytest.mark.parametrize("make", [dataset, packed], ids=["bucket", "pack"])
def test_a_state_the_parent_refuses_leaves_the_iterator_going_on_where_it_was(make):
    whole = [b.data.tolist() for b in make()]
    it = iter(make())
    first = [next(it).data.tolist() for _ in range(3)]
    state = it.get_state()
    with pytest.raises(KeyError):  # grain's own refusal of its parent's state, raised as it sets it
        it.set_state({**state, "parent": {"nonsense": 1}})
    assert it.get_state() == state  # the parent where it stood
    assert first + [b.data.tolist() for b in it] == whole


GRAIN_WORKER = """
import json, sys
import jax
pid, port, opts = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid,
                           initialization_timeout=60)
import grain
import numpy as np
from shapewatch.buckets.grain import GroupByLengthIterDataset

examples = [np.arange(n) + 1000 * i for i, n in enumerate(np.random.default_rng(0).integers(2, 60, 91))]
by_process = grain.sharding.ShardByJaxProcess()
shard = grain.MapDataset.source(examples)[by_process.shard_index::by_process.shard_count]
ds = GroupByLengthIterDataset(shard, batch_size=4, strategy="pack", row_length=64, **opts)
result = {"refused": None}
try:
    it = iter(ds)
    batches = [next(it) for _ in range(2)]
    again = iter(ds)
    again.set_state(json.loads(json.dumps(it.get_state())))
    batches += list(again)
    result["ids"] = [int(row[seg == k][0]) // 1000 for b in batches for row, seg in zip(b.data, b.segment_ids)
                     for k in range(1, int(seg.max()) + 1)]
    result["steps"] = [list(b.data.shape) for b in batches]
except NotImplementedError as exc:
    result["refused"] = str(exc)
print(json.dumps(result))
jax.distributed.shutdown()
"""


def run_grain_job(tmp_path, **opts):
    """Two processes, each packing its ShardByJaxProcess shard of 91 examples, 2 batches, then
    restored from grain's state (through JSON) in a new iterator to the end: each one's result."""
    worker = tmp_path / "worker.py"
    worker.write_text(GRAIN_WORKER)
    port = str(free_port())
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    outs = run_processes([[sys.executable, str(worker), str(i), port, json.dumps(opts)] for i in range(2)], env)
    return [json.loads(out.strip().splitlines()[-1]) for out in outs]


def test_packing_sharded_by_jax_process_on_its_own_yields_each_processs_shard_once_across_a_restore(tmp_path):
    for i, r in enumerate(run_grain_job(tmp_path, across_processes=False)):
        assert sorted(r["ids"]) == list(range(i, 91, 2))  # its own shard, every example once
        assert {tuple(shape) for shape in r["steps"]} == {(4, 64)}


def test_packing_sharded_by_jax_process_keeps_the_processes_in_step_across_a_restore(tmp_path):
    results = run_grain_job(tmp_path)
    assert [r["refused"] for r in results] == [None, None]
    assert len(results[0]["steps"]) > 2  # restored mid-epoch
    assert results[0]["steps"] == results[1]["steps"]  # the same shapes at every step, the same count
    for i, r in enumerate(results):
        assert sorted(r["ids"]) == list(range(i, 91, 2))  # its own shard once; a padding batch holds none


@pytest.mark.parametrize("hooks", ["every line", "after every call"])
def test_a_set_state_interrupted_anywhere_loses_nothing_when_called_again_and_refuses_to_go_on_until_then(hooks):
    """A Ctrl-C anywhere in set_state (after the parent moved too): next() and get_state() refuse
    until a set_state finishes, or, interrupted before the parent moved, the iterator goes on as it
    was; set_state called again goes on with exactly the batches that were left."""
    from tests._interrupt import AfterCall, Interrupter, buckets_files

    lengths = [3, 7, 1, 12, 5, 9, 2, 14, 6, 4, 11, 8, 3, 10, 7, 2, 13, 5]

    def make():
        src = grain.MapDataset.source([(i * 1000 + np.arange(n)).astype(np.int64) for i, n in enumerate(lengths)])
        return iter(GroupByLengthIterDataset(src.to_iter_dataset(), batch_size=2, buckets=(4, 8, 16),
                                             buffer_size=6, seed=1))

    def rows(batches):
        return [b.data[r, : b.lengths[r]].tolist() for b in batches for r in range(b.rows) if b.lengths[r]]

    files = buckets_files("grain")
    hook_at = ((lambda at: Interrupter(at, files, frozenset({"set_state"}))) if hooks == "every line"
               else (lambda at: AfterCall(at, files)))

    def set_under(it, hook) -> bool:
        sys.settrace(hook)
        try:
            it.set_state(state)
        except KeyboardInterrupt:
            return True
        finally:
            sys.settrace(None)
        return False

    first = make()
    [next(first) for _ in range(2)]
    state = json.loads(json.dumps(first.get_state()))
    rest = rows(list(first))
    whole = rows(list(make()))

    def warm() -> int:  # see test_loaders_interrupt: count on a run just after a clean one under the hook
        clean = hook_at(-1 if hooks == "every line" else None)
        assert not set_under(make(), clean)
        return clean.seen

    warm()
    points = warm()
    assert points > 5
    refused = 0
    for at in range(points):  # every point (few): both sides of the parent's move are seen
        it = make()
        warm()
        assert set_under(it, hook_at(at)), at
        if it._setting:
            refused += 1
            for call in (it.__next__, it.get_state):
                with pytest.raises(ValueError, match="set_state did not finish .* call set_state again"):
                    call()
        else:  # the parent had not moved: the iterator is as it was (a new one: every batch)
            assert rows(list(it)) == whole, at
        it.set_state(state)
        assert rows(list(it)) == rest, at
    assert 0 < refused < points  # both: interrupted before the parent moved, and after
