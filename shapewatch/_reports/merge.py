"""Comparing and merging saved reports: ``shapewatch diff`` and ``shapewatch merge``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shapewatch._reports.cache_totals import merged_cache, merged_cache_lines
from shapewatch._reports.load import ReportFileError, load_report
from shapewatch._reports.render import seconds

COMPILING = ("compile", "persistent_cache_hit", "transform", "no_retrace")


def _cause_keys(f: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(c["kind"], c["path"]): c["text"] for c in f.get("causes", [])}


def diff_reports(before: dict[str, Any], after: dict[str, Any], name_a: str = "before",
                 name_b: str = "after") -> str:
    """Compiles and compile seconds per function, and new and gone causes."""
    a = {f["key"]: f for f in before["functions"]}
    b = {f["key"]: f for f in after["functions"]}
    lines = [f"[shapewatch] diff {name_a} -> {name_b}", "",
             f"{'function':<40} {'compiles':>17} {'seconds':>23}"]
    tot = [0, 0, 0.0, 0.0]
    for key in list(a) + [k for k in b if k not in a]:
        fa, fb = a.get(key), b.get(key)
        ca, cb = (fa or {}).get("compiles", 0), (fb or {}).get("compiles", 0)
        sa, sb = (fa or {}).get("total_s", 0.0), (fb or {}).get("total_s", 0.0)
        tot = [tot[0] + ca, tot[1] + cb, tot[2] + sa, tot[3] + sb]
        name = (fa or fb)["function"]
        lines.append(f"{name[:40]:<40} {ca:>7} -> {cb:<7} {seconds(sa):>10} -> {seconds(sb):<10}")
    lines.append(f"{'total':<40} {tot[0]:>7} -> {tot[1]:<7} {seconds(tot[2]):>10} -> {seconds(tot[3]):<10}")
    gone, new = [], []
    for key in set(a) | set(b):
        ka, kb = _cause_keys(a.get(key, {})), _cause_keys(b.get(key, {}))
        gone += [ka[k] for k in ka if k not in kb]
        new += [kb[k] for k in kb if k not in ka]
    lines.append("")
    lines += [f"gone: {t}" for t in sorted(gone)] or ["gone: (no cause disappeared)"]
    lines += [f"new:  {t}" for t in sorted(new)] or ["new:  (no new cause)"]
    return "\n".join(lines)


def processes(ps: Sequence[Any]) -> str:
    """``process 1`` or ``processes 0, 2``."""
    return ("process " if len(ps) == 1 else "processes ") + ", ".join(map(str, ps))


def across_processes(sig: dict[str, Any]) -> dict[str, Any]:
    """``sig`` as processes compare it: each process has its own devices, so a leaf on one
    device keeps only its committedness (and, committed, its memory kind) and a mesh leaf its
    mesh shape, spec and memory kind."""
    arrays = []
    for a in sig["arrays"]:
        p = a.get("placement")
        if p:
            p = ({k: v for k, v in p.items() if k != "devices"} if p.get("mesh")
                 else {"committed": p.get("committed"),  # uncommitted: JAX places it (host input alike)
                       "memory_kind": (p.get("memory_kind") or "") if p.get("committed") else ""})
            a = {**a, "placement": p}
        arrays.append(a)
    return {**sig, "arrays": arrays}


def _sig_key(sig: dict[str, Any]) -> str:
    return json.dumps({"arrays": sig["arrays"], "statics": sig["statics"]}, sort_keys=True)


def _describe(sig: dict[str, Any]) -> str:
    parts = [f"{a['path']}: {a['dtype']}[{','.join(map(str, a['shape']))}]" for a in sig["arrays"][:4]]
    parts += [f"{s['path']}={s['value']}" for s in sig["statics"][:3]]
    return ", ".join(parts) or "(no arguments)"


def _placed(leaf: dict[str, Any], other: dict[str, Any] | None = None) -> str:
    """A leaf's placement in words, from its JSON: ``P('model',) on mesh {data: 2, model: 4}``
    (and its memory kind when ``other``'s differs)."""
    p = leaf.get("placement")
    if not p:
        return "unknown"
    where = f"{p['sharding']} on mesh {p['mesh']}" if p.get("mesh") else p.get("sharding", "one device")
    if other is not None and p.get("memory_kind") != (other.get("placement") or {}).get("memory_kind"):
        where += f" in {p.get('memory_kind') or 'default'} memory"
    return where + ("" if p.get("committed") else " (uncommitted)")


def differences(sig: dict[str, Any], others: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """What sets ``sig`` apart from the nearest of ``others``: ``(kind, text)`` pairs, the kind
    ``"shape"`` (a shape, dtype or weak type), ``"placement"`` or ``"static"``."""
    best: list[tuple[str, str]] | None = None
    for o in others:
        if [a["path"] for a in o["arrays"]] != [a["path"] for a in sig["arrays"]]:
            continue
        diffs = []
        for x, y in zip(sig["arrays"], o["arrays"]):
            if x["shape"] != y["shape"] and len(x["shape"]) == len(y["shape"]):
                diffs += [("shape", f"{x['path']}.shape[{i}]: {p} (the others: {q})")
                          for i, (p, q) in enumerate(zip(x["shape"], y["shape"])) if p != q]
            elif (x["shape"], x["dtype"], x.get("weak_type")) != (y["shape"], y["dtype"], y.get("weak_type")):
                diffs.append(("shape", f"{x['path']}: {x['dtype']}{x['shape']} (the others: {y['dtype']}{y['shape']})"))
            elif x.get("placement") != y.get("placement"):
                diffs.append(("placement", f"{x['path']} placed {_placed(x, y)} (the others: {_placed(y, x)})"))
        for x, y in zip(sig["statics"], o["statics"]):
            if x != y:
                diffs.append(("static", f"{x['path']} (static): {x['value']} (the others: {y['value']})"))
        if best is None or len(diffs) < len(best):
            best = diffs
    return best or []


def _difference(sig: dict[str, Any], others: Sequence[dict[str, Any]]) -> str:
    """What sets ``sig`` apart from the nearest of ``others`` (leaf and axis), in words."""
    found = differences(sig, others)
    return "; ".join(text for _, text in found) if found else "no comparable signature"


def merge_dicts(reports: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Merges per-process reports: totals per function over all processes, divergences first."""
    processes = []
    per_fn: dict[str, dict[str, Any]] = {}
    sigs: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    claimed = [rep.get("environment", {}).get("process_index", i) for i, (_, rep) in enumerate(reports)]
    by_file = len(set(claimed)) < len(claimed)  # single-process runs all say 0: number them by file
    for i, (path, rep) in enumerate(reports):
        env = rep.get("environment", {})
        proc = i if by_file else claimed[i]
        processes.append({"file": path, "process_index": proc, "host": env.get("hostname"), "pid": env.get("pid")})
        for f in rep["functions"]:
            agg = per_fn.setdefault(f["key"], {"key": f["key"], "function": f["function"], "compiles": 0,
                                               "total_s": 0.0, "by_process": {}})
            agg["compiles"] += f["compiles"]
            agg["total_s"] += f["total_s"]
            agg["by_process"][str(proc)] = f["compiles"]
            seen = sigs.setdefault(f["key"], {}).setdefault(proc, {})
            done: set[int] = set()  # misses of one signature share its dict: key it once
            for m in f["misses"]:
                sig = m.get("signature")
                if m["kind"] in COMPILING and sig and id(sig) not in done:
                    done.add(id(sig))
                    sig = across_processes(sig)
                    seen[_sig_key(sig)] = sig
    all_procs = [p["process_index"] for p in processes]
    divergences = []
    for key, by_proc in sigs.items():
        union = {k: s for d in by_proc.values() for k, s in d.items()}
        for k, sig in union.items():
            have = [p for p in all_procs if k in by_proc.get(p, {})]
            lack = [p for p in all_procs if k not in by_proc.get(p, {})]
            if have and lack:
                others = [s for p in lack for s in by_proc.get(p, {}).values()]
                divergences.append({
                    "function": per_fn[key]["function"], "signature": _describe(sig),
                    "compiled_by": have, "not_compiled_by": lack, "difference": _difference(sig, others),
                })
    note = (f"the files claim the process indices {claimed}, not one each: they are numbered by "
            "their order on the command line instead" if by_file else None)
    merged = {"schema": "shapewatch.merged/1", "processes": processes, "divergences": divergences,
              "functions": sorted(per_fn.values(), key=lambda f: -f["total_s"]), "note": note}
    merged.update(merged_cache(reports, [p["process_index"] for p in processes]))
    return merged


def render_merged(merged: dict[str, Any]) -> str:
    n = len(merged["processes"])
    lines = [f"[shapewatch] note: {merged['note']}"] if merged.get("note") else []
    if merged["divergences"]:
        lines.append(f"[shapewatch] {len(merged['divergences'])} divergent compile{'s' * (len(merged['divergences']) != 1)} across {n} processes:")
        for d in merged["divergences"]:
            lines.append(f"  {d['function']}: {processes(d['compiled_by'])} compiled "
                         f"({d['signature']}) that {processes(d['not_compiled_by'])} did not; "
                         f"differs in {d['difference']}")
    else:
        lines.append(f"[shapewatch] no divergence: all {n} processes compiled the same signatures.")
    lines.append("")
    lines.append(f"{'function':<40} {'compiles':>9} {'seconds':>10}  per process")
    for f in merged["functions"]:
        per = ", ".join(f"p{p}: {c}" for p, c in f["by_process"].items())
        lines.append(f"{f['function'][:40]:<40} {f['compiles']:>9} {seconds(f['total_s']):>10}  {per}")
    return "\n".join(lines + merged_cache_lines(merged))


def merge_reports(paths: Sequence[str]) -> dict[str, Any]:
    """Merges saved per-process JSON reports (``shapewatch merge`` in Python).

    Args:
      paths: the JSON reports (schema 1 or 2), one per process.

    Returns:
      The merged report (``"schema": "shapewatch.merged/1"``): ``processes`` (file,
        process index, host, pid), ``divergences`` (a signature some processes compiled
        and others did not: ``function``, ``signature``, ``compiled_by``,
        ``not_compiled_by``, ``difference``), ``functions`` (per function: ``compiles``,
        ``total_s`` and ``by_process`` compiles, costliest first) and ``note`` (set when
        the files' process indices were not one each, else None).

    Raises:
      ValueError: naming the file that is missing, truncated, not a shapewatch
        report, or of another schema version.
    """
    try:
        return merge_dicts([(p, load_report(p)) for p in paths])
    except ReportFileError as e:
        raise ValueError(f"[shapewatch] {e}") from None
