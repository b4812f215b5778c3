"""shapewatch's exceptions and warnings, in one place."""

from __future__ import annotations

import logging
import traceback
import warnings


class ShapewatchWarning(UserWarning):
    """shapewatch itself failed; the watched program goes on unharmed."""


class RecompileWarning(UserWarning):
    """A watched function compiled more often than its budget allows."""


class RecompileError(RuntimeError):
    """A compile happened where a guard forbids it."""


class ManifestError(ValueError):
    """A run manifest that cannot be read (missing, truncated, not a manifest), or a run that
    compiled a signature outside the manifest it is checked against."""


for _cls in (ShapewatchWarning, RecompileWarning, RecompileError, ManifestError):
    _cls.__module__ = "shapewatch"
del _cls


_warned: set[str] = set()


def internal_failure(what: str) -> None:
    """shapewatch's own failure: warn once per kind, never raise.

    Not even under ``python -W error``: a warning turned into an error would break
    the user's program, so then the message goes to the ``shapewatch`` logger.
    """
    if what in _warned:
        return
    _warned.add(what)
    detail = traceback.format_exc(limit=3).strip().splitlines()[-1]
    message = (f"[shapewatch] internal error while {what} ({detail}); the watched program is unaffected, "
               "but this miss may be missing from the report or incomplete. Please report this.")
    try:
        warnings.warn(message, ShapewatchWarning, stacklevel=3)
    except Exception:
        logging.getLogger("shapewatch").warning("%s", message)
