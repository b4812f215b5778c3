"""The persistent compilation cache's part in a report: per-status counts and the time it could save.

Read from each compile's ``cache`` dict (``shapewatch._monitor.persistent``), in the
report's JSON form, so that saved and merged reports total the same way. A
persistent cache saves the backend compile only: tracing and lowering run again
in every process, hit or not, so they are "time no cache saves".
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from shapewatch._monitor.records import COMPILING_KINDS
from shapewatch._reports.analysis import counted


def cache_totals(functions: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per status and reason, JAX's estimate of the time saved, and the split of the rest.

    Returns:
      ``statuses`` ({status: compiles}), ``reasons`` ({reason: compiles} of those not written
      or not looked up), ``saved_s`` (JAX's estimate over the hits, negative estimates as 0),
      ``cacheable_s`` (backend compile seconds of the compiles that were not hits: what a
      cache hit would have saved) and ``uncacheable_s`` (tracing and lowering seconds of every
      compile, plus the load time of the hits: what no persistent cache saves).
    """
    statuses: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    saved = cacheable = uncacheable = 0.0
    for f in functions:
        for m in f.get("misses", []):
            if m.get("kind") not in COMPILING_KINDS or "cache" not in m:  # absent: saved before it was recorded
                continue
            cache = m.get("cache") or {"status": "unknown"}
            status = cache.get("status", "unknown")
            statuses[status] += 1
            uncacheable += m.get("trace_s", 0.0) + m.get("lower_s", 0.0)
            if status == "hit":
                saved += max(cache.get("saved_s") or 0.0, 0.0)
                uncacheable += m.get("compile_s", 0.0)
            else:
                cacheable += m.get("compile_s", 0.0)
                if cache.get("reason"):
                    reasons[f"{status}: {_reason_words(cache)}"] += 1
    return {"statuses": dict(statuses), "reasons": dict(reasons), "saved_s": saved,
            "cacheable_s": cacheable, "uncacheable_s": uncacheable}


def _status_words(n: int, status: str) -> str:
    """``2 hits``, ``1 not written``."""
    return counted(n, "hit") if status == "hit" else f"{n} {status.replace('_', ' ')}"


def _reason_words(cache: dict[str, Any]) -> str:
    reason = cache.get("reason")
    if reason == "below_min_compile_time":
        return f"under jax_persistent_cache_min_compile_time_secs={cache.get('threshold_s'):g}"
    return {"not_process_0": "not process 0 (only process 0 writes)",
            "not_configured": "jax_compilation_cache_dir not set",
            "disabled": "jax_enable_compilation_cache is False",
            "decided_off": "cache directory set after the first compile"}.get(reason, "reason unknown")


def cache_lines(functions: list[dict[str, Any]], seconds: Any) -> list[str]:
    """The report's lines on the persistent cache; ``seconds`` formats a time.

    None when nothing compiled, or when no compile looked at a cache (no directory set, or the
    cache disabled): each compile's ``cache`` in the JSON still says ``not_used`` and why.
    """
    t = cache_totals(functions)
    n = sum(t["statuses"].values())
    if not n or t["statuses"].get("not_used") == n:
        return []
    order = ("hit", "written", "not_written", "not_used", "unknown")
    parts = [_status_words(t["statuses"][s], s) for s in order if t["statuses"].get(s)]
    lines = [f"Persistent compilation cache: {counted(n, 'compile')}: {', '.join(parts)}"]
    lines += [f"  {k}: {v}" for k, v in sorted(t["reasons"].items())]
    lines.append(f"  compile time a cache hit would have saved: {seconds(t['cacheable_s'])}; time no cache saves "
                 f"(tracing, lowering, loading): {seconds(t['uncacheable_s'])}"
                 + (f"; saved by hits (JAX's estimate): {seconds(t['saved_s'])}" if t["statuses"].get("hit") else ""))
    return lines


def merged_cache(reports: Any, indices: list[Any]) -> dict[str, Any]:
    """The merged report's ``persistent_cache`` (totals per process) and ``across_runs`` (per process)."""
    totals = {str(i): cache_totals(rep["functions"]) for i, (_, rep) in zip(indices, reports)}
    across = [{**e, "process": i} for i, (_, rep) in zip(indices, reports) for e in rep.get("across_runs") or []]
    return {"persistent_cache": totals, "across_runs": across}


def merged_cache_lines(merged: dict[str, Any]) -> list[str]:
    """The merged report's lines: each process's cache statuses and reasons, then its across-run entries."""
    lines = []
    totals = merged.get("persistent_cache") or {}
    looked = any(set(t["statuses"]) - {"not_used"} for t in totals.values())  # as cache_lines: no cache, no section
    for proc, t in totals.items():
        if not t["statuses"] or not looked:
            continue
        parts = ", ".join(_status_words(n, s) for s, n in sorted(t["statuses"].items()))
        reasons = "; ".join(f"{k} x{v}" for k, v in sorted(t["reasons"].items()))
        lines.append(f"  p{proc}: {parts}" + (f" ({reasons})" if reasons else ""))
    if lines:
        lines = ["", "Persistent compilation cache per process:"] + lines
    across = merged.get("across_runs") or []
    if across:
        lines += ["", f"Across runs: {len(across)} signature{'s' * (len(across) != 1)} compiled again without a "
                      "persistent-cache hit:"]
        lines += [f"  p{e['process']} {e['function']}({e['signature']}): [{e['part']}] {e['why']}" for e in across]
    return lines
