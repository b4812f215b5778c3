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
    html_path: str | None = None
    max_records: int = 1000
    max_recompiles: int | None = None
    on_excess: str = "warn"
    library_modules: tuple[str, ...] = ()  # modules whose frames are never the user's call site
    manifest: str = "auto"  # the run manifest: "auto" (beside the persistent cache), "off" or a path


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
    if name == "library_modules" and (not isinstance(value, list | tuple) or not all(isinstance(m, str) and m for m in value)):
        raise ValueError(f"[shapewatch] library_modules={value!r} must be a list of module names, "
                         "e.g. ['my_team.training'].")
    if name == "manifest" and (not isinstance(value, str) or not value):
        raise ValueError(f"[shapewatch] manifest={value!r} must be 'auto' (beside jax_compilation_cache_dir), "
                         "'off', or a file path.")
    if name == "enabled" and not isinstance(value, bool):
        raise ValueError(f"[shapewatch] enabled={value!r} must be True or False.")
    return value


# Each variable: (setting, parser of its text, the valid values in words).
_VARIABLES = {
    "SHAPEWATCH": ("enabled", lambda v: _SWITCH[v.strip().lower()], "1 or 0 (also true/false, on/off, yes/no)"),
    "SHAPEWATCH_REPORT": ("report", lambda v: _check("report", _report_mode(v)),
                          ", ".join(REPORT_MODES) + ", or 0/false/no (off) and 1/true/yes/on (summary)"),
    "SHAPEWATCH_JSON": ("json_path", lambda v: v or None, "a path"),
    "SHAPEWATCH_TRACE": ("trace_path", lambda v: v or None, "a path"),
    "SHAPEWATCH_HTML": ("html_path", lambda v: v or None, "a path"),
    "SHAPEWATCH_MAX_RECORDS": ("max_records", lambda v: _check("max_records", int(v)), "an integer >= 1"),
    "SHAPEWATCH_MAX_RECOMPILES": ("max_recompiles", lambda v: _check("max_recompiles", int(v)),
                                  "an integer >= 0"),
    "SHAPEWATCH_ON_EXCESS": ("on_excess", lambda v: _check("on_excess", v.lower()), ", ".join(ON_EXCESS)),
    "SHAPEWATCH_MANIFEST": ("manifest", lambda v: _check("manifest", v), "auto, off or a path"),
    "SHAPEWATCH_LIBRARY_MODULES": ("library_modules", lambda v: tuple(m.strip() for m in v.split(",") if m.strip()),
                                   "module names separated by commas"),
}
# The words JAX's boolean flags take (jax._src.config.bool_env), around which spaces are ignored.
_SWITCH = {"1": True, "true": True, "t": True, "on": True, "yes": True, "y": True,
           "0": False, "false": False, "f": False, "off": False, "no": False, "n": False}


def _report_mode(text: str) -> str:
    """SHAPEWATCH_REPORT's mode: a mode's name, or a switch as JAX's flags take it (off, or the default report)."""
    word = text.strip().lower()
    if word in REPORT_MODES:
        return word
    switch = _SWITCH.get(word)
    if switch is None:
        return word
    return "summary" if switch else "off"


def from_environ(environ: os._Environ[str] | dict[str, str] = os.environ) -> Settings:
    """Reads the ``SHAPEWATCH*`` variables.

    A bad value is a :class:`ShapewatchWarning` naming the variable, its value and
    the valid values; that variable is ignored and every other one still applies
    (raising at import would stop the user's program).
    """
    import warnings

    from shapewatch._monitor.errors import ShapewatchWarning

    s = Settings()
    for variable, (name, parse, valid) in _VARIABLES.items():
        if variable not in environ:
            continue
        try:
            value = parse(environ[variable])
        except (KeyError, ValueError):
            warnings.warn(f"[shapewatch] {variable}={environ[variable]!r} is not valid: use {valid}. "
                          f"Ignoring it ({name} stays {getattr(s, name)!r}); the other settings apply.",
                          ShapewatchWarning, stacklevel=2)
            continue
        setattr(s, name, value)
    return s


settings = from_environ()


def configure(**options: Any) -> dict[str, Any]:
    """Changes shapewatch's settings for this process.

    Args:
      **options: any of ``enabled`` (bool), ``report`` (``"off"``, ``"summary"``,
        ``"full"``), ``json_path``, ``trace_path`` and ``html_path`` (str or None),
        ``max_records`` (records kept per function), ``max_recompiles``
        (default budget, None for none) and ``on_excess`` (``"warn"``,
        ``"raise"``, ``"log"``), ``library_modules`` (names of modules, such as a
        team's training library, whose frames are never shown as the call site,
        as JAX's and the frameworks' are not), ``manifest`` (the run manifest written at
        exit: ``"auto"``, beside ``jax_compilation_cache_dir`` when one is set; ``"off"``;
        or a path, ``{process}`` expanding). The same settings are read at import from
        ``SHAPEWATCH``, ``SHAPEWATCH_REPORT``, ``SHAPEWATCH_JSON``,
        ``SHAPEWATCH_TRACE``, ``SHAPEWATCH_HTML``, ``SHAPEWATCH_MAX_RECORDS``,
        ``SHAPEWATCH_MAX_RECOMPILES``, ``SHAPEWATCH_ON_EXCESS``, ``SHAPEWATCH_MANIFEST`` and
        ``SHAPEWATCH_LIBRARY_MODULES`` (comma-separated).

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
        setattr(settings, name, tuple(value) if name == "library_modules" else value)
    return old
