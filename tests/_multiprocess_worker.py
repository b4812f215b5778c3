"""One process of a real jax.distributed job, started by tests/test_multiprocess.py."""

import os
import sys
import warnings

import jax

pid, count, port, length = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=count, process_id=pid,
                           initialization_timeout=60)
import jax.numpy as jnp  # noqa: E402

import shapewatch  # noqa: E402

shapewatch.configure(json_path=os.path.join(sys.argv[5], "report-{process}.json"), report="off")


@shapewatch.watched_jit
def train_step(batch):
    return batch["tokens"].sum()


train_step({"tokens": jnp.ones((4, length))})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    agreed = shapewatch.check_hosts_agree(on_divergence="warn", timeout_ms=60_000)
print(f"process {pid}: agreed={agreed}")
for w in caught:
    print(f"{w.category.__name__}: {w.message}")
sys.stdout.flush()
jax.distributed.shutdown()
