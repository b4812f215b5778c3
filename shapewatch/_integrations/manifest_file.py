"""Writing the run manifest: on request (:func:`write_manifest`) and at exit.

The manifest's content and reading are the reports wing's (``_reports/manifest.py``);
writing it needs a report, so it lives here, above both.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
from collections.abc import Iterator

from shapewatch._monitor.errors import ManifestError
from shapewatch._reports import manifest as _manifest
from shapewatch._reports.manifest import build_manifest, default_path, previous_manifest
from shapewatch._reports.report import _atomic_write, report


def write_manifest(path: str | os.PathLike[str] | None = None) -> str | None:
    """Writes this run's manifest atomically and returns its path.

    Args:
      path: where to write it; by default beside ``jax_compilation_cache_dir``
        (``<dir>.shapewatch/<program>.p<process>.json``), or ``configure(manifest=PATH)``.

    Returns:
      The path written, or None when no path is given and the manifest is off (or
      there is no persistent cache directory under ``manifest="auto"``).

    Raises:
      ManifestError: when ``path`` holds another shapewatch version's manifest (never replaced).

    Each signature's lowered-program fingerprint is recorded only while a manifest is
    kept (``manifest`` not ``"off"``, and under ``"auto"`` a cache directory set), so a
    manifest written to an explicit path in a run that kept none has ``program`` null.

    >>> import jax.numpy as jnp, shapewatch, tempfile, os
    >>> f = shapewatch.watched_jit(lambda x: x + 1)
    >>> _ = f(jnp.ones(3))
    >>> path = shapewatch.write_manifest(os.path.join(tempfile.mkdtemp(), "m.json"))
    >>> [s["text"] for fn in shapewatch.load_manifest(path)["functions"] for s in fn["signatures"]][-1]
    'x: float32[3]'
    """
    target = os.fspath(path) if path is not None else default_path()
    if target is None:
        return None
    previous = previous_manifest(target)  # read before it is replaced: the across-run comparison needs it
    if target in _manifest._newer:
        raise ManifestError(f"[shapewatch] {target} holds another shapewatch version's manifest and is not replaced; "
                            "write this run's elsewhere (configure(manifest=PATH) or SHAPEWATCH_MANIFEST=PATH)")
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    with _locked(target):  # another run may have written it since it was read: merge with it as it is now
        current = _current(target, previous)
        data = build_manifest(report(), current)
        _atomic_write(target, json.dumps(data, separators=(",", ":")))
    _written.add(data["runs"][0]["id"])
    return target


_written: set[str] = set()  # the run ids this process wrote (a later write replaces them)


def _current(target: str, previous: dict | None) -> dict | None:
    """The manifest at ``target`` now, less this process's own earlier writes (``previous`` if unreadable)."""
    try:
        current = _manifest.load_manifest(target)
    except ManifestError:
        return previous
    runs = [r for r in current["runs"] if r.get("id") not in _written]
    functions = [{**f, "signatures": [s for s in f["signatures"] if s.get("run") not in _written]}
                 for f in current["functions"]]
    return {**current, "runs": runs, "functions": functions}


@contextlib.contextmanager
def _locked(target: str) -> Iterator[None]:
    """An exclusive lock on ``target``'s directory while it is read and replaced (no file is added; none
    where ``fcntl`` or a directory's lock is missing)."""
    try:
        import fcntl

        fd = os.open(os.path.dirname(os.path.abspath(target)), os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _at_exit() -> None:
    from shapewatch._monitor.config import settings
    from shapewatch._monitor.registry import registry

    if not settings.enabled or not registry.functions:
        return
    try:
        write_manifest()
    except ManifestError as e:  # never fail the program's exit
        sys.stderr.write(f"{e}\n")
    except Exception as e:
        sys.stderr.write(f"[shapewatch] could not write the run manifest at exit: {e}\n")


_installed = False


def install_exit_hook() -> None:
    """Writes the manifest at exit, after the report (atexit runs the later registration first)."""
    global _installed
    if not _installed:
        atexit.register(_at_exit)
        _installed = True
