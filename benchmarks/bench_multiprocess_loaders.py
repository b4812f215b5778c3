"""Benchmark: the loaders in a job of N processes beside one process on the same global data.

Each process of a real ``jax.distributed`` job (CPU, coordinator on 127.0.0.1) takes every
N-th example of one data set of lognormal lengths (2..384) and iterates ``group_by_length``
(batch_size=8, seed=0, ``max_buckets=4``: a plan made once from the first buffer's lengths)
or ``bucketed`` (``max_buckets=4``) over its shard cut into batches of 8; no training
step, so the agreement's own cost shows. Padding = 1 - real tokens / tokens of all batches
of all processes. "One process" loads the union of the N shards (the same global data, in
shard order). Rounds = exchanges through the coordination service; ms/round = the mean time
in one (waiting for the slowest process to read its buffer included); idle = the mean of 50
rounds of a small record with nothing else to wait for (the agreement's own cost). Fewest
possible = the largest shard's examples / 8: no loader that keeps the processes in step does
with fewer steps (the shortest shard pads the difference).
Usage: ``python benchmarks/bench_multiprocess_loaders.py [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(pid: int, count: int, port: int, spec: dict) -> None:
    import jax

    if count > 1:
        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=count, process_id=pid,
                                   initialization_timeout=60)
    import numpy as np

    from shapewatch.buckets import bucketed, group_by_length

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(40), 0.9, spec["examples"]), 2, 384).astype(int)
    of = spec.get("union_of") or count
    shards = [list(lengths[p::of]) for p in range(of)]
    if spec["uneven"] and of > 1:
        shards[-1] = shards[-1][: int(len(shards[-1]) * 0.8)]
    mine = [n for s in shards for n in s] if spec.get("union_of") else shards[pid]
    shard = [np.ones(n, np.int32) for n in mine]
    if spec["loader"] == "group_by_length":
        source = shard if not spec["stream"] else iter(shard)
        loader = group_by_length(source, batch_size=8, seed=0, buffer_size=spec["buffer"], max_buckets=4)
    else:
        loader = bucketed([shard[i:i + 8] for i in range(0, len(shard), 8)], max_buckets=4)
    start = time.perf_counter()
    steps = real = total = 0
    for b in loader:
        steps += 1
        real += int(b.lengths.sum())
        total += int(np.prod(b.mask.shape))
    s = getattr(loader._scheduler, "session", None)  # the key-value store's rounds, when in step
    idle = 0.0
    if s is not None:  # the agreement alone: rounds of a small record, nothing else to wait for
        from shapewatch.buckets._distributed.lockstep import Session

        probe = Session(s.client, s.me, s.count, "bench#probe")
        probe.exchange({"warm": True})
        t0 = time.perf_counter()
        for _ in range(50):
            probe.exchange({"full": {"64": 3, "128": 1}, "partial": {"256": 5}, "done": False, "empty": False})
        idle = (time.perf_counter() - t0) / 50
    print(json.dumps({"idle_s": idle, "examples": len(shard), "steps": steps, "real": real, "total": total, "seconds": time.perf_counter() - start,
                      "rounds": s.exchanges if s else 0, "wait_s": s.wait_s if s else 0.0,
                      "shapes": len({b for b in getattr(loader, "shapes", {})})}))
    if count > 1:
        jax.distributed.shutdown()


def job(count: int, spec: dict) -> list[dict]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(i), str(count), str(port), json.dumps(spec)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(count)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode:
            raise RuntimeError(err[-2000:])
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="600 examples, 1 and 2 processes")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(int(args.worker[0]), int(args.worker[1]), int(args.worker[2]), json.loads(args.worker[3]))
        return 0
    examples, counts = (600, (1, 2)) if args.quick else (2400, (1, 2, 3, 4))  # 1: the reference
    cases = [("group_by_length", False, 4096, False), ("group_by_length", True, 4096, False),
             ("group_by_length", True, 256, True), ("bucketed", True, 0, False)]
    if args.quick:
        cases = cases[1:3] + cases[3:]
    print("### Many processes: padding and steps beside one process on the same global data")
    print()
    print(f"{examples:,} lognormal lengths (2..384), batches of 8; uneven: the last process has 20% fewer.")
    print()
    print("| loader | shards | buffer | processes | steps | one process: steps | steps x processes / one's "
          "| fewest possible | padding | one process: padding | rounds | ms/round | ms/round, idle | shapes |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for loader, uneven, buffer, stream in cases:
        for n in counts[1:]:
            spec = {"loader": loader, "uneven": uneven, "buffer": buffer, "stream": stream, "examples": examples}
            outs = job(n, spec)
            one = job(1, {**spec, "union_of": n})[0]  # one process loading what the n load together
            real, total = sum(o["real"] for o in outs), sum(o["total"] for o in outs)
            rounds = outs[0]["rounds"]
            ms = 1000 * max(o["wait_s"] for o in outs) / rounds if rounds else 0.0
            kind = ("uneven" if uneven else "even") + (", stream" if stream else "")
            print(f"| {loader} | {kind} | {buffer if loader == 'group_by_length' else '-'} | {n} | "
                  f"{outs[0]['steps']} | {one['steps']} | {n * outs[0]['steps'] / one['steps']:.3f} | "
                  f"{max(-(-o['examples'] // 8) for o in outs)} | {1 - real / total:.1%} | "
                  f"{1 - one['real'] / one['total']:.1%} | {rounds} | {ms:.2f} | {1000 * outs[0]['idle_s']:.2f} | "
                  f"{outs[0]['shapes']} |")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
