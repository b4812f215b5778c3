"""Divergent compiles across processes, caught by shapewatch.check_hosts_agree.

On one machine:

    python examples/multiprocess.py --processes 2

starts two processes of one jax.distributed job (coordinator on 127.0.0.1); process 1 gets
batches one token longer than the others, as a host with a different data shard would.
On real hosts, run the worker part on each host with the coordinator's address, the number of
processes and each host's index (or let jax.distributed.initialize() detect them on a cluster).
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import warnings


def worker(index: int, count: int, address: str, out_dir: str) -> None:
    import jax

    jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=index)
    import jax.numpy as jnp

    import shapewatch

    shapewatch.configure(json_path=os.path.join(out_dir, "report-{process}.json"), report="off")

    @shapewatch.watched_jit
    def train_step(batch):
        return (batch["tokens"] ** 2).sum()

    length = 128 + (1 if index == 1 else 0)  # host 1's data shard gives it one more token
    for _ in range(3):
        train_step({"tokens": jnp.ones((8, length))})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shapewatch.check_hosts_agree(on_divergence="warn")
    if index == 0:
        for w in caught:
            print(w.message)
    jax.distributed.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.processes, args.address, args.out)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tempfile.mkdtemp(prefix="shapewatch-mp-")
    cmd = [sys.executable, __file__, "--processes", str(args.processes), "--address", f"127.0.0.1:{port}",
           "--out", out]
    procs = [subprocess.Popen([*cmd, "--worker", str(i)], stderr=subprocess.DEVNULL) for i in range(args.processes)]
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    reports = [os.path.join(out, f"report-{i}.json") for i in range(args.processes)]
    print(f"\n$ shapewatch merge {' '.join(os.path.basename(r) for r in reports)}")
    subprocess.run([sys.executable, "-m", "shapewatch", "merge", *reports], check=False)
    return max(codes)


if __name__ == "__main__":
    raise SystemExit(main())
