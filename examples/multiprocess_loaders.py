"""Data-parallel training over shapewatch's loaders in a job of several processes.

On one machine:

    python examples/multiprocess_loaders.py --processes 2 [--loader bucketed | --loader grain]

starts N processes of one jax.distributed job (CPU, gloo collectives, coordinator on
127.0.0.1). Each takes every N-th example of one data set of 2,400 lognormal lengths
(2..384), the last process 20% fewer, and feeds ``group_by_length(shard, batch_size=8)``
(or ``bucketed`` over its shard cut into batches of 8, or grain's
``GroupByLengthIterDataset`` over a ``MapDataset`` sharded with ``ShardByJaxProcess``)
into one jitted step through ``jax.make_array_from_process_local_data``. Every process
prints its steps, distinct shapes, examples and compiles; then process 0 the agreement.
"""

import argparse
import socket
import subprocess
import sys


def worker(index: int, count: int, address: str, loader_kind: str) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=index)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import shapewatch
    from shapewatch.buckets import bucketed, group_by_length

    shapewatch.configure(report="off")
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(40), 0.9, 2400), 2, 384).astype(int)
    examples = [np.ones(n, np.int32) for n in lengths]
    if loader_kind == "grain":
        import grain

        from shapewatch.buckets.grain import GroupByLengthIterDataset

        by_process = grain.sharding.ShardByJaxProcess()
        shard = examples[by_process.shard_index::by_process.shard_count]
    else:
        shard = examples[index::count]
    if index == count - 1:
        shard = shard[: int(len(shard) * 0.8)]
    if loader_kind == "group_by_length":
        loader = group_by_length(shard, batch_size=8, seed=0)
    elif loader_kind == "bucketed":
        loader = bucketed([shard[i:i + 8] for i in range(0, len(shard), 8)])
    else:
        loader = GroupByLengthIterDataset(grain.MapDataset.source(shard), batch_size=8, seed=0)

    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))

    @shapewatch.watched_jit
    def train_step(w, tokens, mask):
        def loss_fn(w):
            err = jnp.where(mask, (tokens * w - 1.0) ** 2, 0.0)
            return err.sum() / jnp.maximum(mask.sum(), 1)  # an all-padding batch counts 0

        loss, grad = jax.value_and_grad(loss_fn)(w)
        return w - 0.1 * grad, loss

    w = jax.device_put(jnp.float32(0.5), NamedSharding(mesh, PartitionSpec()))
    steps, shapes, seen = 0, set(), 0
    for batch in loader:
        tokens = jax.make_array_from_process_local_data(rows, np.asarray(batch.data, np.float32))
        mask = jax.make_array_from_process_local_data(rows, np.asarray(batch.mask))
        w, loss = train_step(w, tokens, mask)
        float(loss)
        steps += 1
        shapes.add(tuple(batch.data.shape))
        seen += int((batch.lengths > 0).sum())
    compiles = len(shapewatch.compile_records(train_step)())
    agreed = shapewatch.check_hosts_agree()
    print(f"process {index}: {steps} steps, {len(shapes)} shapes, {seen} of {len(shard)} examples, "
          f"{compiles} compiles, check_hosts_agree: {agreed}", flush=True)
    jax.distributed.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--loader", choices=("group_by_length", "bucketed", "grain"), default="group_by_length")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.processes, args.address, args.loader)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, __file__, "--processes", str(args.processes), "--address", f"127.0.0.1:{port}",
           "--loader", args.loader]
    procs = [subprocess.Popen([*cmd, "--worker", str(i)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) for i in range(args.processes)]
    try:
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    print("".join(line for out in outs for line in out.splitlines(keepends=True)
                  if not line.startswith("[Gloo]")), end="")  # gloo says when it connects
    return max(p.returncode for p in procs)


if __name__ == "__main__":
    raise SystemExit(main())
