"""The report as one self-contained HTML file (or a notebook fragment).

``to_html(data)`` takes the JSON form of a report (``Report.to_dict()``, a saved
report, or a merged one from ``merge_dicts``) and returns the page: no network,
no external fonts or scripts, pictures as inline SVG. Only ``report_view`` and
``merged_view`` read the JSON; a new schema needs only them adapted. Every piece
of user-derived text (function names, explanations, paths) is escaped.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from typing import Any

from shapewatch._reports import html_static, html_svg
from shapewatch._reports.analysis import counted
from shapewatch._reports.render import _where, seconds

esc = html_svg.esc
MAX_ROWS = 30  # functions drawn in the bar chart and the timeline
MAX_MISSES = 5000  # rows of the table of misses
_BUCKETS = re.compile(r"buckets \[([0-9, ]+)\]")


def report_view(data: dict[str, Any]) -> dict[str, Any]:
    """What the page shows, from a ``shapewatch.report/1`` dict."""
    functions = []
    for f in data["functions"]:
        misses = []
        for m in f.get("misses", []):
            spans = m.get("spans") or []
            start = spans[0][1] if spans else m.get("timestamp") or 0.0
            end = spans[-1][2] if spans else start + m["total_s"]
            misses.append({
                "seq": m["seq"], "kind": m["kind"], "call_site": _where(m.get("call_site")),
                "explanation": m["explanation"], "trace_s": m.get("trace_s", 0.0), "lower_s": m.get("lower_s", 0.0),
                "compile_s": m.get("compile_s", 0.0), "total_s": m["total_s"], "start": start, "end": end,
            })
        causes = []
        for c in f.get("causes", []):
            found = c.get("boundaries")
            if found is None:
                match = _BUCKETS.search(c.get("fix", ""))
                found = [int(b) for b in match.group(1).split(",")] if match else []
            values = [str(v) for v in c.get("values", [])]
            numeric = c["kind"] == "axis" and all(re.fullmatch(r"-?\d+", v) for v in values) and values
            bars = next(iter(c.get("histogram") or []), "")
            causes.append({"kind": c["kind"], "path": c["path"], "text": c["text"], "fix": c["fix"],
                           "values": values, "counts": list(c.get("counts", [])), "boundaries": found,
                           "numeric": bool(numeric), "bars": bars if bars.startswith("bars: ") else "",
                           "unit": "call" if bars.startswith("bars: calls") else "miss"})
        functions.append({
            "function": f["function"], "location": _where(f["location"]), "compiles": f["compiles"],
            "signatures": f["signatures"], "kinds": f.get("kinds", {}), "trace_s": f["trace_s"],
            "lower_s": f["lower_s"], "compile_s": f["compile_s"], "total_s": f["total_s"],
            "dropped": f.get("dropped", 0), "causes": causes, "misses": misses,
        })
    unwatched = [(name, v["compiles"], v["seconds"]) for name, v in data.get("unwatched", {}).items()]
    return {"summary": data["summary"], "environment": data.get("environment", {}),
            "functions": functions, "unwatched": unwatched}


def merged_view(data: dict[str, Any]) -> dict[str, Any]:
    """What the page shows, from a ``shapewatch.merged/1`` dict (``merge_dicts``)."""
    procs = [str(p["process_index"]) for p in data["processes"]]
    return {"processes": data["processes"], "columns": procs, "divergences": data["divergences"],
            "functions": [{"function": f["function"], "compiles": f["compiles"], "total_s": f["total_s"],
                           "by_process": [f["by_process"].get(p) for p in procs]} for f in data["functions"]]}


_fragments = itertools.count(1)


def to_html(data: dict[str, Any], *, fragment: bool = False) -> str:
    """The page for a report or merged report dict; ``fragment=True``: the part a notebook shows."""
    merged = str(data.get("schema", "")).startswith("shapewatch.merged")
    body = _merged_body(merged_view(data)) if merged else _report_body(report_view(data))
    root = "sw-" + hashlib.sha1(body.encode()).hexdigest()[:12]
    if fragment:  # one notebook page may show the same report twice: each copy needs its own id
        root += f"-{next(_fragments)}"
    code = html_static.script(root)
    frag = (f'<div class="swr" id="{root}"><style>{html_static.CSS}</style>{body}'
            f'<div class="sw-tip" hidden></div><script>{code}</script></div>')
    if fragment:
        return frag
    title = "shapewatch: merged report" if merged else "shapewatch report"
    return html_static.page(title, frag, code)


def _section(ident: str, title: str, inner: str) -> str:
    return f'<section id="{ident}"><h2>{title}</h2>{inner}</section>'


def _stat(value: str, label: str, hot: bool = False) -> str:
    return f'<div class="stat{" hot" * hot}"><b>{esc(value)}</b><span>{esc(label)}</span></div>'


def _header(title: str, sub: str, summary: str, stats: list[str]) -> str:
    return (f'<header><h1><span>shape</span>watch {title}</h1><p class="sub">{esc(sub)}</p>'
            f'<p class="summary">{esc(summary.removeprefix("[shapewatch] "))}</p>'
            f'<div class="stats">{"".join(stats)}</div></header>')


def _report_body(v: dict[str, Any]) -> str:
    env, functions = v["environment"], v["functions"]
    recompiled = [f for f in functions if f["compiles"] > 1]
    lost = sum(f["total_s"] for f in recompiled)
    n_unw = sum(c for _, c, _ in v["unwatched"])
    s_unw = sum(s for _, _, s in v["unwatched"])
    sub = " \u00b7 ".join(str(x) for x in (
        f"jax {env.get('jax', '?')}", env.get("backend"), env.get("device_kind"), env.get("hostname"),
        f"pid {env.get('pid')}" if env.get("pid") is not None else None,
        f"process {env.get('process_index')} of {env.get('process_count')}" if (env.get("process_count") or 1) > 1
        else None) if x)
    stats = [_stat(str(sum(f["compiles"] - 1 for f in recompiled)), "recompiles", bool(recompiled)),
             _stat(seconds(lost), "lost to recompiled functions", bool(recompiled)),
             _stat(str(len(functions)), "watched functions"),
             _stat(str(sum(f["compiles"] for f in functions)), "compiles of watched functions"),
             _stat(f"{n_unw} / {seconds(s_unw)}", "compiles outside watched functions")]
    parts = [_header("report", sub, v["summary"], stats), _functions(functions), _timeline(functions),
             _causes(functions), _misses(functions), _unwatched(v["unwatched"]), _environment(env)]
    return "".join(parts)


def _legend(items: list[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f'<span><i style="background:{c}"></i>{esc(n)}</span>'
                                            for n, c in items) + "</div>"


def _functions(functions: list[dict[str, Any]]) -> str:
    if not functions:
        return _section("functions", "Functions by time lost", '<p class="note">No watched function compiled.</p>')
    shown = functions[:MAX_ROWS]
    more = len(functions) - len(shown)
    note = f'<p class="note">{more} more function{"s" * (more != 1)} in the table of misses.</p>' if more else ""
    legend = _legend([(p, html_static.PHASE_COLORS[p]) for p in html_svg.PHASES])
    return _section("functions", "Functions by time lost", legend + html_svg.function_bars(shown) + note)


def _timeline(functions: list[dict[str, Any]]) -> str:
    rows = [(f["function"], f["misses"]) for f in functions if f["misses"]][:MAX_ROWS]
    if not rows:
        return _section("timeline", "Compiles over the run", '<p class="note">No misses recorded.</p>')
    t0 = min(m["start"] for _, ms in rows for m in ms)
    t1 = max(m["end"] for _, ms in rows for m in ms)
    kinds = sorted({m["kind"] for _, ms in rows for m in ms})
    note = ('<p class="note">One mark per miss, at its time since the first one; its width is its trace, '
            'lower and compile time. Hover a mark for its explanation, call site and cost.</p>')
    legend = '<div class="legend">' + "".join(
        f'<span><svg width="10" height="10" style="display:inline;width:10px;margin-right:5px">'
        f'<rect class="mark kind-{esc(k)}" width="10" height="10" rx="2"/></svg>{esc(k)}</span>' for k in kinds) + "</div>"
    return _section("timeline", "Compiles over the run", legend + html_svg.timeline(rows, t0, t1) + note)


def _cause(c: dict[str, Any]) -> str:
    chips = picture = ""
    if c["numeric"]:
        caption = f'<p class="note">{esc(c["bars"][len("bars: "):])}</p>' if c["bars"] else ""
        picture = ('<div class="cpic">' + html_svg.histogram([int(x) for x in c["values"]], c["counts"],
                                                             c["boundaries"], c["unit"]) + caption + "</div>")
    else:
        chips = "<div>" + "".join(f'<span class="chip mono">{esc(html_svg.short(v, 60))} \u00d7{n}</span>'
                                  for v, n in zip(c["values"][:24], c["counts"])) + "</div>"
    return (f'<div class="cause" data-kind="{esc(c["kind"])}"><div class="ctext"><p><b>{esc(c["kind"])}</b> '
            f'\u00b7 <code>{esc(c["path"])}</code></p><p>{esc(c["text"])}</p>{chips}'
            f'<div class="fix"><b>Fix:</b> {esc(c["fix"])}</div></div>{picture}</div>')


def _causes(functions: list[dict[str, Any]]) -> str:
    with_causes = [f for f in functions if f["causes"]]
    if not with_causes:
        return _section("causes", "Causes and fixes", '<p class="note">No recompiles, so no causes.</p>')
    inner = "".join(f'<h3>{esc(f["function"])} <span class="sub">({esc(f["location"])}, '
                    f'{counted(f["compiles"], "compile")})</span></h3>'
                    f'<div class="causes">{"".join(_cause(c) for c in f["causes"])}</div>' for f in with_causes)
    return _section("causes", "Causes and fixes", inner)


def _table(ident: str, head: list[tuple[str, bool]], rows: list[list[tuple[str, Any]]], sortable: bool = True) -> str:
    """``head``: (title, numeric); ``rows``: cells of (shown text, sort value or None)."""
    ths = "".join(f'<th{" class=num data-type=num" if num else ""}>{esc(t)}</th>' for t, num in head)
    body = []
    for row in rows:
        tds = []
        for (text, key), (_, num) in zip(row, head):
            attrs = (' class="num"' if num else "") + (f' data-v="{key}"' if key is not None else "")
            tds.append(f"<td{attrs}>{text}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    cls = ' class="sortable"' if sortable else ""
    return (f'<div class="tablewrap"><table id="{ident}"{cls}><thead><tr>{ths}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _sec_cell(s: float) -> tuple[str, Any]:
    return esc(seconds(s)), f"{s:.6g}"


def _misses(functions: list[dict[str, Any]]) -> str:
    misses = sorted(((f, m) for f in functions for m in f["misses"]), key=lambda fm: fm[1]["seq"])
    if not misses:
        return _section("misses", "Misses", '<p class="note">No misses recorded.</p>')
    head = [("#", True), ("function", False), ("kind", False), ("explanation", False), ("call site", False),
            ("trace", True), ("lower", True), ("compile", True), ("total", True)]
    rows = [[(str(m["seq"]), m["seq"]), (esc(f["function"]), None),
             (f'<span class="kind k-{esc(m["kind"])}">{esc(m["kind"])}</span>', None),
             (esc(m["explanation"]), None), (f'<span class="mono">{esc(m["call_site"])}</span>', None),
             _sec_cell(m["trace_s"]), _sec_cell(m["lower_s"]), _sec_cell(m["compile_s"]), _sec_cell(m["total_s"])]
            for f, m in misses[:MAX_MISSES]]
    more = len(misses) - len(rows)
    dropped = sum(f["dropped"] for f in functions)
    notes = "".join(f'<p class="note">{t}</p>' for t in (
        f"{more} more misses are in the JSON report." if more else "",
        f"{dropped} older misses were dropped (raise max_records to keep them)." if dropped else "") if t)
    return _section("misses", f"Misses ({len(misses)})", '<p class="note">Click a column to sort.</p>'
                    + _table("miss-table", head, rows) + notes)


def _unwatched(unwatched: list[tuple[str, int, float]]) -> str:
    if not unwatched:
        return _section("unwatched", "Compiles outside watched functions", '<p class="note">None recorded.</p>')
    rows = [[(esc(name), None), (str(c), c), _sec_cell(s)] for name, c, s in unwatched]
    return _section("unwatched", "Compiles outside watched functions",
                    _table("unwatched-table", [("name", False), ("compiles", True), ("seconds", True)], rows))


def _environment(env: dict[str, Any]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in env.items())
    return _section("environment", "Environment", f'<dl class="env">{items}</dl>')


def _merged_body(v: dict[str, Any]) -> str:
    n, divs = len(v["processes"]), v["divergences"]
    summary = (f"{len(divs)} divergent compile{'s' * (len(divs) != 1)} across {n} processes" if divs
               else f"no divergence: all {n} processes compiled the same signatures")
    stats = [_stat(str(len(divs)), "divergent compiles", bool(divs)), _stat(str(n), "processes"),
             _stat(str(sum(f["compiles"] for f in v["functions"])), "compiles, all processes"),
             _stat(seconds(sum(f["total_s"] for f in v["functions"])), "tracing and compiling")]
    parts = [_header("merged report", f"{n} processes", summary, stats)]
    if divs:
        rows = [[(esc(d["function"]), None), (esc(", ".join(map(str, d["compiled_by"]))), None),
                 (esc(", ".join(map(str, d["not_compiled_by"]))), None),
                 (f'<span class="mono">{esc(d["signature"])}</span>', None), (esc(d["difference"]), None)]
                for d in divs]
        head = [("function", False), ("compiled by", False), ("not by", False), ("signature", False),
                ("differs in", False)]
        parts.append(_section("divergences", "Divergences", _table("divergence-table", head, rows)))
    else:
        parts.append(_section("divergences", "Divergences", '<p class="note">None: every process compiled '
                                                            'the same signatures.</p>'))
    head = [("function", False), ("compiles", True), ("seconds", True)] + [(f"p{p}", True) for p in v["columns"]]
    rows = []
    for f in v["functions"]:
        counts = [c for c in f["by_process"] if c is not None]
        tally = sorted(((counts.count(c), c) for c in set(counts)), reverse=True)
        # The odd ones out differ from the one count most processes share; with no such count, all do.
        usual = tally[0][1] if len(tally) == 1 or tally[0][0] > tally[1][0] else None
        cells = [(esc(f["function"]), None), (str(f["compiles"]), f["compiles"]), _sec_cell(f["total_s"])]
        for c in f["by_process"]:
            shown = "\u2013" if c is None else str(c)
            mark = ' class="differs"' if c != usual and len(tally) > 1 else ""
            cells.append((f"<span{mark}>{shown}</span>" if mark else shown, -1 if c is None else c))
        rows.append(cells)
    parts.append(_section("per-process", "Compiles per function, a column per process",
                          _table("process-table", head, rows)))
    prow = [[(esc(p["process_index"]), None), (esc(p.get("host")), None), (esc(p.get("pid")), None),
             (f'<span class="mono">{esc(p.get("file"))}</span>', None)] for p in v["processes"]]
    parts.append(_section("processes", "Processes", _table(
        "processes-table", [("process", False), ("host", False), ("pid", False), ("file", False)], prow)))
    return "".join(parts)
