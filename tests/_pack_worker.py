"""One process of a real jax.distributed job over ``group_by_length(..., strategy="pack")``,
started by tests/test_pack_lockstep.py.

argv: process id, process count, port, out dir, then JSON: {scenario name: options} (run in
that order, each with its own loaders, made in the same order on every process), or
{"interrupt": {...}} for the interrupt run. Options of a scenario:
  n: data set size; top: the longest length; uneven: the last process keeps this share of its
  shard; empty: a process whose shard holds nothing; long_first: a process whose shard's first
  example is this long; fail_at: a process whose source raises at its 40th example; bad_at: a
  process whose 10th example has length 0; go_on: next() is called again after an error;
  stop: steps after which the state is saved and a new loader resumes from it; train: every
  step goes through a jitted sum over the job's global batch; loader: group_by_length's options.
Example ``i`` holds ``i * SPAN + arange(length)``: every token names its example and position.
Writes result-<id>.json: per scenario, each step's shape, the example ids read through
``segment_ids`` (whole and positions right, else counted in "bad"), the padding-only steps,
the errors, the agreed row length and this process's own choice.
"""

import copy
import json
import os
import pickle
import sys
import warnings

import jax

pid, count, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
plan = json.loads(sys.argv[5])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid,
                           initialization_timeout=60)
import numpy as np  # noqa: E402
from _segments import read_segments  # noqa: E402 - tests/: the folder of this script
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import shapewatch  # noqa: E402
from shapewatch.buckets import group_by_length  # noqa: E402

shapewatch.configure(report="off")
warnings.simplefilter("ignore")  # a small buffer's flush warning: not what these runs look at
SPAN = 10_000
mesh = Mesh(np.array(jax.devices()), ("data",))
rows_sharding = NamedSharding(mesh, PartitionSpec("data"))


@jax.jit
def real_tokens(segment_ids):
    return (segment_ids > 0).sum()


def data_set(opts):
    """Every example of the job, and this process's shard (ids)."""
    rng = np.random.default_rng(opts.get("seed", 0))
    lengths = np.clip(rng.lognormal(np.log(12), 0.8, opts.get("n", 240)), 1, opts.get("top", 60)).astype(int)
    if opts.get("sorted"):  # a source sorted by length: each shard's first buffer holds its shortest
        lengths = np.sort(lengths)
    ids = list(range(len(lengths)))[pid::count]
    if opts.get("uneven") and pid == count - 1:
        ids = ids[: int(len(ids) * opts["uneven"])]
    if opts.get("empty") == pid:
        ids = []
    if opts.get("long_first") is not None and ids and pid == count - 1:
        lengths[ids[0]] = opts["long_first"]
    if opts.get("bad_at") == pid:
        lengths[ids[10]] = 0
    examples = [(i * SPAN + np.arange(n)).astype(np.int32) for i, n in enumerate(lengths)]
    return examples, ids


def source(examples, ids, opts):
    for k, i in enumerate(ids):
        if opts.get("fail_at") == pid and k == 40:
            raise OSError("disk read failed on shard file 7")
        yield examples[i]


def read(batch, examples):
    """The example ids of a packed batch, read through its segments; how many are wrong; whether
    it is padding only."""
    return read_segments(batch, examples, SPAN)


def drain(loader, examples, res, opts, stop=None):
    """Next batches into ``res`` until the end (or ``stop`` steps); an error ends it (with go_on:
    it is noted and next() is called again)."""
    while stop is None or len(res["steps"]) < stop:
        try:
            batch = next(loader)
        except StopIteration:
            break
        except Exception as exc:  # noqa: BLE001 - what each process saw
            res["errors"].append(f"{type(exc).__name__}: {exc}")
            if opts.get("go_on") and len(res["errors"]) < 5:
                continue
            break
        ids, bad, padding = read(batch, examples)
        res["ids"] += ids
        res["bad"] += bad
        res["padding_only"] += int(padding)
        res["steps"].append([int(x) for x in np.asarray(batch.segment_ids).shape])
        if opts.get("train"):
            seg = jax.make_array_from_process_local_data(rows_sharding, np.asarray(batch.segment_ids))
            res["job_tokens"] += int(real_tokens(seg))
    res["row_length"] = None if loader.plan is None else loader.plan.max_length


def scenario(opts):
    examples, ids = data_set(opts)
    kw = {"batch_size": 4, "strategy": "pack", "seed": 0, **opts.get("loader", {})}
    faulty = opts.get("fail_at") is not None
    make = lambda: group_by_length(source(examples, ids, opts) if faulty else [examples[i] for i in ids], **kw)  # noqa: E731
    res = {"shard": ids, "steps": [], "ids": [], "bad": 0, "padding_only": 0, "errors": [], "job_tokens": 0,
           "tokens": int(sum(len(examples[i]) for i in ids))}
    first = [len(examples[i]) for i in ids[: kw.get("buffer_size", 4096)]]
    multiple = kw.get("multiple_of", 1)
    res["choice"] = -(-max(first) // multiple) * multiple if first else None
    loader = make()
    if opts.get("stop"):
        drain(loader, examples, res, opts, stop=opts["stop"])
        res["first_steps"] = len(res["steps"])
        state = pickle.loads(pickle.dumps(loader.state_dict()))
        res["format"] = state["format"]
        loader = make()
        res["refused"] = []
        for field, value in (("processes", [pid, count + 1]), ("schedule", ["32"])):
            wrong = copy.deepcopy(state)
            wrong["lockstep"][field] = value
            try:
                loader.load_state_dict(wrong)
            except (TypeError, ValueError) as exc:  # checked whole: the loader is left as it was
                res["refused"].append(f"{type(exc).__name__}: {exc}")
        loader.load_state_dict(state)
    drain(loader, examples, res, opts)
    res["dropped"] = loader.dropped
    return res


def interrupted(opts):
    """Loaders drained while every process gets a KeyboardInterrupt at line event k of the
    packing loader's modules (one loader per k, calling next() again after it; k from 0 to the
    most line events of a clean run on any process)."""
    from jax._src.distributed import global_state

    from tests._interrupt import buckets_files, sweep
    from tests.test_pack import Interrupter

    files = buckets_files("_loaders.group_by_length", "_loaders.group_by_length_examples", "_loaders.pack",
                          "_loaders.batch", "_loaders.reading", "_distributed.pack_lockstep")
    examples, ids = data_set(opts)
    kw = {"batch_size": 2, "strategy": "pack", "seed": 1, **opts.get("loader", {})}

    def run(hook):
        loader = group_by_length([examples[i] for i in ids], **kw)
        res = {"steps": [], "ids": [], "bad": 0, "padding_only": 0, "errors": [], "job_tokens": 0}
        for _ in range(400):
            sys.settrace(hook)
            try:
                batch = next(loader)
            except KeyboardInterrupt:
                continue
            except StopIteration:
                break
            finally:
                sys.settrace(None)
            got, bad, padding = read(batch, examples)
            res["ids"] += got
            res["bad"] += bad
            res["steps"].append([int(x) for x in np.asarray(batch.segment_ids).shape])
        res["fired"] = hook.fired
        return res

    clean = Interrupter(-1, files)
    runs = [run(clean)]
    global_state.client.key_value_set(f"test/lines/{pid}", str(clean.lines))
    lines = max(int(global_state.client.blocking_key_value_get(f"test/lines/{p}", 60_000)) for p in range(count))
    for at in sweep(lines):
        runs.append(run(Interrupter(at, files)))
    return {"shard": ids, "lines": clean.lines, "runs": runs}


results = {}
for name, opts in plan.items():
    results[name] = interrupted(opts) if name == "interrupt" else scenario(opts)
with open(os.path.join(out, f"result-{pid}.json"), "w") as fh:
    json.dump(results, fh)
# every process wrote its result; a failed scenario's loaders left no collective behind
jax.distributed.shutdown()
