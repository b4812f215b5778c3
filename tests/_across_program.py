"""A tiny training-like program for the across-run tests, run in its own process.

Set by the environment: ``CACHE_DIR`` (the persistent cache), ``MIN_COMPILE`` (the write
threshold, default JAX's), ``BODY`` (a constant in ``step``'s body), ``LENGTHS``
(comma-separated batch lengths), ``FILE_LIMIT`` (bytes a file written while ``step`` compiles
may hold: a full disk); for a jax.distributed job, the arguments
``PROCESS PROCESSES PORT``; ``WARM`` (a manifest to warm-start from, waited for before the calls). Prints one JSON line per compile of ``step``: kind and cache truth.
"""

import json
import os
import sys

import jax

if len(sys.argv) > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{sys.argv[3]}", num_processes=int(sys.argv[2]),
                               process_id=int(sys.argv[1]), initialization_timeout=60)
if os.environ.get("CACHE_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["CACHE_DIR"])
if os.environ.get("MIN_COMPILE"):
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ["MIN_COMPILE"]))

import jax.numpy as jnp  # noqa: E402

import shapewatch  # noqa: E402

BODY = float(os.environ.get("BODY", "1"))
warmup = shapewatch.warm(os.environ["WARM"]) if os.environ.get("WARM") else None


@shapewatch.watched_jit
def step(x):
    return (x * 2 + BODY).sum()


if warmup is not None:
    assert warmup.wait(120) and not warmup.failed and not warmup.skipped, (warmup.failed, warmup.skipped)
if os.environ.get("FILE_LIMIT"):  # a full disk while step compiles: JAX's write of the entry fails
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(os.environ["FILE_LIMIT"]), limits[1]))
for n in [int(v) for v in os.environ.get("LENGTHS", "8").split(",")]:
    step(jnp.ones((2, n)))
if os.environ.get("FILE_LIMIT"):
    resource.setrlimit(resource.RLIMIT_FSIZE, limits)
for m in shapewatch.misses(step):
    print(json.dumps({"kind": m.kind, "cache": m.cache, "thread": m.thread,
                      "signature": m.signature.short() if m.signature is not None else None},
                     default=str))
if len(sys.argv) > 1:
    jax.distributed.shutdown()
