"""Benchmark: time to the first N steps of a second run, with and without warm start.

Trains ``examples/variable_length_training.py``'s model with plain jit (each batch
padded to its own longest sequence, so each new length is a compile) in fresh
processes sharing one persistent cache directory (write threshold 0):

* first run: an empty cache; it writes the cache and the run manifest;
* second run: the cache filled, no warm start (each compile is a cache load);
* second run, warm start: the same, with ``shapewatch.warm(first run's manifest)``
  called before the step is made, so its signatures compile in two background
  threads while the program builds its data.

Each process times from just after its imports to the end of step N (the loss
read each step), and counts the compiles on the program's own thread. The second
runs alternate, and each row is the median of the repeats. Full: 16 batches of 8,
lengths up to 64, 3 repeats; ``--quick``: 8 batches of 4, 1 repeat.
Usage: ``python benchmarks/bench_warm_start.py [--quick]``
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import ROOT, format_seconds, jax_label, parse_args, table

MODES = ("first run (empty cache)", "second run, no warm start", "second run, warm start")


def child(mode: str, cache: str, manifest: str, quick: bool) -> None:
    """One run: train the first N steps and print its measurements as JSON."""
    import jax

    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import variable_length_training as example

    import shapewatch
    from shapewatch._monitor.records import COMPILING_KINDS

    start = time.perf_counter()
    warmup = shapewatch.warm(manifest) if mode == "warm" else None
    cfg = example.QUICK if quick else example.Config(batches=16, batch_size=8, max_len=64, median=20.0)
    step = example.make_step()
    examples = example.make_examples(cfg)  # the program builds its data while the warm-up compiles
    params = example.init_params()
    for tokens, mask in example.plain(examples, cfg):
        params, loss = step(params, tokens, mask)
        float(loss)
    jax.block_until_ready(params)
    elapsed = time.perf_counter() - start
    mine = [m for m in shapewatch.misses(step) if m.thread == "MainThread" and m.kind in COMPILING_KINDS]
    out = {"seconds": elapsed, "steps": cfg.batches, "compiles": len(mine),
           "hits": sum((m.cache or {}).get("status") == "hit" for m in mine),
           "signatures": len({m.signature for m in shapewatch.misses(step) if m.signature is not None}),
           "warmed": len(warmup.warmed) if warmup else 0, "skipped": len(warmup.skipped) if warmup else 0}
    print(json.dumps(out))


def run_child(mode: str, cache: str, manifest: str, quick: bool) -> dict:
    env = {**os.environ, "SHAPEWATCH_REPORT": "off", "SHAPEWATCH_MANIFEST": manifest, "JAX_PLATFORMS": "cpu"}
    if mode != "first":
        env["SHAPEWATCH_MANIFEST"] = f"{manifest}.{mode}.json"  # the first run's manifest stays as it wrote it
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, cache, manifest] + (["--quick"] * quick)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], sys.argv[4], "--quick" in sys.argv)
        return 0
    args = parse_args(__doc__.splitlines()[0], argv)
    repeats = 1 if args.quick else 3
    with tempfile.TemporaryDirectory(prefix="shapewatch-warm-") as tmp:
        cache, manifest = os.path.join(tmp, "cache"), os.path.join(tmp, "first.json")
        results: dict[str, list[dict]] = {"first": [run_child("first", cache, manifest, args.quick)]}
        for _ in range(repeats):
            for mode in ("second", "warm"):
                results.setdefault(mode, []).append(run_child(mode, cache, manifest, args.quick))
    first = statistics.median(r["seconds"] for r in results["first"])
    rows = []
    for label, mode in zip(MODES, ("first", "second", "warm")):
        rs = results[mode]
        seconds = statistics.median(r["seconds"] for r in rs)
        rows.append([label, format_seconds(seconds), f"{first / seconds:.2f}x",
                     f"{statistics.median(r['compiles'] for r in rs):g}",
                     f"{statistics.median(r['hits'] for r in rs):g}",
                     f"{rs[0]['warmed']}" if mode == "warm" else "-"])
    steps, sigs = results["first"][0]["steps"], results["first"][0]["signatures"]
    print("### Warm start: time to the first steps of a second run")
    print()
    print(f"jax {jax_label()}; {steps} steps of the variable-length example (plain jit: {sigs} signatures), "
          f"persistent cache with write threshold 0; median of {repeats} alternating repeat(s) per second-run row.")
    print()
    print(table(["run", f"time to step {steps}", "speed-up vs first run", "compiles on the program's thread",
                 "of them cache hits", "signatures warmed"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
