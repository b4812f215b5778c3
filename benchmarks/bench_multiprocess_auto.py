"""Benchmark: auto-bucketing in a job of N processes against the best fixed plan of that job.

A real ``jax.distributed`` job of N processes (CPU, coordinator on 127.0.0.1): each process
takes every N-th example of one data set of N x ``EXAMPLES`` (100 batches of 16 a process, as
``bench_autobuckets.py`` trains one process) and trains the small attention model of
``bench_autobuckets.py`` (embedding, one attention layer, tied output; SGD) on batches of 16
from ``group_by_length`` over its shard, the processes in step (the same shape at every step,
agreed through JAX's key-value store). Two steps: ``own``, each process's jitted step on its own
batch (the processes meet only at the loader's rounds), and ``data-parallel``, as data-parallel
training runs: one jitted step over the job's batch (each process's rows of a global array made
with ``jax.make_array_from_process_local_data``, the parameters replicated, the gradient reduced
across the processes by XLA's collectives; gloo on the CPU), so the processes meet at every step.
Strategies: shapewatch auto (no numbers: it measures
the step and the compiles in the job and plans for the job) and every fixed plan
``propose(all the data's lengths, K)`` for K = 1..``KS`` (the best of them is the oracle in
hindsight). Each process is single-threaded in XLA and pinned to one of the cores the benchmark
may use, round-robin: as each process of a real job owns its device, and so that no process's
XLA threads contend with another's for a core (runs of one plan spread 5-20% that way on
2 cores). The loop waits for each step's loss. The job's wall is the slowest process's,
from a barrier after start-up to its last step; each strategy runs ``REPEATS`` times in
passes whose order rotates, and counts by its median. ``auto / best`` is the goal's ratio
(bar: 1.05).

``--examples N``: N examples a process instead of ``EXAMPLES`` (a longer job: N / 16 steps);
``--repeats N``: N passes instead of ``REPEATS``; ``--contend``: after the first pass only auto and
the Ks within ``CONTEND`` of the best first wall run again (as ``bench_autobuckets.py``'s oracle;
a shorter run of a longer job).

"steps counted": what the online planner counts for each fixed plan before the job runs (see
``counted``); the job's own steps beside it (each bucket's are its fullest process's).

``--quick``: 2 processes, a numpy stand-in for the step (a new shape sleeps 20 ms as its
"compile"), small data, K = 1..2, one pass: to check that it runs and prints the table (its
ratios are not the goal's).
Usage: ``python benchmarks/bench_multiprocess_auto.py [--quick] [--processes 2 4] [--distributions lognormal bimodal]
[--steps own data-parallel] [--examples N] [--repeats N] [--contend]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
from _common import ROOT, table

BATCH, EXAMPLES, CAP = 16, 1600, 512  # EXAMPLES: per process
QUICK = dict(batch=4, examples=96, cap=48)
KS = 5
REPEATS = 5  # one job's runs vary by ~5% (its processes' compiles share the cores): 3 left ~4% on the ratio
#: With ``--contend``: a K whose first wall is within this factor of the best first wall runs in every pass.
CONTEND = 1.25
PROCESSES = (2, 4)
DISTRIBUTIONS = ("lognormal", "bimodal")
#: each process's own step on its own batch; one data-parallel step over the job's batch
STEPS = ("own", "data-parallel")


def worker(pid: int, count: int, port: int, spec: dict) -> None:
    if hasattr(os, "sched_setaffinity"):  # before JAX starts its threads: they inherit the core
        cores = spec["cores"]
        os.sched_setaffinity(0, {cores[pid % len(cores)]})
    import jax

    together = spec.get("data_parallel", False) and not spec["quick"]
    if together:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if count > 1:
        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=count, process_id=pid,
                                   initialization_timeout=120)
    from bench_autobuckets import distribution, examples_of, jax_step, numpy_step, params

    from shapewatch.buckets import group_by_length, propose

    quick = spec["quick"]
    batch, n, cap = (QUICK["batch"], QUICK["examples"], QUICK["cap"]) if quick else (BATCH, spec["examples"], CAP)
    lengths = distribution(spec["dist"], n * count, cap)
    mine = examples_of(lengths)[pid::count]
    k = spec["k"]
    buckets = propose(lengths, k).boundaries if k else None  # the fixed plan of the whole job's data
    make = numpy_step if quick else jax_step
    step, p = make(), params()
    glob = lambda x: x  # noqa: E731 - each process's step on its own batch
    if together:  # one step over the job's batch: each process's rows, the gradient reduced across them
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        mesh = Mesh(np.array(jax.devices()), ("data",))
        rows, whole = NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())
        p = {name: jax.make_array_from_process_local_data(whole, v) for name, v in p.items()}
        glob = lambda x: jax.make_array_from_process_local_data(rows, np.asarray(x))  # noqa: E731
    warm = make()  # the process's first compile is slower: pay it before timing
    float(warm(p, glob(np.ones((batch, 3), np.int32)), glob(np.ones((batch, 3), bool)))[1])
    loader = group_by_length(mine, batch_size=batch, seed=0, buckets=buckets)
    if count > 1:  # every process starts its clock together
        from jax._src import distributed

        distributed.global_state.client.wait_at_barrier("bench_multiprocess_auto_start", 120_000)
    shapes: set = set()
    real = total = steps = 0
    start = time.perf_counter()
    for b in loader:
        p, loss = step(p, glob(b.data), glob(b.mask))
        float(loss)  # the loop waits for each step's loss
        shapes.add(b.data.shape)
        steps += 1
        real, total = real + int(b.mask.sum()), total + b.mask.size
    wall = time.perf_counter() - start
    print(json.dumps({"wall": wall, "steps": steps, "compiles": len(shapes), "real": real, "total": total,
                      "decisions": [str(d) for d in getattr(loader, "decisions", [])]}))
    if count > 1:
        jax.distributed.shutdown()


def job(count: int, spec: dict) -> dict:
    """One run of the job: the slowest process's wall, steps, compiles and the job's padding."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
           "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_multi_thread_eigen=false "
                        "intra_op_parallelism_threads=1".strip()}
    spec = {**spec, "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]}
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(i), str(count), str(port),
                               json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(count)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        if proc.returncode:
            raise RuntimeError(f"{spec} on {count} processes failed:\n{err[-3000:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    if len({o["steps"] for o in outs}) != 1:
        raise RuntimeError(f"the processes took different numbers of steps: {[o['steps'] for o in outs]}")
    real, total = sum(o["real"] for o in outs), sum(o["total"] for o in outs)
    return {"wall": max(o["wall"] for o in outs), "steps": outs[0]["steps"],
            "compiles": max(o["compiles"] for o in outs), "padding": 1 - real / total,
            "decisions": outs[0]["decisions"]}


def counted(dist: str, count: int, quick: bool, examples: int, k: int) -> str:
    """The steps the online planner counts for the fixed plan K of a job of ``count`` processes
    (``examples`` each), and (in brackets) one process's count: per bucket holding ``S`` of a
    process's ``n`` examples, ``S / rows + 1/2`` (its last batch partial), and in a job its fullest
    process's (``spread_of(count)`` standard deviations of a binomial count above: the others pad)."""
    from bench_autobuckets import distribution

    from shapewatch.buckets import propose
    from shapewatch.buckets._online.auto_planner import spread_of

    batch, n, cap = (QUICK["batch"], QUICK["examples"], QUICK["cap"]) if quick else (BATCH, examples, CAP)
    lengths = np.asarray(distribution(dist, n * count, cap))
    bounds = np.asarray(propose(lengths.tolist(), k).boundaries)
    share = np.bincount(np.searchsorted(bounds, lengths), minlength=bounds.size) / lengths.size
    held = n * share[share > 0]
    one = float(np.sum(held / batch + 0.5))
    job = one + spread_of(count) * float(np.sum(np.sqrt(held * (1 - share[share > 0])))) / batch
    return f"{job:.1f} ({one:.1f})"


def measure(dist: str, count: int, quick: bool, step: str = STEPS[0], examples: int = EXAMPLES,
            repeats: int = REPEATS, contend: bool = False) -> dict[int, dict]:
    """Auto (k=0) and the fixed plans K = 1..KS, ``repeats`` passes in rotating order; per
    strategy its first run's counts and the median of its walls. ``contend``: after the first
    pass, only auto and the Ks within ``CONTEND`` of the best first wall."""
    strategies = list(range((2 if quick else KS) + 1))
    runs: dict[int, list[dict]] = {k: [] for k in strategies}
    spec = {"dist": dist, "quick": quick, "data_parallel": step == STEPS[1], "examples": examples}
    for rep in range(1 if quick else repeats):
        if rep == 1 and contend:
            best = min(runs[k][0]["wall"] for k in strategies if k)
            strategies = [k for k in strategies if not k or runs[k][0]["wall"] <= CONTEND * best]
        order = strategies[rep % len(strategies):] + strategies[: rep % len(strategies)]
        for k in order:
            runs[k].append(job(count, {**spec, "k": k}))
    return {k: {**r[0], "walls": [x["wall"] for x in r], "wall": float(np.median([x["wall"] for x in r]))}
            for k, r in runs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 processes, a numpy step, one pass")
    parser.add_argument("--processes", type=int, nargs="+", choices=PROCESSES,
                        help=f"only jobs of these process counts (default: {' and '.join(map(str, PROCESSES))})")
    parser.add_argument("--distributions", nargs="+", choices=DISTRIBUTIONS,
                        help=f"only these length distributions (default: {' and '.join(DISTRIBUTIONS)})")
    parser.add_argument("--steps", nargs="+", choices=STEPS,
                        help=f"only these steps (default: {' and '.join(STEPS)}; --quick: {STEPS[0]})")
    parser.add_argument("--examples", type=int, default=EXAMPLES,
                        help=f"examples a process (default {EXAMPLES:,}: {EXAMPLES // BATCH} steps)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"passes (default {REPEATS})")
    parser.add_argument("--contend", action="store_true",
                        help=f"after the first pass, only auto and the Ks within {CONTEND}x of the best first wall")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(int(args.worker[0]), int(args.worker[1]), int(args.worker[2]), json.loads(args.worker[3]))
        return 0
    counts = tuple(args.processes or ((2,) if args.quick else PROCESSES))
    dists = tuple(args.distributions or (DISTRIBUTIONS[:1] if args.quick else DISTRIBUTIONS))
    print("### Many processes: auto-bucketing against the best fixed plan of the job\n")
    if args.examples < 1 or args.repeats < 1:
        parser.error(f"--examples and --repeats take a count >= 1; got {args.examples} and {args.repeats}")
    n = QUICK["examples"] if args.quick else args.examples
    print(f"{n:,} examples a process (the processes' shards of one data set); batches of {QUICK['batch'] if args.quick else BATCH} "
          f"per process; the loop waits for each step; job wall = the slowest process's, median of "
          f"{1 if args.quick else args.repeats} runs"
          + (f" (a K more than {CONTEND - 1:.0%} slower than the best in the first pass: once)" if args.contend else "")
          + (" (--quick: a numpy stand-in step)" if args.quick else "") + ".\n")
    rows, checks, notes = [], [], []
    for kind in args.steps or STEPS[: 1 if args.quick else None]:
        for dist in dists:
            for count in counts:
                res = measure(dist, count, args.quick, kind, args.examples, args.repeats, args.contend)
                best = min((k for k in res if k), key=lambda k: res[k]["wall"])
                for k, r in res.items():
                    label = "shapewatch auto" if k == 0 else f"fixed, K={k}" + (" (best)" if k == best else "")
                    rows.append([kind, dist, count, label, r["steps"],
                                 counted(dist, count, args.quick, args.examples, k) if k else "-",
                                 r["compiles"], f"{r['padding']:.0%}",
                                 f"{r['wall']:.2f}", "[" + ", ".join(f"{w:.2f}" for w in r["walls"]) + "]",
                                 f"{r['wall'] / res[best]['wall']:.3f}x"])
                checks.append((f"{kind} step, {dist}, {count} processes", res[0]["wall"] / res[best]["wall"]))
                notes.append(f"{kind} step, {dist}, {count} processes, auto decided: "
                             + "; ".join(res[0]["decisions"][:6]))
    print(table(["step", "distribution", "processes", "plan", "steps", "steps counted (one process)", "compiles",
                 "padding", "job wall s", "walls", "/ best fixed"], rows))
    print("\nTargets (auto within 1.05x of the best fixed plan of the same job):\n")
    print(table(["job", "auto / best fixed", "target", "met"],
                [[name, f"{v:.3f}", "1.05", "yes" if v <= 1.05 else "NO"] for name, v in checks]))
    print()
    for line in notes:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
