"""``prior=``: learning from an earlier run, a saved loader report or a saved ``LengthObserver``
(``load_prior``), and turning its measured costs into ``propose``'s numbers (``auto_numbers``) (private)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from .._checks import fail
from .length_observer import LengthObserver

__all__ = ["load_prior", "auto_numbers"]


def load_prior(prior: Any) -> tuple[LengthObserver, dict[str, Any]]:
    """``(observer, costs)`` from a ``LengthObserver``, its ``to_dict()``, a loader's
    ``report()`` dict, or the path of a JSON file holding either.

    ``costs`` has ``compile_seconds`` and ``step_model`` when the report measured them.
    """
    if isinstance(prior, LengthObserver):
        return prior.copy(), {}
    source = None
    if isinstance(prior, str | os.PathLike):
        source = os.fspath(prior)
        try:
            with open(prior, encoding="utf-8") as fh:
                prior = json.load(fh)
        except (OSError, ValueError) as exc:
            raise fail(f"cannot read the saved report {source!r}: {exc}") from None
    try:
        return _parse(prior)
    except ValueError as exc:
        if source is None:
            raise
        msg = str(exc).removeprefix("[shapewatch]").strip()
        raise fail(f"the saved report {source!r}: {msg}") from None


def _parse(prior: Any) -> tuple[LengthObserver, dict[str, Any]]:
    if not isinstance(prior, dict):
        raise fail(
            "prior must be a LengthObserver, a saved loader report or LengthObserver (dict), "
            f"or the path of a JSON file of one; got {type(prior).__name__}"
        )
    if prior.get("shapewatch") == "buckets-report":
        costs = {k: prior.get(k) for k in ("compile_seconds", "step_model", "batches", "units", "sizing")}
        costs = {k: v for k, v in costs.items() if v is not None}
        measured = prior.get("measured")
        if isinstance(measured, dict) and isinstance(measured.get("unmeasured"), str):
            costs["unmeasured"] = measured["unmeasured"]  # that run's steps were a blind estimate
        _check_costs(costs)
        return LengthObserver.from_dict(prior.get("lengths") or {}), costs
    if "lengths" in prior and "counts" in prior:
        return LengthObserver.from_dict(prior), {}
    raise fail(
        "prior is neither a loader report (report()) nor a LengthObserver (to_dict()); "
        f"got a dict with keys {sorted(prior)}"
    )


def _number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


def _check_costs(costs: dict[str, Any]) -> None:
    """Refuse measured costs a report cannot hold (a corrupt or hand-edited file)."""
    if "compile_seconds" in costs and not _number(costs["compile_seconds"]):
        raise fail(f"compile_seconds must be a number >= 0; got {costs['compile_seconds']!r}")
    model = costs.get("step_model")
    if model is not None and not (isinstance(model, list | tuple) and len(model) == 3
                                  and all(_number(v) for v in model)):
        raise fail(f"step_model must be 3 numbers >= 0 (a, b, c of a + b*L + c*L^2); got {model!r}")
    units = costs.get("units")
    if units is not None and (isinstance(units, bool) or not isinstance(units, int) or units < 0):
        raise fail(f"units must be an int >= 0 (the examples of the run); got {units!r}")
    sizing = costs.get("sizing")
    if sizing is not None and not (isinstance(sizing, dict) and all(
            k in ("batch_size", "token_budget") and (v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1))
            for k, v in sizing.items())):
        raise fail(f"sizing must be {{'batch_size': int | None, 'token_budget': int | None}}; got {sizing!r}")
    batches = costs.get("batches")
    if batches is not None and (isinstance(batches, bool) or not isinstance(batches, int) or batches < 0):
        raise fail(f"batches must be an integer >= 0; got {batches!r}")


def auto_numbers(observer: LengthObserver, costs: dict[str, Any], compile_seconds: float | None,
                 steps: int | None, step_seconds: float | None) -> dict[str, Any]:
    """The cost numbers of ``max_buckets="auto"``: those given, else a saved report's
    (``costs`` from :func:`load_prior`): its compile seconds, its batches as the steps, and
    its step model at the longest length as the step; None where neither has one."""
    if step_seconds is None and costs.get("step_model"):
        a, beta, gamma = (float(v) for v in costs["step_model"])
        top = float(observer.max or 1)
        step_seconds = a + beta * top + gamma * top * top
    return {"compile_seconds": costs.get("compile_seconds") if compile_seconds is None else compile_seconds,
            "steps": costs.get("batches") if steps is None else steps,
            "step_seconds": step_seconds}
