"""Benchmark: the loaders in a job of N processes beside one process on the same global data.

Each process of a real ``jax.distributed`` job (CPU, coordinator on 127.0.0.1) takes every
N-th example of one data set of lognormal lengths (2..384) and iterates ``group_by_length``
(batch_size=8, seed=0, ``max_buckets=4``: a plan made once from the first buffer's lengths)
or ``bucketed`` (``max_buckets=4``) over its shard cut into batches of 8; no training
step, so the agreement's own cost shows. Padding = 1 - real tokens / tokens of all batches
of all processes. Rounds = exchanges through the coordination service; ms/round = the mean
time in one (waits for the slowest process included).
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
    shard = [np.ones(n, np.int32) for n in lengths[pid::count]]
    if spec["uneven"] and count > 1 and pid == count - 1:
        shard = shard[: int(len(shard) * 0.8)]
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
    s = loader._session
    print(json.dumps({"steps": steps, "real": real, "total": total, "seconds": time.perf_counter() - start,
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
    examples, counts = (600, (1, 2)) if args.quick else (2400, (1, 2, 3, 4))
    cases = [("group_by_length", False, 4096, False), ("group_by_length", True, 4096, False),
             ("group_by_length", True, 256, True), ("bucketed", True, 0, False)]
    if args.quick:
        cases = cases[1:3] + cases[3:]
    print("### Many processes: padding and steps beside one process on the same global data")
    print()
    print(f"{examples:,} lognormal lengths (2..384), batches of 8; uneven: the last process has 20% fewer.")
    print()
    print("| loader | shards | buffer | processes | steps | steps x processes / one process's | padding "
          "| rounds | ms/round | shapes |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for loader, uneven, buffer, stream in cases:
        one = None
        for n in counts:
            spec = {"loader": loader, "uneven": uneven, "buffer": buffer, "stream": stream, "examples": examples}
            outs = job(n, spec)
            real, total = sum(o["real"] for o in outs), sum(o["total"] for o in outs)
            rounds = outs[0]["rounds"]
            one = one or outs[0]["steps"]
            ms = 1000 * max(o["wait_s"] for o in outs) / rounds if rounds else 0.0
            kind = ("uneven" if uneven else "even") + (", stream" if stream else "")
            print(f"| {loader} | {kind} | {buffer if loader == 'group_by_length' else '-'} | {n} | "
                  f"{outs[0]['steps']} | {n * outs[0]['steps'] / one:.3f} | {1 - real / total:.1%} | {rounds} | {ms:.2f} | {outs[0]['shapes']} |")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
