"""Run every ``benchmarks/bench_*.py`` and write one Markdown report (``make bench``).

Usage: ``python benchmarks/run.py [--quick] [--jobs N] [--out bench-results.md] [NAME ...]``

Each program runs in its own subprocess with this interpreter (``--quick`` passed
through) and prints a Markdown section on stdout. The report is a header with the
date and the environment, then every section in sorted order; it is written to
``--out`` and printed. A program that fails gets its stderr tail in the report; the
others still run, and the runner exits 1 naming the failures. ``--jobs N`` runs N programs at
once (for ``--quick``, a smoke test: ``make test`` runs two; timed tables want one).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from shapewatch._monitor.env import environment  # noqa: E402

TAIL_LINES = 40


def programs(directory: str, names: list[str]) -> list[str]:
    """The ``bench_*.py`` paths, sorted; ``names`` (e.g. ``overhead``) filter them."""
    found = sorted(glob.glob(os.path.join(directory, "bench_*.py")))
    if names:
        found = [p for p in found if any(n in os.path.basename(p) for n in names)]
    return found


def environment_section() -> str:
    env = environment()
    rows = [
        ("machine", f"{env['cpu_model'] or env['machine'] or '?'} ({env['machine']})"),
        ("cores", env["cpu_count"]),
        ("jax / jaxlib", f"{env['jax']} / {env['jaxlib']}"),
        ("backend", f"{env['backend']}: {env['device_count']} x {env['device_kind']}"),
        ("x64", env["x64"]),
        ("python", f"{env['python']} on {env['platform']}"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def per_jax_version(path: str) -> bool:
    """Whether a program's table gets a row from every interpreter given by ``--python``."""
    with open(path, encoding="utf-8") as fh:
        return "\nPER_JAX_VERSION = True" in fh.read()


def run_one(path: str, quick: bool, timeout: float, python: str = sys.executable,
            rows_only: bool = False) -> tuple[str, bool, float]:
    """Run one program; return its Markdown section, whether it passed, and its time."""
    name = os.path.basename(path)
    cmd = [python, path] + (["--quick"] if quick else []) + (["--rows-only"] if rows_only else [])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        err += f"\ntimed out after {timeout:.0f} s"
        code = -1
    took = time.perf_counter() - start
    section = out.strip() or f"### {name}"
    if code != 0:
        tail = "\n".join(err.strip().splitlines()[-TAIL_LINES:])
        section += (
            f"\n\n**FAILED**: `{name}` exited with status {code} after {took:.1f} s; "
            f"stderr tail:\n\n```\n{tail}\n```"
        )
    return section, code == 0, took


def add_rows(section: str, rows: str) -> str:
    """Adds table rows after the last row of the section's (last) table."""
    lines = section.splitlines()
    last = max((i for i, line in enumerate(lines) if line.startswith("|")), default=len(lines) - 1)
    return "\n".join(lines[: last + 1] + rows.strip().splitlines() + lines[last + 1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs (smoke test)")
    parser.add_argument("--out", default="bench-results.md", help="the report file")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per program")
    parser.add_argument("--jobs", type=int, default=1, help="programs run at once (1 for timed tables)")
    parser.add_argument("--dir", default=HERE, help="where the bench_*.py programs are")
    parser.add_argument("--python", action="append", default=[], metavar="PATH",
                        help="another interpreter (another jax) that adds its rows to the per-version tables")
    parser.add_argument("names", nargs="*", help="run only programs whose file name has one")
    args = parser.parse_args(argv)

    paths = programs(args.dir, args.names)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = " (quick)" if args.quick else ""
    parts = [f"## shapewatch benchmarks{mode}\n\n{now}\n\n{environment_section()}"]

    def section_of(path: str) -> tuple[str, list[str]]:
        print(f"[bench] running {os.path.basename(path)} ...", file=sys.stderr, flush=True)
        failed = []
        section, ok, took = run_one(path, args.quick, args.timeout)
        if ok and per_jax_version(path):
            for python in args.python:
                rows, ok_here, more = run_one(path, args.quick, args.timeout, python, rows_only=True)
                took += more
                if not ok_here:
                    failed.append(f"{os.path.basename(path)} with {python}")
                section = add_rows(section, rows if ok_here else f"| {python}: failed |")
        if not ok:
            failed.append(os.path.basename(path))
        return section + f"\n\n_{os.path.basename(path)}: {took:.1f} s_", failed

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(section_of, paths))  # in the programs' order
    parts += [section for section, _ in done]
    failed = [name for _, names in done for name in names]
    if not paths:
        parts.append("_no benchmarks/bench_*.py programs matched_")
    report = "\n\n".join(parts) + "\n"
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(report)
    print(report, end="")
    if failed:
        print(f"[bench] FAILED: {', '.join(failed)} (see {args.out})", file=sys.stderr)
        return 1
    print(f"[bench] wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
