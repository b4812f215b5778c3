"""Loader faults (issue 37, "Nothing lost, nothing hung"): what a demanding user meets, each
case reproduced with real loaders (no mocks, no timed assertions): resume states of the wrong
type or value refused before anything changes, interrupts while a batch moves, bad batches
across processes, sizes and CLI inputs out of range.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from shapewatch.buckets import Buckets, bucketed, group_by_length, propose
from tests._interrupt import after_call, buckets_files, drain_after_calls, ticking
from tests._jobs import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.filterwarnings("ignore:.*buffer_size=.* is below one full")
SPAN = 1000  # example i holds i * SPAN + arange(length): every token names its example
LENGTHS = [3, 7, 1, 12, 5, 9, 2, 14, 6, 4, 11, 8, 3, 10, 20, 1, 5]


def examples():
    return [(i * SPAN + np.arange(n)).astype(np.int64) for i, n in enumerate(LENGTHS)]




def ids_of(batches) -> Counter:
    """Example ids yielded (an example's first token names it), with how often."""
    return Counter(int(b.data[r, 0]) // SPAN for b in batches for r in range(b.rows))


# -- a KeyboardInterrupt right after a call returns (where Python checks for a signal)

def _drain(it, at: int | None):
    return drain_after_calls(it, at, buckets_files("_loaders.group_by_length"))


# -- sizes checked when a loader is made

@pytest.mark.parametrize("make", [
    lambda m: group_by_length(examples(), batch_size=2, multiple_of=m),
    lambda m: bucketed([np.ones((2, n)) for n in (3, 5)], multiple_of=m),
], ids=["group_by_length", "bucketed"])
@pytest.mark.parametrize("multiple_of", [2**41, 2**70])
def test_a_multiple_of_above_the_longest_length_is_refused_when_the_loader_is_made(make, multiple_of):
    # it was accepted, and next() raised: a ValueError about boundaries (2**41) or a raw
    # OverflowError "Python int too large to convert to C long" (2**70)
    with pytest.raises(ValueError, match=rf"^\[shapewatch\] multiple_of={multiple_of:,} is above the largest "
                                         r"length accepted, 2\*\*40 = 1,099,511,627,776; fix: "):
        make(multiple_of)


def test_the_longest_multiple_of_is_accepted():
    assert next(bucketed([np.ones((1, 3))], multiple_of=2**20)).bucket == 2**20


# -- load_state_dict checks the whole state first; a state refused leaves the loader usable

def _auto_loader():
    return group_by_length(examples(), batch_size=2, buffer_size=6, clock=ticking(), seed=3)


def _saved(make, taken: int = 3):
    loader = make()
    for _ in range(taken):
        next(loader)
    return loader.state_dict()


def _rest(make, state) -> list:
    loader = make()
    loader.load_state_dict(copy.deepcopy(state))
    return [(b.bucket, b.rows, np.asarray(b.data).tobytes()) for b in loader]


@pytest.mark.parametrize("field", ["batches", "used", "observer", "decisions"])
def test_a_planner_field_of_the_wrong_type_is_refused_and_the_loader_stays_usable(field):
    state = _saved(_auto_loader)
    bad = copy.deepcopy(state)
    bad["planner"]["fields"][field] = None
    loader = _auto_loader()
    with pytest.raises((TypeError, ValueError), match=rf"^\[shapewatch\] load_state_dict: .*{field}"):
        loader.load_state_dict(bad)  # today: accepted; next() then raises TypeError/AttributeError
    loader.load_state_dict(copy.deepcopy(state))
    assert [(b.bucket, b.rows, np.asarray(b.data).tobytes()) for b in loader] == _rest(_auto_loader, state)


def test_a_planner_state_with_its_fields_missing_is_refused():
    bad = _saved(_auto_loader)
    bad["planner"]["fields"] = {}
    with pytest.raises(ValueError, match=r"^\[shapewatch\] load_state_dict: .*missing"):
        _auto_loader().load_state_dict(bad)


@pytest.mark.parametrize("make", [
    lambda: group_by_length(examples(), batch_size=2, buckets=(4, 8, 16), buffer_size=5, seed=1),
    lambda: bucketed([np.ones((2, n)) for n in LENGTHS], buckets=(4, 8, 16)),
], ids=["group_by_length", "bucketed"])
def test_a_shape_count_that_is_not_a_count_is_refused(make):
    bad = _saved(make)
    shapes = bad["counts"]["shapes"]
    for key in shapes:
        shapes[key] = None
    with pytest.raises((TypeError, ValueError), match=r"^\[shapewatch\] load_state_dict: .*shapes"):
        make().load_state_dict(bad)


def test_bucketed_state_cannot_replace_length_of():
    def make():
        return bucketed([np.ones((2, n)) for n in LENGTHS], buckets=(4, 8, 16))

    bad = _saved(make)
    bad["arguments"]["length_of"] = True  # saved by a loader given length_of: not this one
    with pytest.raises(ValueError, match=r"^\[shapewatch\] load_state_dict: state\['arguments'\]\['length_of'\] is "
                                         r"True, but this loader was made with False"):
        make().load_state_dict(bad)
    bad["arguments"]["length_of"] = "junk"
    with pytest.raises(TypeError, match=r"^\[shapewatch\] load_state_dict: state\['arguments'\]\['length_of'\]"):
        make().load_state_dict(bad)
    bad["arguments"]["length_of"] = False
    bad["length_of"] = "junk"  # no callable comes from a state
    with pytest.raises(ValueError, match=r"^\[shapewatch\] load_state_dict: .*unknown \['length_of'\]"):
        make().load_state_dict(bad)


def _pack_loader():
    return group_by_length(examples(), batch_size=2, strategy="pack", buffer_size=5, seed=1, across_processes=False)


def test_a_pack_state_with_a_junk_generator_state_is_refused_before_anything_is_read():
    state = _saved(_pack_loader, 1)
    bad = copy.deepcopy(state)
    bad["rng"]["state"]["state"] = -1
    loader = _pack_loader()
    with pytest.raises((TypeError, ValueError), match=r"^\[shapewatch\] load_state_dict: .*rng"):
        loader.load_state_dict(bad)  # today: OverflowError: Python integer -1 out of bounds for uint64
    loader.load_state_dict(copy.deepcopy(state))  # the state refused changed nothing
    assert [(b.bucket, b.rows, np.asarray(b.data).tobytes()) for b in loader] == _rest(_pack_loader, state)


# -- multi-process: a batch one process cannot pad

_PAD_WORKER = r'''
import json, os, sys
pid, count, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid,
                           initialization_timeout=60)
import numpy as np
from shapewatch.buckets import bucketed

# uint8 tokens, pad_value=-1 (no uint8 holds it): process 0's batches fill their buckets exactly
# (nothing to pad), process 1's do not; a step's bucket is the same on both
widths = (8, 16) if pid == 0 else (5, 12)
loader = bucketed([np.ones((2, w), np.uint8) for w in widths], buckets=(8, 16), pad_value=-1)
steps, errors = [], []
for _ in range(20):  # a loop that goes on after an error from next(), as the docs say it may
    try:
        batch = next(loader)
    except StopIteration:
        break
    except Exception as exc:
        errors.append([len(steps), f"{type(exc).__name__}: {str(exc)[:200]}"])
        continue
    steps.append([int(n) for n in np.asarray(batch.data).shape])
with open(os.path.join(out, f"result-{pid}.json"), "w") as fh:
    json.dump({"steps": steps, "errors": errors}, fh)
jax.distributed.shutdown()
'''


@pytest.mark.slow
def test_bucketed_a_batch_one_process_cannot_pad_keeps_every_process_in_step(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(_PAD_WORKER)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    procs = [subprocess.Popen([sys.executable, str(worker), str(i), "2", str(port), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    try:
        errs = [p.communicate(timeout=180)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for i in range(2):
        path = tmp_path / f"result-{i}.json"
        assert path.exists(), errs[i][-2000:]
        results.append(json.loads(path.read_text()))
    p0, p1 = results
    assert p1["errors"] and all("pad_value -1 cannot be stored exactly in dtype uint8" in e for _, e in p1["errors"])
    # every process takes the same steps (it was: process 0 yielded 2 batches, process 1 none, raising
    # at each, unknown to process 0: a collective step then hangs); where one raises, all do: its own
    # error (here process 0's batches cannot hold -1 either), or LoaderProcessError naming it
    assert p0["steps"] == p1["steps"], (p0, p1)
    assert [at for at, _ in p0["errors"]] == [at for at, _ in p1["errors"]]
    assert all("pad_value -1 cannot be stored exactly in dtype uint8" in e
               or e.startswith("LoaderProcessError: [shapewatch] bucketed: process 1 of 2") for _, e in p0["errors"])


def test_bucketed_on_one_process_pads_only_where_a_batch_needs_it():
    # the check across processes, made when a batch is read, is not made on one process: a batch
    # that fills its bucket needs no pad_value
    loader = bucketed([np.ones((2, 8), np.uint8), np.ones((2, 5), np.uint8), np.ones((2, 16), np.uint8)],
                      buckets=(8, 16), pad_value=-1)
    assert next(loader).bucket == 8
    with pytest.raises(ValueError, match=r"pad_value -1 cannot be stored exactly in dtype uint8"):
        next(loader)
    assert next(loader).bucket == 16


# -- an interrupt while the online planner moves a batch ahead of a new shape's compile

_MOVE = "self._ready.append(self._ready.pop("


class _AtTheMove:
    """Raise KeyboardInterrupt once, right after ``self._ready.pop(...)`` returns in
    ``GroupByLength.__next__``'s ``self._ready.append(self._ready.pop(i))`` (where Python checks
    for a signal: a timer's KeyboardInterrupt lands there)."""

    def __init__(self) -> None:
        import inspect

        from shapewatch.buckets._loaders import group_by_length as module

        lines = inspect.getsource(module).splitlines()
        self.line = next((i + 1 for i, text in enumerate(lines) if _MOVE in text), None)
        self.fired = False

    def _local(self, frame, event, arg):
        if (event == "opcode" and not self.fired and frame.f_lineno == self.line
                and frame.f_lasti in after_call(frame.f_code)):
            self.fired = True  # the first call on the line that returns is pop()
            raise KeyboardInterrupt
        return self._local

    def _global(self, frame, event, arg):
        if self.line is not None and frame.f_code.co_name == "__next__" and frame.f_code.co_filename.endswith(
                buckets_files("_loaders.group_by_length")):
            frame.f_trace_opcodes = True
            return self._local
        return None


@pytest.mark.slow
def test_an_interrupt_while_a_batch_is_moved_ahead_of_a_compile_loses_nothing():
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(w, x):  # a step whose cost grows with the length squared, as in test_loaders_async
        h = jnp.tanh(x[..., None] * w)
        s = jax.nn.softmax(h @ h.transpose(0, 2, 1), -1) @ h
        return w - 1e-6 * s.mean(0).mean(0), s.mean()

    rng = np.random.default_rng(0)
    ns = np.where(rng.random(16 * 512) < 0.2, 256, rng.integers(4, 16, 16 * 512))
    ns[:32] = 256
    data = [np.full(int(k), i, np.float32) for i, k in enumerate(ns)]
    it = group_by_length(data, batch_size=16, seed=0)
    hook = _AtTheMove()
    w, loss, seen = jnp.ones((32,)), None, []
    sys.settrace(hook._global)
    try:
        for _ in range(10_000):
            try:
                b = next(it)
            except KeyboardInterrupt:
                continue
            except StopIteration:
                break
            w, loss = step(w, b.data)
            seen += [int(v) for v, k in zip(np.asarray(b.data)[:, 0], b.lengths, strict=True) if k > 0]
    finally:
        sys.settrace(None)
    float(loss)
    assert it._online.covers >= 1  # the move was made (the machine ran the path under test)
    assert sorted(seen) == list(range(len(data)))  # today: the 16 examples of the batch popped are lost


@pytest.mark.parametrize("make", [
    lambda: group_by_length(examples(), batch_size=2, buckets=(2**40,)),
    lambda: group_by_length(examples(), token_budget=64, buckets=(8, 2**32)),
    lambda: group_by_length(examples(), batch_size=4, strategy="pack", row_length=2**30),
    lambda: bucketed([np.ones((2, 3))], buckets=Buckets((2**40,))),
])
def test_a_batch_too_big_to_allocate_is_refused_when_the_loader_is_made(make):
    with pytest.raises(ValueError, match=r"^\[shapewatch\] a batch at the largest length [\d,]+ with "
                       r"(batch_size=[\d,]+|token_budget=[\d,]+|one row) holds [\d,]+ positions, above the most that can be "
                       r"allocated, 2\*\*31 - 1"):
        make()


def test_a_loader_at_the_allocation_limit_is_made():
    group_by_length(examples(), batch_size=2, buckets=(2**30 - 1,))


@pytest.mark.parametrize("make", [
    lambda: propose([3, 4], 2, multiple_of=2**70),
    lambda: group_by_length(examples(), batch_size=2, strategy="pack", multiple_of=2**70),
    lambda: group_by_length(examples(), batch_size=2, multiple_of=2**41),
    lambda: Buckets((8,), multiple_of=2**41),
])
def test_a_multiple_of_above_the_longest_length_is_refused_by_name(make):
    with pytest.raises(ValueError, match=r"^\[shapewatch\] multiple_of=[\d,]+ is above the largest length accepted"):
        make()
