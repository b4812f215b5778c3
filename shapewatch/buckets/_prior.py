"""Learning from an earlier run: a saved loader report or a saved ``LengthObserver`` (private)."""

from __future__ import annotations

import json
import os
from typing import Any

from ._common import fail
from ._observer import LengthObserver

__all__ = ["load_prior"]


def load_prior(prior: Any) -> tuple[LengthObserver, dict[str, Any]]:
    """``(observer, costs)`` from a ``LengthObserver``, its ``to_dict()``, a loader's
    ``report()`` dict, or the path of a JSON file holding either.

    ``costs`` has ``compile_seconds`` and ``step_model`` when the report measured them.
    """
    if isinstance(prior, LengthObserver):
        return prior.copy(), {}
    if isinstance(prior, str | os.PathLike):
        try:
            with open(prior, encoding="utf-8") as fh:
                prior = json.load(fh)
        except (OSError, ValueError) as exc:
            raise fail(f"cannot read the saved report {os.fspath(prior)!r}: {exc}") from None
    if not isinstance(prior, dict):
        raise fail(
            "prior must be a LengthObserver, a saved loader report or LengthObserver (dict), "
            f"or the path of a JSON file of one; got {type(prior).__name__}"
        )
    if prior.get("shapewatch") == "buckets-report":
        costs = {k: prior.get(k) for k in ("compile_seconds", "step_model", "batches")}
        return LengthObserver.from_dict(prior.get("lengths") or {}), {
            k: v for k, v in costs.items() if v is not None}
    if "lengths" in prior and "counts" in prior:
        return LengthObserver.from_dict(prior), {}
    raise fail(
        "prior is neither a loader report (report()) nor a LengthObserver (to_dict()); "
        f"got a dict with keys {sorted(prior)}"
    )
