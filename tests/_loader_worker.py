"""One process of a real data-parallel job over a shapewatch loader, started by tests/test_loaders_multiprocess.py.

argv: process id, process count, port, out dir, then JSON options:
  loader: "group_by_length" | "bucketed"; examples: data set size; uneven: the last process
  keeps 80% of its shard; fail_at: a process id whose source raises after 40 examples;
  die_at: a process id that exits while reading its 41st example; kill_at: one killed (SIGKILL) there; stop: steps after which to save state and
  stop; resume: a state file to load; buckets: a fixed plan (overflow: its overflow); max_buckets: a learned plan; empty: a process id whose shard
  holds no example; cap: the longest length (default 384; lower: many examples at it, as truncated
  by a tokenizer); max_shapes: passed on; long_at: a process id whose shard's example 160 is
  1,500 long (every shard's first is 384; long_from: every example from that one on); go_on: the loop catches a ValueError from next() and goes on (as a loop that skips
  a refused example does), each message in "errors"; interrupt_wait: a process id whose first wait
  for the device within a step (after its 5th step) raises KeyboardInterrupt, which the loop catches
  and goes on (counted in "interrupts"); interrupt_in: [process id (or a list of them), function, module file]: that
  process raises KeyboardInterrupt once at the first line of that function (after its 5th step), as
  a Ctrl-C may land there, and goes on (counted in "interrupts"); sweep: with interrupt_in, at every
  line of that function instead, one call after another; after: the steps before interrupt_in arms
  (default 5); at: without sweep, the line event of the call at which it fires (default 0, its
  first; a list: each process's); save_on_interrupt: at that interrupt the loop saves state_dict() and stops; lockstep_edit: {field: value} set in the
  saved state's "lockstep" before it is loaded (None: the field dropped); lockstep_edits: a list of
  such edits, each loaded in turn (with resume) and the refusals written ("refusals"), no step run.
Writes result-<id>.json: the shapes of every step, the example ids it saw, compiles, agreed, the
steps before which a round was held (rounds_at) and the periodic re-plan's period at the end.
"""

import json
import os
import pickle
import signal
import sys
import warnings

import jax

pid, count, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
opts = json.loads(sys.argv[5])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid,
                           initialization_timeout=60)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _segments import read_segments  # noqa: E402 - tests/: the folder of this script
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import shapewatch  # noqa: E402
from shapewatch.buckets import bucketed, group_by_length  # noqa: E402

shapewatch.configure(report="off")
SPAN = 400  # example i holds i * SPAN + arange(length): every token names its example
rng = np.random.default_rng(0)
lengths = np.clip(rng.lognormal(np.log(40), 0.9, opts.get("examples", 400)), 2, opts.get("cap", 384)).astype(int)
examples = [(i * SPAN + np.arange(n)).astype(np.int32) for i, n in enumerate(lengths)]
if opts.get("loader") == "grain":  # grain shards by JAX process itself
    import grain

    from shapewatch.buckets.grain import GroupByLengthIterDataset

    by_process = grain.sharding.ShardByJaxProcess()
    shard = examples[by_process.shard_index::by_process.shard_count]
else:
    shard = examples[pid::count]
if opts.get("uneven") and pid == count - 1:
    shard = shard[: int(len(shard) * 0.8)]
if opts.get("empty") == pid:  # a process with no data at all
    shard = []
if opts.get("long_at") is not None:  # the first plan holds 384 (each first example); one 1,500
    longs = range(opts["long_from"], len(shard)) if opts.get("long_from") is not None else (160,)
    for k, n in ((0, 384), *((k, 1500) for k in longs)):
        if k == 0 or opts["long_at"] == pid:
            i = int(shard[k][0]) // SPAN
            examples[i] = shard[k] = (i * SPAN + np.arange(n)).astype(np.int32)


def source():
    for k, ex in enumerate(shard):
        if opts.get("fail_at") == pid and k == 40:
            raise OSError("disk read failed on shard file 7")
        if opts.get("die_at") == pid and k == 40:
            os._exit(3)
        if opts.get("kill_at") == pid and k == 40:
            os.kill(os.getpid(), signal.SIGKILL)
        yield ex


kw = {"buckets": opts["buckets"]} if opts.get("buckets") else {}
if opts.get("overflow"):  # the fixed plan's overflow ("error": a longer example or batch is refused)
    from shapewatch.buckets import Buckets

    kw["buckets"] = Buckets(opts["buckets"], overflow=opts["overflow"])
if opts.get("max_shapes"):
    kw["max_shapes"] = opts["max_shapes"]
if opts.get("max_buckets"):  # a plan learned from the first rounds' lengths
    kw["max_buckets"] = opts["max_buckets"]
if opts.get("local"):  # the switch off: each process on its own (no training step: it would hang)
    kw["across_processes"] = False
if opts.get("strategy"):  # group_by_length's strategy ("auto": bucket or pack, chosen in step)
    kw["strategy"] = opts["strategy"]
if opts.get("prior_step"):  # a saved report (the same on every process) with this step model
    report = group_by_length(examples, batch_size=8, across_processes=False).report()
    kw["prior"] = report | {"compile_seconds": 0.5, "step_model": opts["prior_step"]}
if opts.get("clock"):  # a clock that ticks once per read: the same timings on every run
    ticks = iter(range(10**9))
    kw["clock"] = lambda: float(next(ticks))
with warnings.catch_warnings(record=True) as made:  # SHAPEWATCH_LOADER_TIMEOUT is read here
    warnings.simplefilter("always")
    if opts.get("loader", "group_by_length") == "group_by_length":
        faults = ("fail_at", "die_at", "kill_at")
        data = source() if any(opts.get(k) is not None for k in faults) else shard
        loader = group_by_length(data, batch_size=8, seed=0, buffer_size=opts.get("buffer", 4096), **kw)
    elif opts["loader"] == "grain":
        loader = iter(GroupByLengthIterDataset(grain.MapDataset.source(shard), batch_size=8, seed=0, **kw))
    else:
        batches = [shard[i:i + 8] for i in range(0, len(shard), 8)]
        loader = bucketed(batches, **kw)
timeout_warnings = [str(w.message) for w in made if "SHAPEWATCH_LOADER_TIMEOUT" in str(w.message)]
if opts.get("resume") and opts.get("lockstep_edits"):  # each edited state refused, or None: then stop
    import copy

    with open(opts["resume"].format(process=pid), "rb") as fh:
        saved = pickle.load(fh)
    refusals = []
    for edit in opts["lockstep_edits"]:
        state = copy.deepcopy(saved)
        state["lockstep"].update(edit)
        try:
            loader.load_state_dict(state)
            refusals.append(None)
        except Exception as exc:  # noqa: BLE001 - what each refusal said (the loader is left as it was)
            refusals.append(f"{type(exc).__name__}: {exc}")
    with open(os.path.join(out, f"result-{pid}.json"), "w") as fh:
        json.dump({"refusals": refusals}, fh)
    jax.distributed.shutdown()
    sys.exit(0)
if opts.get("resume"):
    with open(opts["resume"].format(process=pid), "rb") as fh:
        state = pickle.load(fh)
    for field, value in opts.get("lockstep_edit", {}).items():  # None: the field dropped (an older state)
        if value is None:
            del state["lockstep"][field]
        else:
            state["lockstep"][field] = value
    loader.load_state_dict(state)

mesh = Mesh(np.array(jax.devices()), ("data",))
rows_sharding = NamedSharding(mesh, PartitionSpec("data"))


@shapewatch.watched_jit
def train_step(w, tokens, mask):
    pred = (tokens.astype(jnp.float32) / 1000.0) * w
    n = mask.sum()
    loss = jnp.where(mask, (pred - 1.0) ** 2, 0.0).sum() / jnp.maximum(n, 1)  # an all-padding batch: 0
    grad = jax.grad(lambda w: jnp.where(mask, ((tokens / 1000.0) * w - 1.0) ** 2, 0.0).sum()
                    / jnp.maximum(n, 1))(w)
    return w - 0.1 * grad, loss


w = jax.device_put(jnp.float32(0.5), NamedSharding(mesh, PartitionSpec()))
steps, ids, bad, error = [], [], 0, None


errors = []
interrupts = 0


class WaitInterrupter:
    """A trace hook: KeyboardInterrupt at the first line of the step meter's wait for the device
    when called by the planner around a step (not at next()'s start), once, after 5 steps."""

    def __init__(self):
        self.fired = False

    def __call__(self, frame, event, arg):
        if (self.fired or len(steps) < 5 or frame.f_code.co_name != "sync"
                or not frame.f_code.co_filename.endswith(os.path.join("_online", "step_meter.py"))
                or frame.f_back.f_code.co_name not in ("wait_before", "yielded")):
            return None
        return self.line

    def line(self, frame, event, arg):
        if event == "line" and not self.fired:
            self.fired = True
            raise KeyboardInterrupt("injected in the wait for the device")
        return None


class LineInterrupter:
    """A trace hook: KeyboardInterrupt at the first line of ``function`` of the module ``file``,
    once, after 5 steps; ``sweep``: at its first line in one call, its second in a later call, and
    so on, until a call ends before the line due (every line of the function, each once)."""

    def __init__(self, function, file, sweep=False, after=5, at=0):
        self.function, self.file, self.sweep, self.after = function, file, sweep, after
        self.fired, self.due, self.seen = False, at, 0

    def __call__(self, frame, event, arg):
        if (self.fired or len(steps) < self.after or frame.f_code.co_name != self.function
                or not frame.f_code.co_filename.endswith(self.file)):
            return None
        self.seen = 0
        return self.line

    def line(self, frame, event, arg):
        if event == "line" and not self.fired:
            self.seen += 1
            if self.seen - 1 == self.due:
                self.due += 1
                self.fired = not self.sweep
                raise KeyboardInterrupt(f"injected in {self.function} at its line event {self.due - 1}")
        elif event == "return" and self.sweep and self.seen <= self.due and self.seen:
            self.fired = True  # a whole call ran without reaching the line due: every line was hit
        return self.line


def batches():
    global error, interrupts
    it = iter(loader)
    hook = WaitInterrupter() if opts.get("interrupt_wait") == pid else None
    who = opts.get("interrupt_in", [None])[0]
    if opts.get("interrupt_in") and (pid in who if isinstance(who, list) else who == pid):
        at = opts.get("at", 0)
        hook = LineInterrupter(*opts["interrupt_in"][1:], sweep=bool(opts.get("sweep")), after=opts.get("after", 5),
                               at=at[pid] if isinstance(at, list) else at)
    while True:
        try:
            if hook is not None and not hook.fired:
                sys.settrace(hook)
            try:
                batch = next(it)
            finally:
                sys.settrace(None)
            yield batch
        except StopIteration:
            return
        except KeyboardInterrupt:
            interrupts += 1
            if opts.get("save_on_interrupt"):  # as a Ctrl-C handler that saves a checkpoint and stops
                with open(os.path.join(out, f"state-{pid}.pkl"), "wb") as fh:
                    pickle.dump(loader.state_dict(), fh)
                return
        except ValueError as exc:
            if not opts.get("go_on"):
                error = f"{type(exc).__name__}: {exc}"
                return
            errors.append(str(exc))
        except Exception as exc:  # the failure tests: what each process saw
            error = f"{type(exc).__name__}: {exc}"
            return


session = getattr(getattr(loader, "_scheduler", None), "session", None)  # the rounds, when in step
exchanges, rounds_at = 0, []
for k, batch in enumerate(batches()):
    if session is not None and session.exchanges != exchanges:  # a round before this step
        exchanges = session.exchanges
        rounds_at.append(k)
    tokens = np.asarray(batch.data)
    if batch.segment_ids is not None:
        got_ids, wrong, _ = read_segments(batch, examples, SPAN)
        ids += got_ids
        bad += wrong
    else:
        for row, n in zip(tokens, batch.lengths):
            if n:
                i = int(row[0]) // SPAN
                bad += int(not np.array_equal(row[:n], examples[i]) or n != len(examples[i]) or row[n:].any())
                ids.append(i)
    steps.append([int(x) for x in tokens.shape])
    if opts.get("local"):
        continue
    g_tokens = jax.make_array_from_process_local_data(rows_sharding, tokens)
    g_mask = jax.make_array_from_process_local_data(rows_sharding, np.asarray(batch.mask))
    w, loss = train_step(w, g_tokens, g_mask)
    float(loss)
    if opts.get("stop") and k + 1 == opts["stop"]:
        with open(os.path.join(out, f"state-{pid}.pkl"), "wb") as fh:
            pickle.dump(loader.state_dict(), fh)
        break
agreed, told = None, None
if not error:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agreed = shapewatch.check_hosts_agree(on_divergence="warn", timeout_ms=60_000)
    told = [str(w.message) for w in caught if "[shapewatch] processes" in str(w.message)]
result = {"error": error, "errors": errors, "interrupts": interrupts, "told": told, "timeout_warnings": timeout_warnings, "steps": steps, "ids": ids, "bad": bad, "shard": [int(ex[0]) // SPAN for ex in shard],
          "lengths": {int(ex[0]) // SPAN: len(ex) for ex in shard},
          "compiles": len(shapewatch.compile_records(train_step)()), "agreed": agreed,
          "decisions": [str(d) for d in getattr(loader, "decisions", [])], "rounds_at": rounds_at,
          "period": getattr(getattr(loader, "_scheduler", None), "period", None),
          "planner_processes": getattr(getattr(loader, "_online", None), "processes", None)}
with open(os.path.join(out, f"result-{pid}.json"), "w") as fh:
    json.dump(result, fh)
if error:
    # process 0 hosts the key-value store: it ends only once every other live process has
    # written its result (each says so in the store), not after a fixed pause that a loaded
    # machine may outlast while another process still reads the error record from it
    from jax._src.distributed import global_state

    if pid == 0:
        for other in range(1, count):
            if other != opts.get("die_at"):
                try:
                    global_state.client.blocking_key_value_get(f"test/written/{other}", 200_000)
                except Exception:  # noqa: BLE001 - it died or hangs: its missing result fails the test
                    pass
    elif opts.get("kill_at") == 0:
        # process 0 (the store) was killed: JAX's own client ends this process (a fatal log from
        # its error-polling thread, not an exception); wait for that rather than exit first, so
        # that the test sees what a program that went on after the error would meet
        import time

        time.sleep(120)
    else:
        try:
            global_state.client.key_value_set(f"test/written/{pid}", "1")
        except Exception:  # noqa: BLE001 - the store is gone: nothing to tell it
            pass
    os._exit(0)  # a job whose loader failed: no orderly shutdown with the others
jax.distributed.shutdown()
