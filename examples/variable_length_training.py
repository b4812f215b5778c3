"""Train a tiny attention model on variable-length sequences, five ways, and compare.

Every distinct batch shape is a compile under ``jax.jit``. This trains the same
small model (embedding, one attention layer, MLP; plain SGD with ``jax.grad``)
on the same synthetic long-tailed lengths (lognormal, clipped) with five padding
strategies, each under ``shapewatch.watched_jit``:

* plain jit: each batch padded to its own longest sequence;
* pad to the maximum length of the data;
* power-of-two padding of each batch;
* quantile buckets (``propose(strategy="quantile")``) applied with ``bucketed``;
* shapewatch: ``group_by_length(examples, batch_size=16)``, with no numbers: it
  measures the step as it trains (linked to the watched step, the compile seconds
  come from shapewatch's own records) and re-plans online.

It prints one Markdown table, then the shapewatch report of the plain-jit run
(the varying axis and the buckets it proposes).

Usage: ``python examples/variable_length_training.py [--full]`` (quick by default).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

if __package__ in (None, ""):  # run as a script from a source tree
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import shapewatch  # noqa: E402
from shapewatch._monitor.records import COMPILING_KINDS  # noqa: E402
from shapewatch.buckets import bucketed, group_by_length, propose  # noqa: E402

VOCAB, DIM, LR = 64, 32, 0.05


@dataclass(frozen=True)
class Config:
    batches: int
    batch_size: int
    max_len: int
    median: float
    sigma: float = 0.9
    seed: int = 0


QUICK = Config(batches=8, batch_size=4, max_len=48, median=14.0)
FULL = Config(batches=200, batch_size=16, max_len=512, median=48.0)


# ------------------------------------------------------------------ data and model


def make_examples(cfg: Config) -> list[np.ndarray]:
    """``batches * batch_size`` token sequences, lengths lognormal clipped to [8, max_len]."""
    rng = np.random.default_rng(cfg.seed)
    n = cfg.batches * cfg.batch_size
    lengths = np.clip(rng.lognormal(np.log(cfg.median), cfg.sigma, n), 8, cfg.max_len).astype(int)
    starts = rng.integers(1, VOCAB, n)
    strides = rng.integers(1, 4, n)
    return [((s + k * np.arange(m)) % (VOCAB - 1) + 1).astype(np.int32)
            for m, s, k in zip(lengths, starts, strides)]


def init_params(seed: int = 0) -> dict[str, np.ndarray]:
    """Parameters in numpy (no compiles outside the train step)."""
    rng = np.random.default_rng(seed)
    shapes = {
        "emb": (VOCAB, DIM), "wq": (DIM, DIM), "wk": (DIM, DIM), "wv": (DIM, DIM),
        "wo": (DIM, DIM), "w1": (DIM, 4 * DIM), "w2": (4 * DIM, DIM), "out": (DIM, VOCAB),
    }
    return {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
            for k, s in shapes.items()}


def loss_fn(params: dict[str, jax.Array], tokens: jax.Array, mask: jax.Array) -> jax.Array:
    """Masked next-token cross-entropy of a one-layer causal attention model."""
    x = params["emb"][tokens]
    q, k, v = x @ params["wq"], x @ params["wk"], x @ params["wv"]
    length = tokens.shape[1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    allowed = causal[None] & mask[:, None, :]
    scores = jnp.where(allowed, q @ k.transpose(0, 2, 1) / np.sqrt(DIM), -1e9)
    x = x + (jax.nn.softmax(scores, axis=-1) @ v) @ params["wo"]
    x = x + jax.nn.gelu(x @ params["w1"]) @ params["w2"]
    logits = x[:, :-1] @ params["out"]
    targets = tokens[:, 1:]
    valid = (mask[:, :-1] & mask[:, 1:]).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return (nll * valid).sum() / jnp.maximum(valid.sum(), 1.0)


def make_step() -> Callable:
    """A fresh watched train step (a new function object: nothing cached from other runs)."""

    def train_step(params, tokens, mask):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, mask)
        return jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads), loss

    return shapewatch.watched_jit(train_step)


# ------------------------------------------------------------------ strategies


def chunks(examples: list[np.ndarray], size: int) -> Iterator[list[np.ndarray]]:
    for i in range(0, len(examples), size):
        yield examples[i : i + size]


def pad_rows(rows: list[np.ndarray], length: int) -> tuple[np.ndarray, np.ndarray]:
    out = np.zeros((len(rows), length), np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, np.arange(length) < np.array([len(r) for r in rows])[:, None]


def plain(examples, cfg, **_):
    for rows in chunks(examples, cfg.batch_size):
        yield pad_rows(rows, max(len(r) for r in rows))


def to_max(examples, cfg, **_):
    longest = max(len(e) for e in examples)
    for rows in chunks(examples, cfg.batch_size):
        yield pad_rows(rows, longest)


def pow2(examples, cfg, **_):
    for rows in chunks(examples, cfg.batch_size):
        yield pad_rows(rows, 1 << (max(len(r) for r in rows) - 1).bit_length())


def quantile(examples, cfg, **_):
    maxima = [max(len(r) for r in rows) for rows in chunks(examples, cfg.batch_size)]
    plan = propose(maxima, max_buckets=8, strategy="quantile", overflow="extend")
    for b in bucketed(chunks(examples, cfg.batch_size), buckets=plan):
        yield b.data, b.mask


def grouped(examples, cfg, *, step=None, loaders=None):
    """No numbers: the loader measures the step; ``step`` links its compile records."""
    records = None if step is None else shapewatch.compile_records(step)
    it = group_by_length(examples, batch_size=cfg.batch_size, seed=cfg.seed,
                         compile_records=records)
    if loaders is not None:
        loaders.append(it)
    for b in it:
        yield b.data, b.mask


@dataclass
class Result:
    name: str
    steps: int
    compiles: int
    padding: float
    compile_s: float
    wall_s: float
    report: str = ""


def train(name: str, batches: Iterable[tuple[np.ndarray, np.ndarray]]
          | Callable[[Callable], Iterable[tuple[np.ndarray, np.ndarray]]]) -> Result:
    """Train from fresh parameters over ``batches`` (or ``batches(step)``); measure compiles,
    padding, time. The loop reads the loss each step, as a loop that logs it does."""
    shapewatch.reset()
    step = make_step()
    if callable(batches):
        batches = batches(step)
    params = init_params()
    real = padded = steps = 0
    loss = None
    start = time.perf_counter()
    for tokens, mask in batches:
        params, loss = step(params, tokens, mask)
        float(loss)
        real += int(np.asarray(mask).sum())
        padded += int(np.asarray(mask).size)
        steps += 1
    jax.block_until_ready((params, loss))
    wall = time.perf_counter() - start
    misses = shapewatch.misses(step)
    compiles = sum(m.kind in COMPILING_KINDS for m in misses)
    return Result(name, steps, compiles, 1 - real / padded, sum(m.total_s for m in misses), wall,
                  shapewatch.report().to_text())


def run_all(cfg: Config) -> tuple[list[Result], str]:
    """All five strategies in one process; returns the results and a one-line note."""
    examples = make_examples(cfg)
    results = [train("plain jit (pad to batch max)", plain(examples, cfg))]
    results.append(train("pad to max length", to_max(examples, cfg)))
    results.append(train("power-of-two padding", pow2(examples, cfg)))
    results.append(train("quantile buckets (8)", quantile(examples, cfg)))
    loaders: list = []
    results.append(train("shapewatch group_by_length, no numbers",
                         lambda step: grouped(examples, cfg, step=step, loaders=loaders)))
    plan = loaders[0].plan
    shapewatch.reset()  # nothing left for the exit report: the plain run's report is printed
    lengths = np.array([len(e) for e in examples])
    note = (
        f"{len(examples)} sequences, lengths {lengths.min()}..{lengths.max()} "
        f"(median {int(np.median(lengths))}), batch {cfg.batch_size}, d={DIM}, vocab {VOCAB}, "
        f"backend {jax.default_backend()}; shapewatch measured {loaders[0].report()['compile_seconds']:.3f} s "
        f"per compile and ended on buckets {plan.boundaries if plan else ()}, deciding: "
        + "; ".join(str(d) for d in loaders[0].decisions) + "."
    )
    return results, note


def table_rows(results: list[Result]) -> tuple[list[str], list[list[object]]]:
    """Headers and rows of the comparison table (ratios to the plain-jit run)."""
    base = results[0]
    headers = ["strategy", "steps", "compiles", "padding", "compile s", "wall s",
               "compile / plain", "wall / plain"]
    rows: list[list[object]] = [
        [r.name, r.steps, r.compiles, f"{r.padding:.1%}", f"{r.compile_s:.2f}",
         f"{r.wall_s:.2f}", f"{r.compile_s / base.compile_s:.2f}x" if base.compile_s else "-",
         f"{r.wall_s / base.wall_s:.2f}x"]
        for r in results
    ]
    return headers, rows


def render(results: list[Result], note: str, title: str) -> str:
    """``### title``, the note, and a Markdown table."""
    headers, rows = table_rows(results)
    lines = [f"### {title}", "", note, "", "| " + " | ".join(headers) + " |",
             "|---|" + "---:|" * (len(headers) - 1)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


TITLE = "Variable-length training: padding strategies under watched_jit"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="200 batches of 16, lengths up to 512")
    args = parser.parse_args(argv)
    results, note = run_all(FULL if args.full else QUICK)
    print(render(results, note, TITLE))
    print()
    print("Report of the plain-jit run (shapewatch.report().to_text()):")
    print()
    print(results[0].report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
