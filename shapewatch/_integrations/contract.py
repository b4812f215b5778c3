"""The shape contract: a checked-in run manifest as the set of signatures a program may compile.

``shapewatch run --expect manifest.json script.py`` (exit status 3) and
``with shapewatch.expect_manifest("manifest.json"):`` (raises
:class:`~shapewatch.ManifestError`, so a test fails) name each function that
compiled a signature outside the manifest, the new signature, and how it differs
from the nearest one the manifest allows.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from shapewatch._monitor.errors import ManifestError
from shapewatch._monitor.records import COMPILING_KINDS
from shapewatch._reports.manifest import load_manifest, signature_id

EXPECT_FAILED = 3


def violations(manifest: dict[str, Any], misses: list[Any], source: str = "the manifest") -> list[str]:
    """One message per (function, signature) among ``misses`` that ``manifest`` does not hold."""
    from shapewatch._reports.merge import differences

    allowed: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for f in manifest.get("functions", []):
        allowed.setdefault((f["module"], f["qualname"]), {}).update(
            {s["id"]: s.get("signature") for s in f.get("signatures", [])})
    out, seen = [], set()
    for m in misses:
        if m.kind not in COMPILING_KINDS:
            continue
        sig = m.signature.to_dict() if m.signature is not None else None
        sid = signature_id(sig)
        known = allowed.get((m.module, m.function))
        if (m.module, m.function, sid) in seen or (known is not None and sid in known):
            continue
        seen.add((m.module, m.function, sid))
        text = m.signature.short() if m.signature is not None else "(unreadable signature)"
        if known is None:
            out.append(f"[shapewatch] {m.function} compiled ({text}), and {source} holds no signature of "
                       f"{m.function} ({m.module}) at all; if it is new and expected, write a new manifest "
                       "(shapewatch.write_manifest, or SHAPEWATCH_MANIFEST=PATH) and check it in")
            continue
        near = differences(sig, [s for s in known.values() if s]) if sig is not None else []
        how = "; ".join(t.replace("(the others: ", "(the manifest: ") for _, t in near) or "no comparable signature"
        out.append(f"[shapewatch] {m.function} compiled a signature outside {source}: {text}; it differs from "
                   f"the nearest allowed signature in {how}. Fix the shape (pad or bucket it), or, if it is "
                   "expected, write a new manifest and check it in")
    return out


def check_against(path: str | os.PathLike[str], misses: list[Any] | None = None) -> list[str]:
    """The violations of this process's compiles (or ``misses``) against the manifest at ``path``."""
    from shapewatch._reports.report import report

    manifest = load_manifest(path)
    if misses is None:
        misses = [m for f in report().functions for m in f.record.misses]
    return violations(manifest, misses, os.fspath(path))


@contextlib.contextmanager
def expect_manifest(path: str | os.PathLike[str]) -> Iterator[None]:
    """Fails when the block compiles a signature outside the manifest at ``path``.

    The pytest form of ``shapewatch run --expect``: wrap a test's steps in it.

    Args:
      path: a run manifest (``shapewatch.write_manifest``), checked in as the contract.

    Raises:
      ManifestError: at the end of the block, listing each function and new signature
        (also when the manifest cannot be read, before the block runs).

    >>> import shapewatch  # doctest: +SKIP
    >>> with shapewatch.expect_manifest("tests/train.manifest.json"):  # doctest: +SKIP
    ...     train_step(batch)
    """
    from shapewatch._guards import guards as _guards

    manifest = load_manifest(path)
    with _guards.section(_guards.Section(None, "collect", "expect_manifest", every_kind=True)) as sec:
        yield
    found = violations(manifest, list(sec.misses), os.fspath(path))
    if found:
        raise ManifestError("\n".join(found))
