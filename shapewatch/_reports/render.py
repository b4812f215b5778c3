"""Text rendering of a report, from its JSON form (so that saved reports render the same)."""

from __future__ import annotations

import os
from typing import Any

from shapewatch._monitor.records import recompiled
from shapewatch._reports.analysis import counted

_LAST_MISSES = 5


def _where(path: str | None) -> str:
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def seconds(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def render_function(f: dict[str, Any]) -> list[str]:
    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(f["kinds"].items()) if n)
    calls = f", {counted(f['calls'], 'call')}" if f.get("calls") is not None else ""
    lines = [
        f"{f['function']}  ({_where(f['location'])})",
        f"  {counted(f['compiles'], 'compile')}, {counted(f['signatures'], 'signature')}{calls} | trace {seconds(f['trace_s'])}, "
        f"lower {seconds(f['lower_s'])}, compile {seconds(f['compile_s'])} | kinds: {kinds}",
    ]
    if f.get("dropped"):
        lines.append(f"  ({counted(f['dropped'], 'older miss', 'older misses')} dropped; raise max_records to keep them)")
    for c in f.get("causes", []):
        lines.append(f"  cause: {c['text']}")
        lines += [f"      {h}" for h in c.get("histogram", [])]
        lines.append(f"    fix: {c['fix']}")
    shown = f["misses"][-_LAST_MISSES:]
    if shown:
        lines.append(f"  last {counted(len(shown), 'miss', 'misses')}:" if len(shown) > 1 else "  last miss:")
        for m in shown:
            lines.append(f"    #{m['seq']:<4} {m['kind']:<13} {_where(m['call_site']):<26} {m['explanation']}  "
                         f"({seconds(m['total_s'])})")
    return lines


def recompiled_functions(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in functions if recompiled(f["compiles"])]


def render_text(data: dict[str, Any], mode: str = "summary") -> str:
    """The report as text: summary line, functions by the time a fix would save, causes, fixes."""
    lines = [data["summary"]]
    env = data.get("environment", {})
    if (env.get("process_count") or 1) > 1:
        lines.append(f"[shapewatch] process {env.get('process_index')} of {env.get('process_count')} "
                     f"on {env.get('hostname')} (pid {env.get('pid')})")
    functions = data["functions"] if mode == "full" else recompiled_functions(data["functions"])
    inlined = [f for f in functions if f["misses"] and all(m["kind"] == "inlined" for m in f["misses"])]
    for f in functions:
        if f not in inlined:
            lines.append("")
            lines += render_function(f)
    if inlined:  # traced only inside other traces: no compile, no cost of their own
        lines.append("")
        lines.append("Inlined into other traces only (no compile of their own): "
                     + ", ".join(f"{f['function']} x{len(f['misses'])}" for f in inlined))
    unwatched = data.get("unwatched", {})
    if unwatched:
        n = sum(v["compiles"] for v in unwatched.values())
        s = sum(v["seconds"] for v in unwatched.values())
        lines.append("")
        lines.append(f"Outside watched functions: {counted(n, 'compile')}, {seconds(s)} ({_unwatched_names(unwatched, n)})")
    lines += _cache_section(data)
    return "\n".join(lines)


def _unwatched_names(unwatched: dict[str, Any], total: int, shown: int = 6) -> str:
    """The costliest names with their compiles; the rest as ``and N more`` so that the counts add up."""
    named = [(name, v["compiles"]) for name, v in unwatched.items() if v["compiles"]][:shown]
    rest = total - sum(c for _, c in named)
    others = len([v for v in unwatched.values() if v["compiles"]]) - len(named)
    parts = [f"{name} {c}" for name, c in named]
    if rest:
        parts.append(f"and {rest} more in {counted(others, 'other function')}" if others > 0 else f"and {rest} more")
    return ", ".join(parts)


def _cache_section(data: dict[str, Any]) -> list[str]:
    from shapewatch._reports.across import across_lines
    from shapewatch._reports.cache_totals import cache_lines

    cache = cache_lines(data["functions"], seconds)
    across = across_lines(data.get("across_runs"))
    return ([""] + cache if cache else []) + ([""] + across if across else [])
