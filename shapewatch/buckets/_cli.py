"""The ``shapewatch buckets FILE`` command line: compare bucketing strategies on real lengths, or on the
lengths (and measured costs) of a saved loader report or ``LengthObserver``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ._checks import MAX_LENGTH, PREFIX, as_lengths
from ._plan.explain import fmt_pct
from ._plan.length_observer import LengthObserver
from ._plan.prior import auto_numbers, load_prior
from ._plan.propose import propose
from ._plan.strategies import STRATEGIES

__all__ = ["main", "read_lengths"]

BAR_WIDTH = 40
ROWS = 16


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="shapewatch buckets",
        description="Propose bucket boundaries for a file of lengths and compare strategies.",
    )
    p.add_argument("lengths_file", help="one int per line, a .npy array, a .json list, or a saved "
                   "loader report() or LengthObserver.to_dict() (.json)")
    p.add_argument("--max-buckets", type=_max_buckets, default=8,
                   help="most buckets (compiles), or 'auto': the count that minimises compiles "
                   "plus steps, from a saved report's measured costs or the three options below; "
                   "default 8")
    p.add_argument("--compile-seconds", type=float, default=None, help="auto: seconds per compile")
    p.add_argument("--steps", type=int, default=None, help="auto: steps to come")
    p.add_argument("--step-seconds", type=float, default=None,
                   help="auto: seconds of one step padded to the longest length")
    p.add_argument("--multiple-of", type=int, default=1, help="round boundaries up to this")
    p.add_argument("--cost", choices=("linear", "quadratic"), default="linear")
    p.add_argument("--max-length", type=int, default=None, help="largest allowed boundary")
    p.add_argument("--overflow", choices=("error", "truncate", "extend"), default="error")
    return p


def _max_buckets(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 1 or 'auto'; got {text!r}") from None


def _read(path: str) -> tuple[LengthObserver, dict, dict | None]:
    """The lengths of ``path`` and, for a saved loader report, its measured costs and itself."""
    if path.endswith(".json"):
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            data = None  # read_lengths says what is wrong
        if isinstance(data, dict):
            if data.get("shapewatch") != "buckets-report" and not {"lengths", "counts"} <= set(data):
                raise ValueError(
                    f"{PREFIX} {path}: expected a JSON list of ints, a saved loader report() or "
                    f"a LengthObserver.to_dict(); got a dict with keys {sorted(data)}")
            obs, costs = load_prior(data)
            if not obs.total:
                raise ValueError(f"{PREFIX} {path}: the saved report holds no lengths")
            return obs, costs, data
    return LengthObserver(read_lengths(path)), {}, None


def read_lengths(path: str | Path) -> np.ndarray:
    """Read lengths from a text (one int per line), ``.npy`` or ``.json`` file.

    Raises:
        ValueError: ``[shapewatch] <file>: <problem>`` for unreadable or invalid files.
    """
    path = Path(path)
    try:
        if path.suffix == ".npy":
            data = np.load(path, allow_pickle=False)
        elif path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8-sig"))
            if not isinstance(data, list):
                raise ValueError(f"expected a JSON list of ints, got a {type(data).__name__}")
        else:
            data = _parse_text(path.read_text(encoding="utf-8-sig"))  # a BOM is fine
        return as_lengths(data)
    except FileNotFoundError:
        problem = "no such file"
    except IsADirectoryError:
        problem = "is a directory, expected a file"
    except EOFError:  # np.load on an empty file
        problem = "the file is empty, expected a .npy array of lengths"
    except RecursionError:  # json.loads (or numpy) on lists nested thousands deep
        problem = "nested too deeply to read, expected a flat list of lengths"
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problem = str(exc).removeprefix(PREFIX).strip() or type(exc).__name__
    raise ValueError(f"{PREFIX} {path}: {problem}")


def _parse_text(text: str) -> np.ndarray:
    tokens = text.split()
    try:
        return np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        for lineno, line in enumerate(text.splitlines(), 1):
            for tok in line.split():
                try:
                    value = int(tok)
                except ValueError:
                    raise ValueError(f"line {lineno}: {tok!r} is not an integer length") from None
                if value > MAX_LENGTH:
                    raise ValueError(
                        f"line {lineno}: {tok} is above the largest length accepted, "
                        f"2**40 = {MAX_LENGTH:,}"
                    ) from None
        raise


def _histogram_rows(obs: LengthObserver, boundaries: tuple[int, ...]) -> list[str]:
    lo = max(obs.min, 1)
    hi = max(obs.max, lo)  # all zeros: one row from 0
    if hi / lo >= 32:  # long tail: geometric rows
        edges = np.unique(np.round(np.geomspace(lo, hi + 1, ROWS + 1)).astype(np.int64))
    else:
        edges = np.unique(np.linspace(lo, hi + 1, min(ROWS, hi - lo + 1) + 1).astype(np.int64))
    edges[0] = min(obs.min, edges[0])
    cum = np.concatenate(([0], np.cumsum(obs.counts)))
    at = np.searchsorted(obs.lengths, edges, side="left")
    counts = np.diff(cum[at])
    peak = max(int(counts.max()), 1)
    width = len(f"{hi:,}")
    rows = []
    for i, n in enumerate(counts.tolist()):
        a, b = int(edges[i]), int(edges[i + 1]) - 1
        marks = [x for x in boundaries if a <= x <= b or (i == len(counts) - 1 and x > b)]
        bar = "#" * (round(BAR_WIDTH * n / peak) if n else 0)
        mark = f"  <- {', '.join(f'{m:,}' for m in marks)}" if marks else ""
        rows.append(f"{a:>{width},} - {b:>{width},} | {bar:<{BAR_WIDTH}} {n:>9,}{mark}")
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run ``shapewatch buckets``; returns the exit status (0 ok, 2 bad input)."""
    try:
        args = _parser().parse_args(argv)
    except _UsageError as exc:
        print(f"{PREFIX} buckets: {exc} (see shapewatch buckets --help)", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    common: dict = dict(
        multiple_of=args.multiple_of,
        cost=args.cost,
        max_length=args.max_length,
        overflow=args.overflow,
        compile_seconds=args.compile_seconds,
        steps=args.steps,
        step_seconds=args.step_seconds,
    )
    auto = args.max_buckets == "auto"
    try:  # validate the options on a dummy length, so their errors don't blame the file
        propose([1], 1 if auto else args.max_buckets, **{**common, "overflow": "truncate"})
    except ValueError as exc:
        msg = str(exc).removeprefix(PREFIX).strip()
        print(f"{PREFIX} buckets: {msg} (see shapewatch buckets --help)", file=sys.stderr)
        return 2
    try:
        obs, measured, saved = _read(args.lengths_file)
        given = any(common[k] is not None for k in ("compile_seconds", "steps", "step_seconds"))
        start = None  # the plan a loader given this report as prior= starts on
        if auto and saved is not None and measured.get("step_model") and not given and (
                args.cost == "linear" and args.max_length is None):
            start = propose(saved, "auto", multiple_of=args.multiple_of, overflow=args.overflow)
        if auto:
            common |= _auto_costs(obs, measured, common)
        plans = {s: propose(obs, args.max_buckets, strategy=s, **common) for s in STRATEGIES}
        if start is not None:
            plans["optimal"] = start
    except ValueError as exc:
        msg = str(exc).removeprefix(PREFIX).strip()
        if not msg.startswith(str(args.lengths_file)):
            msg = f"{args.lengths_file}: {msg}"
        print(f"{PREFIX} {msg}", file=sys.stderr)
        return 2
    best = plans["optimal"]
    print(f"shapewatch buckets: {args.lengths_file}")
    print(
        f"{obs.total:,} lengths, {obs.distinct:,} distinct, min {obs.min:,}, "
        f"max {obs.max:,}, mean {obs.mean:,.1f}"
    )
    print()
    if start is not None:
        a, b, c = (float(v) for v in measured["step_model"])
        print(f"auto: the plan a loader given this report as prior= starts on (measured: "
              f"{measured['compile_seconds']:.3g} s per compile, a step of {a:.3g} + {b:.3g}*L + "
              f"{c:.3g}*L^2 s, {measured.get('units') or obs.total:,} examples):")
    elif auto:
        print(f"auto, from {common['compile_seconds']:.3g} s per compile, "
              f"{common['steps']:,} steps of at most {common['step_seconds']:.3g} s (linear cost):")
    print(
        f"optimal boundaries ({len(best)} bucket{'s' if len(best) != 1 else ''}, max_buckets={args.max_buckets}, "
        f"multiple_of={args.multiple_of}, {'measured' if start is not None else args.cost} cost):"
    )
    print("  " + ", ".join(map(str, best.boundaries)))
    print()
    print("| strategy | buckets (= compiles) | padding |")
    print("|---|---:|---:|")
    for name, plan in plans.items():
        print(f"| {name} | {len(plan)} | {fmt_pct(plan.stats['waste'])} |")
    print()
    print("histogram (count per length range; <- marks optimal boundaries):")
    for row in _histogram_rows(obs, best.boundaries):
        print("  " + row)
    return 0


def _auto_costs(obs: LengthObserver, measured: dict, given: dict) -> dict:
    """``compile_seconds``, ``steps`` and ``step_seconds`` for ``--max-buckets auto``: the
    options given, else the saved report's measurements; raises naming what is missing."""
    out = auto_numbers(obs, measured, given["compile_seconds"], given["steps"], given["step_seconds"])
    missing = [f"--{k.replace('_', '-')}" for k, v in out.items() if v is None]
    if missing:
        raise ValueError(
            f"{PREFIX} --max-buckets auto needs the costs: a saved loader report that measured "
            f"them, or {', '.join(missing)}")
    return out


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
