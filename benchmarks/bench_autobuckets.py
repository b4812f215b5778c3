"""Benchmark: bucketing with no numbers against every fixed strategy and a hindsight oracle.

A small attention model (embedding, one attention layer, tied output; SGD) trains on
the same examples in the same order under each strategy, each run in its own process
(each K of the oracle too): plain jit (each batch padded to its own
maximum), pad to the maximum, powers of two, every 64 tokens (tf.data's
``bucket_by_sequence_length`` as commonly set up), 8 quantile buckets, the best fixed
number of buckets in hindsight (``propose(all lengths, K)`` for K = 1..16, each timed;
a K whose compiles alone, at the fastest compile measured, exceed the best total so far
cannot win and is not run) and ``group_by_length(examples, batch_size=16)``: shapewatch
auto, no numbers. Auto and the oracle's contending Ks (those within ``CONTEND`` of the best
in a first pass), which the goal compares, run ``REPEATS`` times in interleaved passes and
count by their median wall; the others run once.
Three loops (``LOOPS``), each against its own best fixed plan in hindsight: one that waits
for each step's loss (as a loop that logs it does; every strategy runs there), one that
waits every 50 steps, and one that waits only at the end (JAX dispatches asynchronously:
there the time of a step shows up only where the loop waits); plain jit runs in all three.
Distributions: lognormal, heavy-tailed (Pareto), bimodal, and a real one: the word
counts of the paragraphs of this Python's standard library source, read at run time.

A second table puts packing beside bucketing on a step that honours segments (attention masked
by ``segment_ids``: a token attends only within its own example; the loss counts next tokens of
the same example; a bucketed batch is one segment per row, so the one step serves every
strategy): plain jit, the oracle and shapewatch auto as above, ``group_by_length(...,
strategy="pack")`` and grain's ``FirstFitPackIterDataset`` (``num_packing_bins`` = the batch's
rows, then ``batch_and_pad``), both in rows of the longest length, on a short and a long
length distribution, in the three loops. The packers run with auto in its interleaved passes.
``shapewatch auto (bucket or pack)`` (``strategy="auto"``) runs there too once
``group_by_length`` accepts it (until then it is skipped, and a note says so).

``--quick`` runs the same pipeline in one process with a numpy stand-in for the jitted
step (a new shape sleeps 20 ms as its "compile"), to check it runs and prints the table.
Usage: ``python benchmarks/bench_autobuckets.py [--quick] [--packing | --bucketing] [--repeats N]``
(``--packing``: the packing table alone; ``--bucketing``: the bucketing table alone; ``--repeats N``:
N interleaved passes instead of ``REPEATS``)
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator

import numpy as np
from _common import ROOT, table

from shapewatch.buckets import group_by_length, propose

try:  # grain is optional: without it, its packing row is skipped (a note says so)
    import grain
    from grain.experimental import FirstFitPackIterDataset, batch_and_pad
except ImportError:  # pragma: no cover - the benchmark's environment has grain
    grain = None

BATCH, BATCHES, CAP, VOCAB, DIM = 16, 100, 512, 64, 16
QUICK = dict(batch=4, batches=6, cap=48)
ORACLE_KS = range(1, 17)
REPEATS = 9
#: A K whose first wall is within this factor of the best first wall runs in every pass.
CONTEND = 1.25
STRATEGIES = ["plain jit", "pad to max", "powers of two", "every 64", "quantile (8)",
              "oracle (best K)", "shapewatch auto"]
#: How often the training loop waits for a step's loss (None: only at the end).
LOOPS = {"every step": 1, "every 50 steps": 50, "only at the end": None}
#: The packing table: its distributions and the strategies that run with auto in every pass.
PACK_DISTRIBUTIONS = ["short lognormal", "long lognormal"]
AUTO_EITHER = "shapewatch auto (bucket or pack)"
PACKERS = ["shapewatch pack", "grain first-fit pack", AUTO_EITHER]


# ------------------------------------------------------------------ data


def stdlib_lengths() -> np.ndarray:
    """Words per paragraph (blank-line separated) of the standard library's .py files."""
    root = sysconfig.get_paths()["stdlib"]
    out: list[int] = []
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            with open(os.path.join(root, name), encoding="utf-8", errors="replace") as fh:
                out += [len(p.split()) for p in fh.read().split("\n\n") if p.strip()]
    return np.array(out, dtype=np.int64)


def distribution(name: str, n: int, cap: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = cap / 512
    if name == "lognormal":
        raw = rng.lognormal(np.log(48 * scale), 1.0, n)
    elif name == "heavy-tailed":
        raw = 6 * scale * (1 + rng.pareto(1.1, n))
    elif name == "bimodal":
        raw = np.where(rng.random(n) < 0.7, rng.normal(40 * scale, 8 * scale, n),
                       rng.normal(380 * scale, 40 * scale, n))
    elif name == "short lognormal":  # many examples to a row of the longest length
        raw = rng.lognormal(np.log(24 * scale), 0.8, n)
    elif name == "long lognormal":  # one or two to a row
        raw = rng.lognormal(np.log(256 * scale), 0.4, n)
    else:
        raw = rng.choice(stdlib_lengths(), n) * scale
    return np.clip(raw, 2, cap).astype(np.int64)


DISTRIBUTIONS = ["lognormal", "heavy-tailed", "bimodal", "stdlib paragraphs (real)"]


def examples_of(lengths: np.ndarray, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    return [rng.integers(1, VOCAB, n).astype(np.int32) for n in lengths]


# ------------------------------------------------------------------ strategies


def padded(rows: list[np.ndarray], length: int) -> tuple[np.ndarray, np.ndarray]:
    out = np.zeros((len(rows), length), np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, np.arange(length) < np.array([len(r) for r in rows])[:, None]


def batches(strategy: str, examples: list[np.ndarray], batch: int, k: int = 0) -> Iterator:
    lengths = np.array([len(e) for e in examples])
    top = int(lengths.max())
    chunks = [examples[i : i + batch] for i in range(0, len(examples), batch)]
    if strategy in ("plain jit", "pad to max"):
        for rows in chunks:
            yield padded(rows, max(map(len, rows)) if strategy == "plain jit" else top)
        return
    given: dict[str, object] = {
        "powers of two": [1 << p for p in range(1, top.bit_length() + 1)],
        "every 64": list(range(64, top + 64, 64)),
        "quantile (8)": propose(lengths, 8, strategy="quantile").boundaries,
        "oracle (best K)": propose(lengths, k).boundaries if k else None,
    }
    it = group_by_length(examples, batch_size=batch, buckets=given.get(strategy), seed=0)
    for b in it:
        yield b.data, b.mask
    if strategy == "shapewatch auto":
        batches.decisions = [str(d) for d in it.decisions]  # type: ignore[attr-defined]


def auto_either_accepted() -> bool:
    """Whether ``group_by_length`` takes ``strategy="auto"`` (choosing bucketing or packing)."""
    try:
        group_by_length([np.arange(2)], batch_size=1, strategy="auto")
    except ValueError as exc:
        if "unknown strategy 'auto'" in str(exc):
            return False
        raise
    return True


def packers() -> tuple[list[str], list[str]]:
    """The packing strategies this environment runs, and a note for each one skipped."""
    run, skipped = [], []
    for s in PACKERS:
        if s == "grain first-fit pack" and grain is None:
            skipped.append(f"{s}: skipped (grain is not installed)")
        elif s == AUTO_EITHER and not auto_either_accepted():
            skipped.append(f"{s}: skipped (group_by_length does not accept strategy='auto' yet)")
        else:
            run.append(s)
    return run, skipped


def grain_packed(examples: list[np.ndarray], batch: int, row: int) -> Iterator:
    """grain's own packing: first-fit into ``batch`` bins of ``row``, batched and padded to ``batch``."""
    ds = grain.MapDataset.source(examples).map(lambda e: {"inputs": e}).to_iter_dataset()
    ds = FirstFitPackIterDataset(ds, length_struct={"inputs": row}, num_packing_bins=batch, seed=0)
    for b in ds.batch(batch, batch_fn=functools.partial(batch_and_pad, batch_size=batch)):
        yield b["inputs"], b["inputs_segment_ids"]


def segment_batches(strategy: str, examples: list[np.ndarray], batch: int, k: int = 0) -> Iterator:
    """``(tokens, segment_ids)``: a bucketing strategy's batches with one segment per row, or a
    packer's rows of the longest length."""
    row = max(map(len, examples))
    if strategy == "grain first-fit pack":
        yield from grain_packed(examples, batch, row)
    elif strategy in ("shapewatch pack", AUTO_EITHER):
        kw = {"strategy": "pack", "row_length": row} if strategy == "shapewatch pack" else {"strategy": "auto"}
        it = group_by_length(examples, batch_size=batch, seed=0, **kw)
        for b in it:
            yield b.data, b.segment_ids
        if strategy == AUTO_EITHER:
            batches.decisions = [str(d) for d in it.decisions]  # type: ignore[attr-defined]
    else:
        for tokens, mask in batches(strategy, examples, batch, k):
            yield tokens, mask.astype(np.int32)


# ------------------------------------------------------------------ steps


def jax_step(segments: bool = False) -> Callable:
    """The jitted training step over ``(tokens, mask)``; with ``segments``, over ``(tokens,
    segment_ids)``: a token attends to its own example's tokens only, and predicts the next
    token only within its example."""
    import jax
    import jax.numpy as jnp

    def loss_fn(p, tokens, mask):
        x = p["emb"][tokens]
        s = (x @ p["wq"]) @ x.transpose(0, 2, 1) / np.sqrt(DIM)
        if segments:
            seg = mask
            sees = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] > 0)
            valid = ((seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)).astype(jnp.float32)
        else:
            sees, valid = mask[:, None, :], mask[:, 1:].astype(jnp.float32)
        x = x + jax.nn.softmax(jnp.where(sees, s, -1e9), -1) @ x
        logp = jax.nn.log_softmax(x[:, :-1] @ p["emb"].T)
        nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
        return (nll * valid).sum() / jnp.maximum(valid.sum(), 1.0)

    def step(p, tokens, mask):
        loss, g = jax.value_and_grad(loss_fn)(p, tokens, mask)
        return jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g), loss

    return jax.jit(step)


def numpy_step(segments: bool = False) -> Callable:
    seen: set = set()

    def step(p, tokens, mask):
        if tokens.shape not in seen:  # the stand-in "compile"
            seen.add(tokens.shape)
            time.sleep(0.02)
        x = p["emb"][tokens]
        s = x @ x.transpose(0, 2, 1)
        sees = (mask[:, :, None] == mask[:, None, :]) & (mask[:, None, :] > 0) if segments else mask[:, None, :]
        return p, float(np.where(sees, s, 0).mean())

    return step


def params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"emb": (rng.standard_normal((VOCAB, DIM)) / 4).astype(np.float32),
            "wq": (rng.standard_normal((DIM, DIM)) / 4).astype(np.float32)}


def train(strategy: str, examples: list[np.ndarray], batch: int, make: Callable, k: int = 0,
          loop: str = "every step", segments: bool = False) -> dict:
    """One training loop; with ``segments``, the step takes ``segment_ids`` for the mask."""
    step, p = make(), params()
    warm = make()  # the process's first compile is slower: pay it before timing
    warm(p, np.ones((batch, 3), np.int32), np.ones((batch, 3), np.int32 if segments else bool))
    every = LOOPS[loop]
    times: dict[tuple, list[float]] = {}
    real = total = 0
    start = time.perf_counter()
    source = segment_batches if segments else batches
    for i, (tokens, mask) in enumerate(source(strategy, examples, batch, k)):
        t0 = time.perf_counter()
        p, loss = step(p, tokens, mask)
        if every is not None and (i + 1) % every == 0:
            float(loss)  # a loop that logs its loss waits for the step
        times.setdefault(tokens.shape, []).append(time.perf_counter() - t0)
        real, total = real + int(np.count_nonzero(mask)), total + mask.size
    float(loss)  # the end of the loop waits for the last step (and so for every step)
    wall = time.perf_counter() - start
    # a compile: a shape's first step less the median of its later ones (or all of it); a
    # compile is paid on the host at dispatch, so it is seen whatever the loop waits on
    compile_s = [t[0] - (float(np.median(t[1:])) if len(t) > 1 else 0.0) for t in times.values()]
    return {"wall": wall, "compiles": len(times), "padding": 1 - real / total, "k": k,
            "fastest_compile": min(compile_s),
            "decisions": getattr(batches, "decisions", [])}


def run_oracle_and_auto(run: Callable[[str, int], dict],
                        also: list[str] | None = None) -> tuple[dict, dict, dict[str, dict]]:
    """The best fixed K in hindsight, and shapewatch auto, in ``REPEATS`` interleaved passes
    (a slow spell of the machine falls on both). Pass 1 tries K = 1.. until a K's compiles
    alone (at the fastest compile measured) exceed the best total so far; the Ks within
    ``CONTEND`` of the best first wall run again in every later pass, with auto, in an order
    that rotates from pass to pass. A wall is the median of its runs; the oracle is the K with
    the least median (the least of several noisy medians: if anything, too fast). The
    strategies ``also`` run with auto in every pass (their results: the third value)."""
    walls: dict[int, list[float]] = {}
    first: dict[int, dict] = {}
    autos: list[dict] = []
    others: dict[str, list[dict]] = {s: [] for s in also or []}
    fastest = np.inf
    autos.append(run("shapewatch auto", 0))
    for s in others:
        others[s].append(run(s, 0))
    for k in ORACLE_KS:
        if walls and k * fastest > min(w[0] for w in walls.values()):
            break  # its compiles alone exceed the best total: it cannot win
        r = run("oracle (best K)", k)
        walls[k], first[k] = [r["wall"]], r
        fastest = min(fastest, r["fastest_compile"])
    best_first = min(w[0] for w in walls.values())
    contenders = [k for k, w in walls.items() if w[0] <= CONTEND * best_first]
    for rep in range(1, REPEATS):
        order: list[int | str] = [0, *contenders, *others]
        order = order[rep % len(order):] + order[: rep % len(order)]
        for k in order:
            if isinstance(k, str):
                others[k].append(run(k, 0))
            elif k == 0:
                autos.append(run("shapewatch auto", 0))
            else:
                walls[k].append(run("oracle (best K)", k)["wall"])
    k_best = min(contenders, key=lambda k: float(np.median(walls[k])))
    oracle = {**first[k_best], "wall": float(np.median(walls[k_best])), "walls": walls[k_best],
              "tried": [f"K={k}: {float(np.median(w)):.2f} s" + ("" if len(w) > 1 else " (once)")
                        for k, w in walls.items()]}
    return oracle, _median_of(autos), {s: _median_of(rs) for s, rs in others.items()}


def _median_of(runs: list[dict]) -> dict:
    """The first run, its wall the median of all (``walls``: each)."""
    walls = [r["wall"] for r in runs]
    return {**runs[0], "wall": float(np.median(walls)), "walls": walls}


# ------------------------------------------------------------------ driver


def worker(dist: str, strategy: str, k: int, loop: str, segments: bool = False) -> None:
    lengths = distribution(dist, BATCH * BATCHES, CAP)
    make = functools.partial(jax_step, segments=segments)
    print(json.dumps(train(strategy, examples_of(lengths), BATCH, make, k, loop, segments)))


def in_subprocess(dist: str, strategy: str, k: int = 0, loop: str = "every step",
                  segments: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", dist, strategy, str(k), loop,
         "segments" if segments else "mask"],
        capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        raise RuntimeError(f"{dist} / {strategy} / {loop} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(dist: str, loop: str, quick: bool,
            also: list[str] | None = None) -> tuple[np.ndarray, dict[str, dict]]:
    """Every strategy on one distribution and loop (the fixed ones other than plain jit only
    in the loop that waits on every step): once each, the oracle and auto ``REPEATS`` times
    (the goal compares those two). With ``also`` (the packers): on the step that honours
    segments, plain jit once, then the oracle, auto and ``also``, each of those ``REPEATS`` times."""
    segments = also is not None
    if quick:
        lengths = distribution(dist, QUICK["batch"] * QUICK["batches"], QUICK["cap"])
        ex = examples_of(lengths)
        make = functools.partial(numpy_step, segments=segments)

        def one(s: str, k: int = 0) -> dict:
            return train(s, ex, QUICK["batch"], make, k, loop, segments)
    else:
        lengths = distribution(dist, BATCH * BATCHES, CAP)

        def one(s: str, k: int = 0) -> dict:
            return in_subprocess(dist, s, k, loop, segments)
    fixed = STRATEGIES[:-2] if LOOPS[loop] == 1 and not segments else STRATEGIES[:1]
    res = {s: one(s) for s in fixed}
    res["oracle (best K)"], res["shapewatch auto"], others = run_oracle_and_auto(one, also)
    return lengths, res | others


def _rows(dist: str, loop: str, res: dict[str, dict]) -> list[list]:
    oracle, plain = res["oracle (best K)"], res["plain jit"]
    return [[dist, loop, f"{s}, K={r['k']}" if s.startswith("oracle") else s, r["compiles"],
             f"{r['padding']:.0%}", f"{r['wall']:.2f}", f"{r['wall'] / oracle['wall']:.2f}x",
             f"{plain['wall'] / r['wall']:.1f}x"] for s, r in res.items()]


def _walls(r: dict) -> str:
    return "[" + ", ".join(f"{w:.2f}" for w in r.get("walls", [r["wall"]])) + "]"


HEADERS = ["distribution", "loop waits", "strategy", "compiles", "padding", "wall s", "vs oracle",
           "plain / this"]


def measure_all(distributions: list[str], quick: bool, also: list[str] | None = None) -> dict:
    """``measure`` for every distribution and loop: the loop that never waits first (the one
    auto could not see before), each printed on stderr as it ends."""
    done = {}
    for loop in reversed(LOOPS):
        for dist in distributions:
            done[dist, loop] = measure(dist, loop, quick, also)
            for line in _rows(dist, loop, done[dist, loop][1]):
                print(" | ".join(map(str, line)), file=sys.stderr, flush=True)
    return done


def _shape_of(lengths: np.ndarray) -> str:
    return f"median {int(np.median(lengths))}, p99 {int(np.percentile(lengths, 99))}"


def bucketing_section(quick: bool, mode: str, cap: int) -> str:
    done = measure_all(DISTRIBUTIONS, quick)
    rows, notes = [], []
    for dist in DISTRIBUTIONS:
        for loop in LOOPS:
            lengths, res = done[dist, loop]
            oracle, auto = res["oracle (best K)"], res["shapewatch auto"]
            rows += _rows(dist, loop, res)
            ratio = auto["wall"] / oracle["wall"]
            notes.append(
                f"- {dist}, waits {loop} ({_shape_of(lengths)}): auto / oracle = {ratio:.3f} (goal <= 1.05: "
                f"{'met' if ratio <= 1.05 else 'missed'}; runs {_walls(auto)} against "
                f"{_walls(oracle)}); oracle tried {', '.join(oracle['tried'])}; auto decided: "
                + "; ".join(auto["decisions"]))
    return "\n".join([
        "### Auto-bucketing with no numbers: every strategy against the best fixed plan in hindsight", "",
        f"{mode}, lengths capped at {cap}; wall = the whole training "
        "loop (compiles included), each run in its own process; oracle and auto: the median of "
        f"{REPEATS} interleaved runs (a K more than {CONTEND - 1:.0%} slower than the best in the first "
        "pass: once); vs oracle and plain / this: against the same loop's.", "",
        table(HEADERS, rows), "", *notes])


def _goal(res: dict[str, dict]) -> str:
    """The goal of ``strategy="auto"`` (bucket or pack): its wall within 1.05x of the better of
    bucketing (shapewatch auto) and packing (shapewatch pack), and against the oracle too."""
    if AUTO_EITHER not in res or "shapewatch pack" not in res:
        return ""
    best = min(("shapewatch auto", "shapewatch pack"), key=lambda s: res[s]["wall"])
    ratio = res[AUTO_EITHER]["wall"] / res[best]["wall"]
    oracle = res[AUTO_EITHER]["wall"] / res["oracle (best K)"]["wall"]
    return (f"{AUTO_EITHER} / the better of bucketing and packing ({best}) = {ratio:.3f} (goal <= 1.05: "
            f"{'met' if ratio <= 1.05 else 'missed'}; / oracle = {oracle:.3f}); ")


def packing_section(quick: bool, mode: str, cap: int) -> str:
    also, skipped = packers()
    done = measure_all(PACK_DISTRIBUTIONS, quick, also)
    rows, notes = [], []
    for dist in PACK_DISTRIBUTIONS:
        for loop in LOOPS:
            lengths, res = done[dist, loop]
            rows += _rows(dist, loop, res)
            auto = res["shapewatch auto"]
            vs = [f"{s} / shapewatch auto = {res[s]['wall'] / auto['wall']:.3f} (runs {_walls(res[s])})"
                  for s in also]
            decided = f"; {AUTO_EITHER} decided: " + "; ".join(res[AUTO_EITHER]["decisions"]) if (
                AUTO_EITHER in res) else ""
            notes.append(f"- {dist}, waits {loop} ({_shape_of(lengths)}; rows of {int(lengths.max())}): "
                         + _goal(res) + "; ".join(vs) + f"; auto's runs {_walls(auto)}{decided}")
    return "\n".join([
        "### Packing beside bucketing, on a step that honours segments", "",
        f"{mode}, lengths capped at {cap}; the step masks attention by segment_ids (a token sees "
        "its own example only) and a bucketed batch is one segment per row, so every strategy runs "
        "the same step; packers: rows of the longest length, as many rows a batch as bucketing's "
        "batch (shapewatch: group_by_length(strategy='pack', row_length=it); grain: "
        "FirstFitPackIterDataset(num_packing_bins=rows) then batch_and_pad); padding: cells of "
        "segment 0. Oracle, auto and the packers: the median of "
        f"{REPEATS} interleaved runs; wall, vs oracle and plain / this as above.", "",
        table(HEADERS, rows), "", *notes, *(f"- {note}" for note in skipped)])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:  # the usage, and nothing run
        print(__doc__.split("Usage: ")[1].strip())
        return 0
    if argv[:1] == ["--worker"]:
        worker(argv[1], argv[2], int(argv[3]), argv[4], argv[5:6] == ["segments"])
        return 0
    quick = "--quick" in argv
    mode = ("quick: numpy stand-in step, " if quick else "") + (
        f"{QUICK['batches'] if quick else BATCHES} batches of {QUICK['batch'] if quick else BATCH}")
    cap = QUICK["cap"] if quick else CAP
    if "--repeats" in argv:  # fewer interleaved passes (a shorter run; the table says how many)
        global REPEATS
        REPEATS = int(argv[argv.index("--repeats") + 1])
    if "--packing" in argv and "--bucketing" in argv:
        print("--packing and --bucketing each print one table alone: pass one, or neither for both",
              file=sys.stderr)
        return 2
    if "--packing" not in argv:  # --packing: the packing table alone
        print(bucketing_section(quick, mode, cap))
        print()
    if "--bucketing" not in argv:  # --bucketing: the bucketing table alone
        print(packing_section(quick, mode, cap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
