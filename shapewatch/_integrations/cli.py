"""The ``shapewatch`` command line (also ``python -m shapewatch``)."""

from __future__ import annotations

import argparse
import json
import os
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
    run.add_argument("--html", metavar="PATH", help="write a self-contained HTML report ({process} and {pid} expand)")
    run.add_argument("--report", choices=("off", "summary", "full"), help="what to print at exit")
    run.add_argument("--fail-on-recompile", type=int, metavar="N",
                     help="exit with status 3 when any function compiled more than N times")
    run.add_argument("--expect", metavar="MANIFEST",
                     help="exit with status 3 when the program compiles a signature outside this run manifest")
    run.add_argument("--warm", metavar="MANIFEST",
                     help="compile this run manifest's signatures ahead of time, in background threads")
    run.add_argument("-v", "--verbose", action="count", default=0,
                     help="log each miss on stderr (-vv: debug); also SHAPEWATCH_LOG=info|debug")
    run.add_argument("program", nargs=argparse.REMAINDER, help="script.py [args...] (or the module's args)")
    show = sub.add_parser("show", help="print a saved JSON report as text (or write it as HTML)")
    show.add_argument("report", nargs="+", help="a report; several per-process reports are merged")
    show.add_argument("--report", dest="mode", choices=("summary", "full"), default="full")
    show.add_argument("--html", metavar="PATH", help="write a self-contained HTML page instead of printing")
    diff = sub.add_parser("diff", help="compare two JSON reports, or two run manifests (before, after)")
    diff.add_argument("before")
    diff.add_argument("after")
    merge = sub.add_parser("merge", help="merge per-process JSON reports; divergences first")
    merge.add_argument("reports", nargs="+")
    merge.add_argument("--json", metavar="PATH", help="also write the merged report")
    merge.add_argument("--html", metavar="PATH", help="also write it as a self-contained HTML page")
    buckets = sub.add_parser("buckets", help="propose bucket sizes for a file of lengths",
                             add_help=False)
    buckets.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("demo", help="a short recompile storm, recorded, explained and fixed")
    return p


def _run(ns: argparse.Namespace) -> int:
    from shapewatch._integrations import patch as _patch
    from shapewatch._integrations import run_log as _run_log
    from shapewatch._monitor import config as _config

    program = list(ns.program)
    if program[:1] == ["--"]:
        program = program[1:]
    if ns.module is None and not program:
        raise CliError("run: give a script (shapewatch run script.py [args...]) or a module (-m package.module)")
    if ns.module is None and not os.path.isfile(program[0]):
        raise CliError(f"run: {program[0]}: no such script")
    spec = _patch.module_spec(ns.module) if ns.module is not None else None
    if ns.module is not None and spec is None:
        raise CliError(f"run: -m {ns.module}: no such module")
    for flag, path in (("--json", ns.json), ("--trace", ns.trace), ("--html", ns.html)):
        if path is not None and os.path.isdir(path):  # found now, not at exit when the run's work is done
            raise CliError(f"run {flag} {path}: is a directory; name a file to write (for example "
                           f"{os.path.join(path, 'report' + ('.json' if flag == '--json' else '.' + flag[2:]))})")
    options = {k: v for k, v in (("json_path", ns.json), ("trace_path", ns.trace), ("html_path", ns.html),
                                 ("report", ns.report)) if v is not None}
    _config.configure(**options)
    try:
        _run_log.configure(_run_log.level_asked(ns.verbose))
    except ValueError as e:
        raise CliError(f"run: {str(e).removeprefix('[shapewatch] ')}") from None
    expect = _manifest_option("--expect", ns.expect)
    _patch.install()
    if ns.warm is not None:
        from shapewatch._integrations.warm import warm

        warm(_manifest_option("--warm", ns.warm))
    code: Any = None
    status: Any = 0
    interrupted = False
    try:  # compiled here, so that a SyntaxError is reported as python reports it
        code = spec.loader.get_code(spec.name) if spec is not None else _patch.script_code(program[0])
        if spec is not None:
            _patch.run_module(spec, program, code)
        else:
            _patch.run_script(program[0], program[1:], code)
    except SystemExit as e:
        status = e.code
    except BaseException as e:  # noqa: B036  (reported as the interpreter reports it)
        _print_uncaught(e, code)
        status, interrupted = 1, isinstance(e, KeyboardInterrupt)
    _wait_for_threads()
    status = _exit_status(status)
    if ns.fail_on_recompile is not None and status == 0:
        status = _check_recompiles(ns.fail_on_recompile, _config.settings)
    if expect is not None and status == 0:
        status = _check_expected(expect, ns.expect)
    if interrupted:
        _die_of_sigint()
    return status


def _manifest_option(option: str, path: str | None) -> Any:
    from shapewatch._reports.manifest import ManifestError, load_manifest

    if path is None:
        return None
    try:
        return load_manifest(path)
    except ManifestError as e:
        raise CliError(f"run {option}: {str(e).removeprefix('[shapewatch] ')}") from None
    except RecursionError:  # json.load on lists or objects nested thousands deep
        raise CliError(f"run {option}: {path}: not a readable shapewatch manifest (JSON nested too deeply "
                       "to read)") from None


def _check_expected(manifest: Any, path: str) -> int:
    from shapewatch._integrations.contract import EXPECT_FAILED, violations
    from shapewatch._reports.report import report

    found = violations(manifest, [m for f in report().functions for m in f.record.misses], path)
    for line in found:
        print(line, file=sys.stderr)
    return EXPECT_FAILED if found else 0


def _print_uncaught(e: BaseException, code: Any) -> None:
    """Prints ``e`` through ``sys.excepthook`` from the program's first frame, as python does."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    sys.excepthook(type(e), e.with_traceback(tb), tb)


def _wait_for_threads() -> None:
    """Joins the program's non-daemon threads, as the interpreter does before it exits."""
    import threading

    while True:
        alive = [t for t in threading.enumerate()
                 if t is not threading.current_thread() and not t.daemon and t.is_alive()]
        if not alive:
            return
        for t in alive:
            t.join()


def _exit_status(code: Any) -> int:
    """The exit status python gives ``SystemExit(code)``; a message goes to stderr."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _check_recompiles(limit: int, settings: Any) -> int:
    import shapewatch

    snap = shapewatch.report()
    over = [f.record for f in snap.functions if f.record.compiles > limit]
    if not over:
        return 0
    if settings.report == "full" or settings.report == "summary" and snap.recompiled:
        where = "see the report below"
    elif settings.report == "summary":
        where = "it compiled once, so the summary report is not printed; --report full prints it"
    elif settings.json_path:
        where = f"the report is off here; it is saved to {settings.json_path}"
    else:
        where = "the report is off; --report summary or --json PATH shows it"
    for r in over:
        print(f"[shapewatch] --fail-on-recompile {limit}: {r.function} compiled {r.compiles} "
              f"time{'s' * (r.compiles != 1)} ({where})", file=sys.stderr)
    return RECOMPILED


def _die_of_sigint() -> None:
    """Ends the process as python does after an uncaught KeyboardInterrupt: by SIGINT, after the exit hooks."""
    import atexit
    import signal

    if os.name != "posix":
        sys.exit(0xC000013A if os.name == "nt" else 130)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _load_any(path: str) -> dict[str, Any]:
    """A saved report, or a merged one (``shapewatch merge --json``)."""
    try:
        return load_report(path)
    except ReportFileError:
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and data.get("schema") == "shapewatch.merged/1" and all(
                isinstance(data.get(k), list) for k in ("processes", "divergences", "functions")):
            return data
        raise


def _refuse_directory(what: str, path: str | None) -> None:
    """An output path that is a directory (``out/`` too: writing there says "Not a directory") is
    refused before anything is read or written."""
    if path is not None and os.path.isdir(path):
        raise CliError(f"{what} {path}: cannot be written: Is a directory")


def _write_html(path: str, data: dict[str, Any]) -> None:
    from shapewatch._reports.html import to_html
    from shapewatch._reports.report import _atomic_write

    _refuse_directory("--html", path)
    try:
        _atomic_write(path, to_html(data))
    except OSError as e:
        raise CliError(f"--html {path}: cannot be written: {e.strerror or e}") from None
    print(f"[shapewatch] HTML report written to {path}")


def _show(ns: argparse.Namespace) -> int:
    from shapewatch._reports.merge import merge_dicts, render_merged
    from shapewatch._reports.render import render_text

    _refuse_directory("--html", ns.html)
    if len(ns.report) > 1:
        data = merge_dicts([(p, load_report(p)) for p in ns.report])
    else:
        data = _load_any(ns.report[0])
    merged = data.get("schema") == "shapewatch.merged/1"
    for i, f in enumerate(data["functions"] if not merged else ()):  # the reference's fields load.py does not check
        if not isinstance(f.get("module"), str):
            raise ReportFileError(f"{', '.join(ns.report)}: not a complete report: functions[{i}] ({f['function']}) "
                                  f"has \"module\" {f.get('module')!r}, expected a string")
    if ns.html:
        _write_html(ns.html, data)
    else:
        print(render_merged(data) if merged else render_text(data, ns.mode))
    return 0


def _diff(ns: argparse.Namespace) -> int:
    from shapewatch._reports.merge import diff_reports

    if _is_manifest(ns.before) or _is_manifest(ns.after):  # two run manifests: across runs
        from shapewatch._reports.across import diff_manifests
        from shapewatch._reports.manifest import ManifestError, load_manifest

        try:
            print(diff_manifests(load_manifest(ns.before), load_manifest(ns.after), ns.before, ns.after))
        except ManifestError as e:
            raise CliError(f"diff: {str(e).removeprefix('[shapewatch] ')}") from None
        return 0
    print(diff_reports(load_report(ns.before), load_report(ns.after), ns.before, ns.after))
    return 0


def _is_manifest(path: str) -> bool:
    try:
        with open(path) as fh:
            return '"schema":"shapewatch.manifest/' in fh.read(64).replace(" ", "")
    except (OSError, UnicodeDecodeError):
        return False


def _merge(ns: argparse.Namespace) -> int:
    from shapewatch._reports.merge import merge_dicts, render_merged

    _refuse_directory("merge --json", ns.json)
    _refuse_directory("--html", ns.html)
    merged = merge_dicts([(p, load_report(p)) for p in ns.reports])
    if ns.json:
        from shapewatch._reports.report import _atomic_write

        try:
            _atomic_write(ns.json, json.dumps(merged, indent=1))
        except OSError as e:
            raise CliError(f"merge --json {ns.json}: cannot be written: {e.strerror or e}") from None
    if ns.html:
        _write_html(ns.html, merged)
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
        if ns.command == "run":
            return _run(ns)
        try:
            return {"show": _show, "diff": _diff, "merge": _merge}[ns.command](ns)
        except (KeyError, TypeError, IndexError, AttributeError, ValueError, RecursionError) as e:
            # a file that loaded but whose fields have unexpected types or values
            files = getattr(ns, "report", None) or getattr(ns, "reports", None) or [ns.before, ns.after]
            raise ReportFileError(f"{', '.join(files)}: not a well-formed shapewatch report: a field has an "
                                  f"unexpected type or value ({type(e).__name__}: {str(e)[:120]})") from None
    except (CliError, ReportFileError) as e:
        print(f"[shapewatch] {e}", file=sys.stderr)
        return USAGE_ERROR
