"""The ``shapewatch`` command line (also ``python -m shapewatch``)."""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from typing import Any

from shapewatch._reports.load import ReportFileError, load_report

USAGE_ERROR = 2
RECOMPILED = 3


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shapewatch", description="See, explain and fix JAX recompiles.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run a program with every jax.jit watched; report at exit",
                         description="Run an unmodified program with every jax.jit watched, and print the "
                                     "recompile report at exit. The program's exit status, stdout and "
                                     "stderr pass through unchanged.")
    run.add_argument("-m", dest="module", help="run a module, like python -m")
    run.add_argument("--json", metavar="PATH", help="write the JSON report ({process} and {pid} expand)")
    run.add_argument("--trace", metavar="PATH", help="write a Chrome trace-event timeline")
    run.add_argument("--report", choices=("off", "summary", "full"), help="what to print at exit")
    run.add_argument("--fail-on-recompile", type=int, metavar="N",
                     help="exit with status 3 when any function compiled more than N times")
    run.add_argument("program", nargs=argparse.REMAINDER, help="script.py [args...] (or the module's args)")
    show = sub.add_parser("show", help="print a saved JSON report as text")
    show.add_argument("report")
    show.add_argument("--report", dest="mode", choices=("summary", "full"), default="full")
    diff = sub.add_parser("diff", help="compare two JSON reports (before, after)")
    diff.add_argument("before")
    diff.add_argument("after")
    merge = sub.add_parser("merge", help="merge per-process JSON reports; divergences first")
    merge.add_argument("reports", nargs="+")
    merge.add_argument("--json", metavar="PATH", help="also write the merged report")
    buckets = sub.add_parser("buckets", help="propose bucket sizes for a file of lengths",
                             add_help=False)
    buckets.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("demo", help="a short recompile storm, recorded, explained and fixed")
    return p


def _run(ns: argparse.Namespace) -> int:
    from shapewatch._integrations import patch as _patch
    from shapewatch._monitor import config as _config

    program = list(ns.program)
    if program[:1] == ["--"]:
        program = program[1:]
    if ns.module is None and not program:
        raise CliError("run: give a script (shapewatch run script.py [args...]) or a module (-m package.module)")
    if ns.module is None and not os.path.isfile(program[0]):
        raise CliError(f"run: {program[0]}: no such script")
    if ns.module is not None:
        import importlib.util

        try:
            found = importlib.util.find_spec(ns.module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise CliError(f"run: -m {ns.module}: no such module")
    options = {k: v for k, v in (("json_path", ns.json), ("trace_path", ns.trace), ("report", ns.report))
               if v is not None}
    _config.configure(**options)
    _patch.install()
    code: Any = 0
    try:
        if ns.module is not None:
            sys.argv = [ns.module, *program]
            runpy.run_module(ns.module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = program
            sys.path.insert(0, os.path.dirname(os.path.abspath(program[0])))
            runpy.run_path(program[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
    if ns.fail_on_recompile is not None:
        import shapewatch

        over = [f.record for f in shapewatch.report().functions if f.record.compiles > ns.fail_on_recompile]
        if over and code in (0, None):
            for r in over:
                print(f"[shapewatch] --fail-on-recompile {ns.fail_on_recompile}: {r.function} compiled "
                      f"{r.compiles} times (see the report below)", file=sys.stderr)
            return RECOMPILED
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _show(ns: argparse.Namespace) -> int:
    from shapewatch._reports.render import render_text

    print(render_text(load_report(ns.report), ns.mode))
    return 0


def _diff(ns: argparse.Namespace) -> int:
    from shapewatch._reports.merge import diff_reports

    print(diff_reports(load_report(ns.before), load_report(ns.after), ns.before, ns.after))
    return 0


def _merge(ns: argparse.Namespace) -> int:
    from shapewatch._reports.merge import merge_dicts, render_merged

    merged = merge_dicts([(p, load_report(p)) for p in ns.reports])
    if ns.json:
        from shapewatch._reports.report import _atomic_write

        _atomic_write(ns.json, json.dumps(merged, indent=1))
    print(render_merged(merged))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["buckets"]:
        from shapewatch.buckets._cli import main as buckets_main

        return buckets_main(argv[1:])
    ns = _parser().parse_args(argv)
    try:
        if ns.command == "demo":
            from shapewatch._integrations.demo import main as demo

            return demo()
        return {"run": _run, "show": _show, "diff": _diff, "merge": _merge}[ns.command](ns)
    except (CliError, ReportFileError) as e:
        print(f"[shapewatch] {e}", file=sys.stderr)
        return USAGE_ERROR
