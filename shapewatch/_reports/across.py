"""Why a signature an earlier run compiled was compiled again, without a persistent-cache hit.

Two manifests are compared (``shapewatch.manifest/1``, see ``manifest.py``): for
each signature the later run compiled without a hit that the earlier run also
compiled, the first of these that holds is the reason, named by its key part:

1. the later run did not use a persistent cache (``not_used``: why, with the fix);
2. the earlier run never wrote it (``never_written``: its own reason, the setting
   that would write it);
3. JAX computed the same key in both runs (then no part changed): it was written and is
   gone from the directory (``evicted``), else ``unknown``;
4. a per-run key part changed (``jaxlib``, ``XLA_FLAGS``, ``devices``, ...) or the
   lowered program did (``program``, with its first differing line);
5. otherwise ``unknown``: the key differs in a part no manifest records (the compile
   options), or JAX gave no signal.
"""

from __future__ import annotations

from typing import Any

from shapewatch._monitor.persistent import program_text

#: Configuration values that do not enter the key (they decide only what is written).
_NOT_IN_KEY = {"jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes",
               "jax_enable_compilation_cache", "jax_compilation_cache_max_size", "jax_compilation_cache_dir"}
_NAMES = (("jax", "jax"), ("jaxlib", "jaxlib"), ("backend", "backend"), ("platform_version", "platform version"),
          ("device_kind", "device kind"))


def key_differences(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, str]]:
    """``(part, text)`` for each per-run key part that differs, e.g. ``("jaxlib", "jaxlib 0.10.2 -> 0.12.0.1")``."""
    out = []
    for name, words in _NAMES:
        if before.get(name) != after.get(name):
            out.append((name, f"{words} {before.get(name)} -> {after.get(name)}"))
    if before.get("device_count") != after.get("device_count"):
        out.append(("devices", f"{before.get('device_count')} -> {after.get('device_count')} devices"))
    if before.get("process_count") != after.get("process_count"):
        out.append(("processes", f"{before.get('process_count')} -> {after.get('process_count')} processes"))
    a, b = before.get("xla_flags") or [], after.get("xla_flags") or []
    gained, lost = [f for f in b if f not in a], [f for f in a if f not in b]
    if gained or lost:
        words = ([f"gained {' '.join(gained)}"] if gained else []) + ([f"lost {' '.join(lost)}"] if lost else [])
        out.append(("xla_flags", f"XLA_FLAGS {' and '.join(words)}"))
    ca, cb = before.get("config") or {}, after.get("config") or {}
    for name in sorted(set(ca) | set(cb)):
        if name not in _NOT_IN_KEY and ca.get(name) != cb.get(name):
            out.append(("config", f"{name} {ca.get(name)!r} -> {cb.get(name)!r}"))
    return out


def program_difference(function: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """How the lowered program changed (its first differing line where both texts were kept), or None."""
    if not before or not after or before.get("fingerprint") == after.get("fingerprint"):
        return None
    head = f"the lowered program of {function} changed"
    a, b = program_text(before), program_text(after)
    if a is None or b is None:
        return f"{head} (fingerprint {before.get('fingerprint', '?')[:12]} -> {after.get('fingerprint', '?')[:12]})"
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"{head}: first differing line {i + 1}: {x.strip()[:100]!r} -> {y.strip()[:100]!r}"
    return f"{head}: {len(la)} -> {len(lb)} lines"


def _index(manifest: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(f["module"], f["qualname"], s["id"]): s for f in manifest.get("functions", [])
            for s in f.get("signatures", [])}


def _runs(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in manifest.get("runs", []) if isinstance(r, dict) and "id" in r}


def explain_across(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per signature of ``after``'s latest run compiled without a hit that ``before`` compiled.

    Each: ``function``, ``signature`` (text), ``status`` (of the compile in ``after``),
    ``part`` (``not_used``, ``never_written``, a key part, ``program``, ``evicted`` or
    ``unknown``), ``why`` (one line, ending with the fix where there is one) and ``earlier_run``.
    """
    earlier, runs_a, runs_b = _index(before), _runs(before), _runs(after)
    latest = after["runs"][0]["id"] if after.get("runs") else None
    out = []
    for f in after.get("functions", []):
        for s in f.get("signatures", []):
            cache = s.get("cache") or {}
            if s.get("run") != latest or cache.get("status") == "hit":
                continue
            prior = earlier.get((f["module"], f["qualname"], s["id"]))
            if prior is None:
                continue
            run_a = runs_a.get(prior.get("run"), {})
            part, why = _why(f["function"], prior, s, run_a.get("key", {}), runs_b.get(latest, {}).get("key", {}))
            out.append({"function": f["function"], "signature": s.get("text"), "status": cache.get("status"),
                        "part": part, "why": why, "earlier_run": prior.get("run")})
    return out


def _why(function: str, prior: dict[str, Any], now: dict[str, Any], key_a: dict[str, Any],
         key_b: dict[str, Any]) -> tuple[str, str]:
    cache_a, cache_b = prior.get("cache") or {}, now.get("cache") or {}
    if cache_b.get("status") == "not_used":
        return "not_used", cache_b.get("text") or "this run did not use the persistent cache"
    if cache_a.get("status") in ("not_written", "not_used"):
        text = str(cache_a.get("text") or "reason unknown").removeprefix("not written: ")
        return "never_written", f"never written by the earlier run: {text}"
    key = cache_a.get("key")
    if key and key == cache_b.get("key"):  # JAX computed the same key in both runs: no part of it changed
        if cache_a.get("status") == "written":
            return "evicted", (f"written by the earlier run with this same key, and no longer in "
                               f"{(key_b.get('config') or {}).get('jax_compilation_cache_dir')} when this run "
                               "looked (evicted by jax_compilation_cache_max_size, the directory cleared, or the "
                               "entry unreadable)")
        return "unknown", ("the same key as the earlier run's, and no hit; JAX gave no signal why "
                           "(jax_explain_cache_misses=True makes JAX log it)")
    changes = key_differences(key_a, key_b)
    program = program_difference(function, prior.get("program"), now.get("program"))
    if program is not None:
        changes.append(("program", program))
    dir_a = (key_a.get("config") or {}).get("jax_compilation_cache_dir")
    dir_b = (key_b.get("config") or {}).get("jax_compilation_cache_dir")
    if not changes and dir_a != dir_b:
        changes.append(("cache_dir", f"jax_compilation_cache_dir {dir_a!r} -> {dir_b!r}"))
    if changes:
        return changes[0][0], "; ".join(text for _, text in changes)
    if cache_a.get("status") == "unknown" or cache_b.get("status") == "unknown":
        return "unknown", "JAX gave no signal of what the cache did in one of the runs; shapewatch cannot tell why"
    return "unknown", ("the key changed in a part no manifest records (the compile options: device assignment, "
                       "compiler options), or the entry could not be read; jax_explain_cache_misses=True and "
                       "DEBUG logging of jax._src.cache_key print each part's hash")


def across_lines(entries: list[dict[str, Any]] | None, source: str | None = None) -> list[str]:
    """The report's lines on signatures compiled again across runs (none when there are none)."""
    if not entries:
        return []
    n = len(entries)
    head = (f"Across runs: {n} signature{'s' * (n != 1)} that an earlier run also compiled "
            f"{'was' if n == 1 else 'were'} compiled again without a persistent-cache hit"
            + (f" ({source})" if source else "") + ":")
    return [head] + [f"  {e['function']}({e['signature']}): [{e['part']}] {e['why']}" for e in entries]


def diff_manifests(before: dict[str, Any], after: dict[str, Any], name_a: str = "before",
                   name_b: str = "after") -> str:
    """``shapewatch diff RUN1 RUN2`` on two manifests: key parts, signatures compiled again and why, new, gone."""
    key_a = (before.get("runs") or [{}])[0].get("key", {})
    key_b = (after.get("runs") or [{}])[0].get("key", {})
    lines = [f"[shapewatch] diff {name_a} -> {name_b} (run manifests)", ""]
    changed = key_differences(key_a, key_b)
    lines.append("key parts: " + ("; ".join(t for _, t in changed) if changed else "the same"))
    entries = explain_across(before, after)
    lines += [""] + (across_lines(entries) or ["No signature of the earlier run was compiled again without a "
                                               "persistent-cache hit."])
    a, b = _index(before), _index(after)
    texts = {k: f"{k[1]}({s.get('text')})" for m in (a, b) for k, s in m.items()}
    new = sorted(texts[k] for k in b if k not in a)
    gone = sorted(texts[k] for k in a if k not in b)
    lines.append("")
    lines += [f"new:  {t}" for t in new] or ["new:  (no signature the earlier run did not compile)"]
    lines += [f"gone: {t}" for t in gone] or ["gone: (every signature of the earlier run compiled again)"]
    return "\n".join(lines)
