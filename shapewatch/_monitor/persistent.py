"""What JAX's persistent compilation cache did for each compile, from what JAX says.

JAX's backend compile (``compile_or_get_cached`` in ``jax/_src/compiler.py``, the
same from jax 0.5 to 0.12) records, on the compiling thread, inside the span of
its ``backend_compile_duration`` event:

* ``/jax/compilation_cache/compile_requests_use_cache`` when it looks the compile
  up in the persistent cache (never when the cache is not in use);
* ``.../cache_hits`` and the durations ``.../compile_time_saved_sec`` and
  ``.../cache_retrieval_time_sec`` when the executable came from the cache;
* ``.../cache_misses`` only when it *writes* an entry. A miss that is not written
  (a process other than 0, a compile under ``jax_persistent_cache_min_compile_time_secs``,
  an entry under ``jax_persistent_cache_min_entry_size_bytes``) records nothing:
  such a miss is a request with neither a hit nor a write.

These events carry no function name: :func:`on_event` and :func:`on_duration`
collect them per thread, and :func:`settle`, called from the backend compile's own
duration event (which ``events.py`` attributes to a miss), hands them to that
miss as its :data:`Miss.cache <shapewatch._monitor.records.Miss>` dict. A reason is
given only where JAX's own checks decide it (process index, threshold against a
time that bounds JAX's measurement from above); otherwise it is ``"unknown"``.

When a run manifest is being kept (``settings.manifest`` and a path for it),
:func:`with_program` also fingerprints the lowered program being compiled (read from
JAX's ``_cached_compilation`` frame, which holds it): the SHA-256 of its text
without debug locations (with them where ``jax_compilation_cache_include_metadata_in_key``
puts them into JAX's key), and the text itself while it is small.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import threading
import time
import zlib
from typing import Any

from shapewatch._monitor import key_parts as _key_parts

REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
HIT_EVENT = "/jax/compilation_cache/cache_hits"
WRITE_EVENT = "/jax/compilation_cache/cache_misses"  # recorded only where an entry is written
SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"
RETRIEVAL_EVENT = "/jax/compilation_cache/cache_retrieval_time_sec"
EVENTS = (REQUEST_EVENT, HIT_EVENT, WRITE_EVENT)
DURATIONS = (SAVED_EVENT, RETRIEVAL_EVENT)

#: What a compile's ``cache["status"]`` can be.
STATUSES = {
    "hit": "the executable was loaded from the persistent cache",
    "written": "compiled, and written to the persistent cache",
    "not_written": "compiled, looked up but not written (see the reason)",
    "not_used": "compiled without the persistent cache (see the reason)",
    "unknown": "JAX gave no signal this shapewatch could read",
}
#: The frame of JAX's backend compile that holds the lowered module (``computation``).
COMPILATION_FRAME = "_cached_compilation"
CACHE_FRAME = "compile_or_get_cached"
MAX_PROGRAM_TEXT = 256 * 1024  # characters of program text kept for a first-differing-line diff

_local = threading.local()


def on_event(event: str) -> None:
    """Collects a persistent-cache event on the compiling thread."""
    if event == REQUEST_EVENT:
        _local.pending = {"requested": time.monotonic(), "key": _cache_key(sys._getframe(1))}
        return
    pending = getattr(_local, "pending", None)
    if pending is None:
        return
    if event == HIT_EVENT:
        pending["hit"] = True
    elif event == WRITE_EVENT:
        pending["written"] = True
    if pending.get("key") is None:
        pending["key"] = _cache_key(sys._getframe(1))


def on_duration(event: str, seconds: float) -> None:
    pending = getattr(_local, "pending", None)
    if pending is not None:
        pending["saved_s" if event == SAVED_EVENT else "retrieval_s"] = float(seconds)


def _cache_key(frame: Any) -> str | None:
    """The key JAX computed for this compile, where its frame holds one (a hit or a write)."""
    while frame is not None:
        if frame.f_code.co_name == CACHE_FRAME:
            key = frame.f_locals.get("cache_key")
            return key if isinstance(key, str) else None
        frame = frame.f_back
    return None


def settle(compile_s: float) -> dict[str, Any]:
    """The cache truth of the backend compile that just ended on this thread (its duration given)."""
    pending = getattr(_local, "pending", None)
    _local.pending = None
    if not _key_parts.flags_at_first_compile:
        _key_parts.flags_at_first_compile.append(_key_parts.xla_flags())
    return _truth(pending, compile_s)


def with_program(truth: dict[str, Any]) -> dict[str, Any]:
    """``truth`` with the fingerprint of the program being compiled, while a manifest is kept
    (called for a watched function's compile only, from within JAX's backend compile)."""
    if manifest_kept():
        program = fingerprint(sys._getframe(1))
        if program is not None:
            truth["program"] = program
    return truth


def manifest_kept() -> bool:
    """Whether a run manifest will be written (then each compile's program is fingerprinted)."""
    from shapewatch._monitor.config import settings

    return settings.manifest != "off" and (settings.manifest != "auto" or bool(_config("jax_compilation_cache_dir")))


def _truth(pending: dict[str, Any] | None, compile_s: float) -> dict[str, Any]:
    # jax 0.12 looks up even without a directory; jax < 0.6 looks up in a cache it never opened
    if pending is None or not _config("jax_compilation_cache_dir") or _never_opened():
        reason, text = _not_used()
        return {"status": "not_used" if reason != "unknown" else "unknown", "reason": reason, "text": text}
    key = pending.get("key")
    if pending.get("hit"):
        saved = pending.get("saved_s")
        out: dict[str, Any] = {"status": "hit", "reason": None, "saved_s": saved,
                               "retrieval_s": pending.get("retrieval_s"), "key": key}
        out["text"] = "loaded from the persistent cache" + (
            f" (JAX's estimate of time saved: {max(saved, 0.0):.2f} s)" if saved is not None else "")
        return out
    if pending.get("written"):
        return {"status": "written", "reason": None, "key": key,
                "text": "compiled and written to the persistent cache"}
    upper = time.monotonic() - pending["requested"]  # bounds JAX's own compile time from above
    reason, text, threshold = _not_written(min(upper, compile_s))
    return {"status": "not_written", "reason": reason, "text": text, "threshold_s": threshold, "key": key}


def _not_written(upper_s: float) -> tuple[str, str, float | None]:
    """Why JAX looked a compile up and did not write it, in the order JAX checks."""
    from shapewatch._monitor.compat import distributed_state

    threshold = _config("jax_persistent_cache_min_compile_time_secs")
    process = getattr(distributed_state(), "process_id", 0) or 0
    if process != 0:
        return ("not_process_0", f"not written: only process 0 writes the persistent cache (this is process "
                                 f"{process}); a later run's process {process} finds an entry only where process 0 "
                                 "wrote the same key (one computation over every process's devices); a computation "
                                 "on this process's devices alone is never written", threshold)
    if isinstance(threshold, int | float) and upper_s < threshold:
        return ("below_min_compile_time",
                f"not written: compiled in {upper_s:.2f} s, under jax_persistent_cache_min_compile_time_secs="
                f"{threshold:g}; set it lower (0 writes every compile) to keep it for the next run", threshold)
    size = _config("jax_persistent_cache_min_entry_size_bytes")
    return ("unknown", "not written, and JAX gave no reason shapewatch can read (compile time "
                       f"<= {upper_s:.2f} s against jax_persistent_cache_min_compile_time_secs={threshold}; "
                       f"jax_persistent_cache_min_entry_size_bytes={size}; a host callback or a write error "
                       "also stop it: jax_explain_cache_misses=True makes JAX log which)", threshold)


def _not_used() -> tuple[str, str]:
    """Why a compile did not look at the persistent cache at all."""
    directory = _config("jax_compilation_cache_dir")
    if not directory:
        return ("not_configured", "no persistent cache: jax_compilation_cache_dir is not set (set it, or "
                                  "JAX_COMPILATION_CACHE_DIR, before the first compile)")
    if _config("jax_enable_compilation_cache") is False:
        return ("disabled", "no persistent cache: jax_enable_compilation_cache is False")
    try:
        from jax._src import compilation_cache as cc

        checked, used = getattr(cc, "_cache_checked", None), getattr(cc, "_cache_used", None)
    except Exception:
        checked = used = None
    if checked is True and used is False or _never_opened():
        return ("decided_off", f"no persistent cache: jax_compilation_cache_dir={directory!r} was set after JAX "
                               "decided, at this process's first compile, that there was no cache (or the directory "
                               "could not be opened); set it before anything compiles (jax#25768)")
    return ("unknown", "the persistent cache was not consulted, and JAX gave no reason shapewatch can read")


def _never_opened() -> bool:
    """JAX opened no cache and will not try again: it tried before a directory was set (jax < 0.6
    tries once, at the first compile), or opening the directory failed."""
    try:
        from jax._src import compilation_cache as cc

        return (bool(getattr(cc, "_cache_initialized", False)) and getattr(cc, "_cache", None) is None
                and bool(_config("jax_compilation_cache_dir")))
    except Exception:
        return False


def _config(name: str) -> Any:
    import jax

    try:
        return getattr(jax.config, name)
    except AttributeError:
        return None


def fingerprint(frame: Any) -> dict[str, Any] | None:
    """The fingerprint (and, while small, the text) of the lowered program JAX is compiling."""
    while frame is not None and frame.f_code.co_name != COMPILATION_FRAME:
        frame = frame.f_back
    if frame is None:
        return None
    module = frame.f_locals.get("computation")
    # the key hashes the program's source locations too where this is on (jax_compilation_cache_include_metadata_in_key)
    locations = bool(_config("jax_compilation_cache_include_metadata_in_key"))
    try:
        text = module.operation.get_asm(enable_debug_info=locations)
    except Exception:
        return None
    return program_entry(text)


def program_entry(text: str) -> dict[str, Any]:
    """``{"fingerprint", "lines", "text"}`` of a program's text (``text``: zlib + base64, or None when long)."""
    stored = None
    if len(text) <= MAX_PROGRAM_TEXT:
        stored = base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")
    return {"fingerprint": hashlib.sha256(text.encode()).hexdigest()[:32], "lines": text.count("\n") + 1,
            "text": stored}


def program_text(entry: dict[str, Any] | None) -> str | None:
    """The text stored by :func:`program_entry`, or None."""
    data = (entry or {}).get("text")
    if not data:
        return None
    try:
        return zlib.decompress(base64.b64decode(data)).decode()
    except Exception:
        return None
