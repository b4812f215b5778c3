"""Settings, from the environment and from :func:`configure`."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

REPORT_MODES = ("off", "summary", "full")
ON_EXCESS = ("warn", "raise", "log")


@dataclasses.dataclass
class Settings:
    enabled: bool = True
    report: str = "summary"
    json_path: str | None = None
    trace_path: str | None = None
    max_records: int = 1000
    max_recompiles: int | None = None
    on_excess: str = "warn"


def _bool(name: str, value: str) -> bool:
    if value.lower() in ("1", "true", "on", "yes"):
        return True
    if value.lower() in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"[shapewatch] {name}={value!r} is not a switch: use 1 or 0 (also true/false, on/off).")


def _check(name: str, value: Any) -> Any:
    if name == "report" and value not in REPORT_MODES:
        raise ValueError(f"[shapewatch] report={value!r} is not a report mode: use one of {', '.join(REPORT_MODES)}.")
    if name == "on_excess" and value not in ON_EXCESS:
        raise ValueError(f"[shapewatch] on_excess={value!r} is not valid: use one of {', '.join(ON_EXCESS)}.")
    if name in ("max_records",) and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"[shapewatch] max_records={value!r} must be an integer >= 1.")
    if name == "max_recompiles" and value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or value < 0
    ):
        raise ValueError(f"[shapewatch] max_recompiles={value!r} must be None or an integer >= 0.")
    if name == "enabled" and not isinstance(value, bool):
        raise ValueError(f"[shapewatch] enabled={value!r} must be True or False.")
    return value


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"[shapewatch] {name}={value!r} is not an integer.") from None


def from_environ(environ: os._Environ[str] | dict[str, str] = os.environ) -> Settings:
    """Reads ``SHAPEWATCH*`` variables; a bad value raises ``ValueError`` naming it."""
    s = Settings()
    if "SHAPEWATCH" in environ:
        s.enabled = _bool("SHAPEWATCH", environ["SHAPEWATCH"])
    if "SHAPEWATCH_REPORT" in environ:
        s.report = environ["SHAPEWATCH_REPORT"].lower()
        if s.report not in REPORT_MODES:
            raise ValueError(
                f"[shapewatch] SHAPEWATCH_REPORT={environ['SHAPEWATCH_REPORT']!r} is not a report mode: "
                f"use one of {', '.join(REPORT_MODES)}."
            )
    s.json_path = environ.get("SHAPEWATCH_JSON") or None
    s.trace_path = environ.get("SHAPEWATCH_TRACE") or None
    if "SHAPEWATCH_MAX_RECORDS" in environ:
        s.max_records = _check("max_records", _int("SHAPEWATCH_MAX_RECORDS", environ["SHAPEWATCH_MAX_RECORDS"]))
    if "SHAPEWATCH_MAX_RECOMPILES" in environ:
        s.max_recompiles = _check(
            "max_recompiles", _int("SHAPEWATCH_MAX_RECOMPILES", environ["SHAPEWATCH_MAX_RECOMPILES"])
        )
    if "SHAPEWATCH_ON_EXCESS" in environ:
        s.on_excess = _check("on_excess", environ["SHAPEWATCH_ON_EXCESS"].lower())
    return s


try:
    settings = from_environ()
except ValueError as _err:  # a bad variable must not stop the program from importing
    import warnings

    warnings.warn(f"{_err} Using the defaults.", stacklevel=1)
    settings = Settings()


def configure(**options: Any) -> dict[str, Any]:
    """Changes shapewatch's settings for this process.

    Args:
      **options: any of ``enabled`` (bool), ``report`` (``"off"``, ``"summary"``,
        ``"full"``), ``json_path`` and ``trace_path`` (str or None),
        ``max_records`` (records kept per function), ``max_recompiles``
        (default budget, None for none) and ``on_excess`` (``"warn"``,
        ``"raise"``, ``"log"``). The same settings are read at import from
        ``SHAPEWATCH``, ``SHAPEWATCH_REPORT``, ``SHAPEWATCH_JSON``,
        ``SHAPEWATCH_TRACE``, ``SHAPEWATCH_MAX_RECORDS``,
        ``SHAPEWATCH_MAX_RECOMPILES`` and ``SHAPEWATCH_ON_EXCESS``.

    Returns:
      The previous values of the options given, so that they can be restored.

    Raises:
      ValueError: for an unknown option or a bad value; nothing is changed then.

    >>> import shapewatch
    >>> old = shapewatch.configure(report="full")
    >>> old
    {'report': 'summary'}
    >>> _ = shapewatch.configure(**old)
    """
    fields = {f.name for f in dataclasses.fields(Settings)}
    for name, value in options.items():
        if name not in fields:
            raise ValueError(f"[shapewatch] configure() has no option {name!r}: use one of {', '.join(sorted(fields))}.")
        _check(name, value)
    old = {name: getattr(settings, name) for name in options}
    for name, value in options.items():
        setattr(settings, name, value)
    return old
