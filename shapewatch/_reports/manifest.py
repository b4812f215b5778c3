"""The run manifest: what a run compiled, and the cache-key parts it compiled under.

A small JSON file (schema ``shapewatch.manifest/1``), written atomically at exit
and by ``shapewatch.write_manifest`` (``_integrations/manifest_file.py``)::

    {"schema": "shapewatch.manifest/1", "program": "train.py", "process_index": 0,
     "runs": [{"id", "time", "key": {jax, jaxlib, backend, platform_version, device_kind,
               device_count, local_device_count, process_count, xla_flags, config}}],
     "functions": [{"module", "qualname", "function", "location",
                    "signatures": [{"id", "signature", "text", "run", "compiles", "compile_s",
                                    "cache", "program": {"fingerprint", "lines", "text"}}]}]}

``runs`` holds this run and up to four earlier ones, newest first; a signature an
earlier run compiled and this one did not is kept with its run's ``id`` until that
run is pruned, so the manifest is the set of signatures the program compiled
lately. Bounded: at most :data:`MAX_SIGNATURES` signatures, and program texts
(kept for the first differing line) dropped oldest first past :data:`MAX_TEXT_BYTES`.

Its default place (``configure(manifest="auto")``) is beside the persistent cache:
``<jax_compilation_cache_dir>.shapewatch/<program>.p<process>.json``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import sys
import threading
from typing import Any

from shapewatch._monitor.errors import ManifestError

SCHEMA = "shapewatch.manifest/1"
MAX_RUNS = 5
MAX_SIGNATURES = 2000
MAX_TEXT_BYTES = 4 * 1024 * 1024

_previous: dict[str, dict[str, Any] | None] = {}  # path -> the manifest as it was before this process wrote it
_newer: set[str] = set()  # paths holding another version's manifest: never replaced
_lock = threading.Lock()


def program_name() -> str:
    """The running program's name, as manifests are named by it (``train`` for ``train.py``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) and spec.name != "__main__":
        return spec.name
    name = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python")
    return os.path.splitext(name)[0] or "python"


def default_path(process: int | None = None) -> str | None:
    """Where the manifest is written by default, or None when it is off."""
    from shapewatch._monitor.config import settings
    from shapewatch._monitor.env import process_place

    process = process_place()[0] if process is None else process
    if settings.manifest == "off":
        return None
    if settings.manifest != "auto":
        return settings.manifest.format(process=process, pid=os.getpid())
    import jax

    directory = getattr(jax.config, "jax_compilation_cache_dir", None)
    if not directory or "://" in str(directory):
        return None
    directory = os.path.abspath(os.fspath(directory)).rstrip(os.sep)
    return os.path.join(directory + ".shapewatch", f"{program_name()}.p{process}.json")


#: A memory address in a static value's repr (``<Model object at 0x7f...>``): different in every run.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def signature_id(sig: dict[str, Any] | None) -> str:
    """A signature's identity across runs: shapes, dtypes, weak types and static values by path
    (a static value's repr without the memory address it may hold)."""
    if sig is None:
        return "unreadable"
    core = {"arrays": [[a["path"], a["shape"], a["dtype"], a.get("weak_type", False)] for a in sig["arrays"]],
            "statics": [[s["path"], _ADDRESS.sub("", str(s["value"]))] for s in sig.get("statics", [])]}
    return hashlib.sha1(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]


def load_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a manifest, checking its shape.

    Raises:
      ManifestError: naming the file and what is wrong with it.
    """
    path = os.fspath(path)
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ManifestError(f"[shapewatch] {path}: no such manifest") from None
    except (OSError, ValueError) as e:
        raise ManifestError(f"[shapewatch] {path}: not a readable shapewatch manifest ({e})") from None
    got = data.get("schema") if isinstance(data, dict) else type(data).__name__
    if isinstance(got, str) and got.startswith("shapewatch.manifest/") and got != SCHEMA:
        raise NewerManifestError(f"[shapewatch] {path}: a manifest of another shapewatch version (schema {got!r}; "
                                 f"this one reads {SCHEMA!r}); read it with the shapewatch that wrote it, or upgrade")
    if not isinstance(data, dict) or got != SCHEMA:
        raise ManifestError(f"[shapewatch] {path}: not a shapewatch manifest (schema {got!r}, expected {SCHEMA!r})")
    if not isinstance(data.get("runs"), list) or not isinstance(data.get("functions"), list):
        raise ManifestError(f"[shapewatch] {path}: a manifest needs \"runs\" and \"functions\" lists")
    _check_entries(path, data)
    return data


class NewerManifestError(ManifestError):
    """A manifest of another schema version (a newer shapewatch's): read, never replaced."""


def _check_entries(path: str, data: dict[str, Any]) -> None:
    """Raises ManifestError naming the first run or function entry that is not as ``SCHEMA`` has it."""
    for i, r in enumerate(data["runs"]):
        if not isinstance(r, dict) or not isinstance(r.get("id"), str):
            raise ManifestError(f"[shapewatch] {path}: runs[{i}] is {str(r)[:80]}, expected {{\"id\": str, ...}}")
    for i, f in enumerate(data["functions"]):
        sigs = f.get("signatures") if isinstance(f, dict) else None
        if (not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("module", "qualname", "function"))
                or not isinstance(sigs, list) or not all(isinstance(s, dict) and isinstance(s.get("id"), str)
                                                         for s in sigs)):
            raise ManifestError(f"[shapewatch] {path}: functions[{i}] is {str(f)[:80]}, expected {{\"module\", "
                                "\"qualname\", \"function\": str, \"signatures\": [{\"id\": str, ...}]}")


def previous_manifest(path: str | None = None) -> dict[str, Any] | None:
    """The manifest at ``path`` (default: :func:`default_path`) as it was before this process wrote it."""
    path = path or default_path()
    if path is None:
        return None
    with _lock:
        if path not in _previous:
            try:
                _previous[path] = load_manifest(path)
            except ManifestError as e:
                _previous[path] = None
                if os.path.exists(path):  # say so once; the program goes on
                    keep = isinstance(e, NewerManifestError)
                    sys.stderr.write(f"{e}; this run is not compared with it, and "
                                     + ("it is left as it is" if keep else "this run's manifest replaces it") + "\n")
                    if keep:
                        _newer.add(path)
        return _previous[path]


def _run_entry() -> dict[str, Any]:
    from shapewatch._monitor.key_parts import key_parts
    from shapewatch._monitor.registry import registry

    now = datetime.datetime.now(datetime.timezone.utc)
    return {"id": f"{now:%Y-%m-%dT%H:%M:%S}Z-{registry.pid}", "time": now.timestamp(), "key": key_parts()}


def build_manifest(report: Any, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest of a report (``shapewatch.report()``), carrying ``previous``'s recent signatures."""
    from shapewatch._monitor.records import COMPILING_KINDS

    run = _run_entry()
    functions: dict[tuple[str, str], dict[str, Any]] = {}
    for f in report.functions:
        r = f.record
        entry = functions.setdefault((r.module, r.function), {
            "module": r.module, "qualname": r.function, "function": r.function, "location": r.location,
            "signatures": {}})
        for m in r.misses:
            if m.kind not in COMPILING_KINDS:
                continue
            sig = m.signature.to_dict() if m.signature is not None else None
            sid = signature_id(sig)
            s = entry["signatures"].setdefault(sid, {
                "id": sid, "signature": sig, "text": m.signature.short() if m.signature is not None else None,
                "run": run["id"], "compiles": 0, "compile_s": 0.0, "cache": None, "program": None})
            s["compiles"] += 1
            s["compile_s"] += m.compile_s
            cache = dict(m.cache or {"status": "unknown"})
            program = cache.pop("program", None)
            s["cache"] = cache
            s["program"] = program or s["program"]
    runs = [run] + ([r for r in previous["runs"] if isinstance(r, dict)][:MAX_RUNS - 1] if previous else [])
    kept = {r["id"] for r in runs}
    for f in (previous or {}).get("functions", []):
        entry = functions.setdefault((f["module"], f["qualname"]), {**f, "signatures": {}})
        for s in f.get("signatures", []):
            if s.get("run") in kept and s.get("id") not in entry["signatures"]:
                entry["signatures"][s["id"]] = s
    out = [{**e, "signatures": list(e["signatures"].values())} for e in functions.values()]
    _bound(out, runs)
    process = run["key"].get("process_count")
    from shapewatch._monitor.env import process_place

    return {"schema": SCHEMA, "program": program_name(), "process_index": process_place()[0],
            "process_count": process, "runs": runs, "functions": [e for e in out if e["signatures"]]}


def _bound(functions: list[dict[str, Any]], runs: list[dict[str, Any]]) -> None:
    """Keeps the newest :data:`MAX_SIGNATURES` signatures and :data:`MAX_TEXT_BYTES` of program text."""
    age = {r["id"]: i for i, r in enumerate(runs)}
    every = sorted(((age.get(s.get("run"), len(runs)), f, s) for f in functions for s in f["signatures"]),
                   key=lambda t: t[0])
    for _, f, s in every[MAX_SIGNATURES:]:
        f["signatures"].remove(s)
    budget = MAX_TEXT_BYTES
    for _, _, s in every[:MAX_SIGNATURES]:
        program = s.get("program") or {}
        size = len(program.get("text") or "")
        if size > budget:
            s["program"] = {**program, "text": None}
        else:
            budget -= size
