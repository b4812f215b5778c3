"""The report: a snapshot of every record, as text, JSON and a trace timeline.

``report()`` takes the snapshot; ``Report.to_text()``, ``to_dict()``/``to_json()``
and ``to_trace()`` and ``to_html()`` render it. ``install_exit_hook()`` prints it (and writes
the files asked for through ``SHAPEWATCH_JSON`` / ``SHAPEWATCH_TRACE`` /
``SHAPEWATCH_HTML``) at exit.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import sys
import tempfile
from typing import Any

from shapewatch._monitor.records import COMPILING_KINDS, FunctionRecord, recompiled
from shapewatch._monitor.registry import registry
from shapewatch._reports import compact as _compact
from shapewatch._reports.analysis import Cause, causes, counted

SCHEMA = _compact.SCHEMA_2  # of the files written; ``to_dict()`` is the schema 1 form of the same report


@dataclasses.dataclass(frozen=True)
class FunctionReport:
    """A watched function's records with the causes of its misses."""

    record: FunctionRecord
    causes: tuple[Cause, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**self.record.to_dict(), "causes": [c.to_dict() for c in self.causes]}


@dataclasses.dataclass(frozen=True)
class Report:
    """Everything recorded in this process, ranked by the time the misses cost.

    Attributes:
      environment: jax/jaxlib versions, backend, devices, x64, process index and
        count, Python, platform, CPU, host, pid (the JSON report's ``environment``).
      functions: one :class:`FunctionReport` per watched function, by the time a fix would save (the cost after the first compile) first.
      unwatched: compiles outside any watched function: name -> (compiles, seconds).
      across_runs: signatures the previous run's manifest also compiled, compiled again
        without a persistent-cache hit, each with the key part that explains it: dicts
        with ``function``, ``signature``, ``status``, ``part`` (``not_used``,
        ``never_written``, a key part, ``program``, ``evicted`` or ``unknown``), ``why``
        and ``earlier_run`` (the JSON report's ``across_runs``).
    """

    environment: dict[str, Any]
    functions: tuple[FunctionReport, ...]
    unwatched: dict[str, tuple[int, float]]
    across_runs: tuple[dict[str, Any], ...] = ()

    @property
    def recompiled(self) -> tuple[FunctionReport, ...]:
        """The functions that compiled more than once."""
        return tuple(f for f in self.functions if recompiled(f.record.compiles))

    def summary(self) -> str:
        """The one-line summary that opens the text report."""
        rec = self.recompiled
        if not rec:
            n = len(self.functions)
            return f"[shapewatch] no recompiles: {counted(n, 'watched function')} compiled at most once."
        total = sum(f.record.compiles - 1 for f in rec)
        seconds = sum(_after_first_compile(f.record) for f in rec)
        top = rec[0]
        cause = f"; cause: {top.causes[0].headline}" if top.causes else ""
        return (f"[shapewatch] {counted(len(rec), 'function')} recompiled {counted(total, 'time')}, costing "
                f"{seconds:.1f} s of tracing and compiling after the first compile ({top.record.function}: "
                f"{counted(top.record.compiles, 'compile')}, {top.record.total_s:.1f} s in all{cause})")

    def to_dict(self, compact: bool = False) -> dict[str, Any]:
        """The report as JSON data: schema 1 (each miss with its signature), or with ``compact``
        the schema 2 that ``to_json`` writes (structures and signatures stored once)."""
        data = _compact.encode(self.environment, self.summary(), list(self.functions), self.unwatched)
        if self.across_runs:
            data["across_runs"] = list(self.across_runs)
        return data if compact else _compact.expand(data)

    def _encoded(self) -> dict[str, Any]:
        """``to_dict(compact=True)``, made once per report for its own renderings (never handed out)."""
        data = self.__dict__.get("_compact")
        if data is None:
            data = self.to_dict(compact=True)
            object.__setattr__(self, "_compact", data)
        return data

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The JSON text (schema 2); with ``path``, also written atomically (temporary file, then rename)."""
        text = json.dumps(self._encoded(), separators=(",", ":"), default=str)
        if path is not None:
            _atomic_write(os.fspath(path), text)
        return text

    def to_trace(self, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """A Chrome trace-event timeline (Perfetto, chrome://tracing): one span per phase."""
        events: list[dict[str, Any]] = []
        pid = self.environment.get("pid", os.getpid())
        threads: dict[str, int] = {}
        for f in self.functions:
            for m in f.record.misses:
                tid = threads.setdefault(m.thread, len(threads) + 1)
                label = m.signature.short() if m.signature is not None else m.kind
                for phase, start, end in m.spans:
                    events.append({
                        "name": f"{phase} {m.function}", "cat": m.kind, "ph": "X", "pid": pid, "tid": tid,
                        "ts": start * 1e6, "dur": max(0.0, (end - start) * 1e6),
                        "args": {"signature": label, "cause": m.explanation, "call_site": m.call_site},
                    })
        events += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
                   for name, tid in threads.items()]
        trace = {"traceEvents": events, "displayTimeUnit": "ms"}
        if path is not None:
            _atomic_write(os.fspath(path), json.dumps(trace))
        return trace

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """One self-contained HTML page (no network); with ``path``, also written atomically."""
        from shapewatch._reports.html import to_html

        text = to_html(self.to_dict())
        if path is not None:
            _atomic_write(os.fspath(path), text)
        return text

    def _repr_html_(self) -> str:
        """The report drawn in a notebook cell (Jupyter, Colab) when it is a cell's value."""
        from shapewatch._reports.html import to_html

        return to_html(self.to_dict(), fragment=True)

    def to_text(self, mode: str = "summary") -> str:
        """The human report; ``mode="full"`` also lists functions that compiled once."""
        from shapewatch._reports.render import render_text

        return render_text(_compact.expand(self._encoded()), mode)


def _by_time_a_fix_saves(f: FunctionReport) -> tuple[float, float, str]:
    """Functions first by what their recompiles cost (what a fix would save), then by all their compiles."""
    return (-_after_first_compile(f.record), -f.record.total_s, f.record.function)


def _after_first_compile(record: FunctionRecord) -> float:
    """The cost of a function's misses after its first compile, which no fix avoids.

    With older misses dropped (``max_records``), the first compile is gone: an average
    compile's cost stands for it.
    """
    first = next((m for m in record.misses if m.kind in COMPILING_KINDS), None)
    if record.dropped or first is None:
        return record.total_s * (1 - 1 / max(1, record.compiles))
    return max(0.0, record.total_s - first.total_s)


def _atomic_write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".shapewatch-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a file asked for follows the umask
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    try:  # Linux says it without changing it (setting it would race with other threads' files)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # elsewhere, reading it means setting it: set it back at once
    os.umask(mask)
    return mask


def report() -> Report:
    """A snapshot of everything recorded in this process.

    >>> import shapewatch
    >>> shapewatch.report().to_dict()["schema"]
    'shapewatch.report/1'
    """
    from shapewatch._monitor.env import environment

    with registry.lock:
        states = list(registry.functions.values())
        records = [s.snapshot() for s in states if s.misses]  # one whose traces all raised had no miss
        # names whose events compiled nothing (a trace alone, or one that raised) are not compiles
        unwatched = {k: (int(v[0]), float(v[1])) for k, v in registry.unwatched.items() if v[0]}
    functions = tuple(sorted((FunctionReport(r, tuple(causes(r.misses))) for r in records),
                             key=_by_time_a_fix_saves))
    snap = Report(environment(), functions, dict(sorted(unwatched.items(), key=lambda kv: -kv[1][1])))
    return dataclasses.replace(snap, across_runs=_across_runs(snap))


def _across_runs(snap: Report) -> tuple[dict[str, Any], ...]:
    """Against the previous run's manifest, where one is kept (never fails the report)."""
    try:
        from shapewatch._reports.across import explain_across
        from shapewatch._reports.manifest import build_manifest, previous_manifest

        before = previous_manifest()
        if before is None or not snap.functions:
            return ()
        return tuple(explain_across(before, build_manifest(snap, None)))
    except Exception as e:
        sys.stderr.write(f"[shapewatch] could not compare with the previous run's manifest: {e!r}\n")
        return ()


def report_of(misses: list[Any]) -> Report:
    """A report of some misses only (e.g. one test's): per-function totals over them.

    Compiles outside watched functions are not attributed to misses, so ``unwatched`` is empty.
    """
    from shapewatch._monitor.env import environment

    groups: dict[str, list[Any]] = {}
    for m in misses:
        groups.setdefault(f"{m.module}:{m.function}@{m.location}", []).append(m)
    records = []
    for key, ms in groups.items():
        kinds: dict[str, int] = {}
        for m in ms:
            kinds[m.kind] = kinds.get(m.kind, 0) + 1
        records.append(FunctionRecord(
            key=key, function=ms[0].function, module=ms[0].module, location=ms[0].location,
            compiles=sum(m.kind in COMPILING_KINDS for m in ms), kinds=kinds,
            signatures=len({m.signature for m in ms if m.signature is not None}),
            trace_s=sum(m.trace_s for m in ms), lower_s=sum(m.lower_s for m in ms),
            compile_s=sum(m.compile_s for m in ms), calls=None, dropped=0, misses=tuple(ms)))
    functions = tuple(sorted((FunctionReport(r, tuple(causes(r.misses))) for r in records),
                             key=_by_time_a_fix_saves))
    return Report(environment(), functions, {})


def _at_exit() -> None:
    """Writes each output the settings ask for, each on its own: one that fails (a missing
    directory, a bad ``{placeholder}``) is one line naming it, and the others are still written."""
    from shapewatch._monitor.config import settings

    try:
        if not settings.enabled or not registry.functions and not registry.unwatched:
            return
        snap = report()
    except Exception as e:  # never fail the program's exit
        sys.stderr.write(f"[shapewatch] could not take the report at exit: {e!r}\n")
        return
    fields = {"process": snap.environment.get("process_index", 0), "pid": os.getpid()}
    for what, path, write in (("JSON report", settings.json_path, snap.to_json),
                              ("trace", settings.trace_path, snap.to_trace),
                              ("HTML report", settings.html_path, snap.to_html)):
        if not path:
            continue
        try:
            target = path.format(**fields)
        except (KeyError, IndexError, ValueError) as e:
            sys.stderr.write(f"[shapewatch] could not write the {what} at exit: {path!r} has an unknown "
                             f"placeholder ({e!r}); use {{process}} or {{pid}}\n")
            continue
        try:
            write(target)
        except Exception as e:
            sys.stderr.write(f"[shapewatch] could not write the {what} to {target} at exit: {e}\n")
    try:
        if settings.report != "off" and (snap.recompiled or snap.across_runs or settings.report == "full"):
            sys.stderr.write(snap.to_text(settings.report) + "\n")
            sys.stderr.flush()
    except Exception as e:
        sys.stderr.write(f"[shapewatch] could not print the report at exit: {e!r}\n")


_installed = False


def install_exit_hook() -> None:
    global _installed
    if not _installed:
        atexit.register(_at_exit)
        _installed = True
