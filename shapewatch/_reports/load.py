"""Reading a saved JSON report of either schema, with one clear error for every way a file can be wrong.

:func:`normalise_report` is the one place that turns schema 1 or 2 into the
in-memory form that every reader (text, diff, merge, HTML) uses.
"""

from __future__ import annotations

import json
from typing import Any

from shapewatch._reports import compact as _compact

#: The schemas read: 1 (each miss with its signature) and 2 (structures and signatures stored once).
SCHEMAS = (_compact.SCHEMA_1, _compact.SCHEMA_2)


class ReportFileError(Exception):
    """A saved report that cannot be read: missing, truncated, or not of a known schema."""


def load_report(path: str) -> dict[str, Any]:
    """Reads a saved report of either schema, as :func:`normalise_report` returns it.

    Any problem is a :class:`ReportFileError` naming the file.
    """
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ReportFileError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise ReportFileError(f"{path}: not valid JSON (truncated or not a shapewatch report): {e.msg} at line {e.lineno}") from None
    except RecursionError:
        raise ReportFileError(f"{path}: not a shapewatch report (JSON nested too deeply to read)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportFileError(f"{path}: cannot be read: {e}") from None
    return normalise_report(data, path)


def normalise_report(data: Any, name: str = "the report") -> dict[str, Any]:
    """The one in-memory form of a report, from schema 1 or 2 (a loaded file, or ``Report.to_dict``).

    It is the schema 1 layout: every miss with its signature inline (shared, so
    treat it as read-only). Text, diff, merge and HTML read this form. Any problem
    is a :class:`ReportFileError` that starts with ``name``.
    """
    if not isinstance(data, dict) or "schema" not in data:
        raise ReportFileError(f"{name}: not a shapewatch report (no \"schema\" field)")
    schema = data["schema"]
    if schema not in SCHEMAS:
        raise ReportFileError(f"{name}: schema {schema!r} is not supported; this shapewatch reads "
                              f"{' and '.join(map(repr, SCHEMAS))}")
    if not isinstance(data.get("functions"), list) or "summary" not in data:
        raise ReportFileError(f"{name}: a {schema} report without its \"functions\" or \"summary\" (truncated?)")
    if schema == _compact.SCHEMA_2:
        problem = _compact.problem(data)
        if problem:
            raise ReportFileError(f"{name}: not a complete {schema} report: {problem}")
        data = _compact.expand(data)
    problem = _problem(data)
    if problem:
        raise ReportFileError(f"{name}: not a complete {schema} report: {problem}")
    return data


_NUMBER = (int, float)
# The fields that show, diff and merge read, with their JSON types (README, "JSON schema").
_REPORT = {"summary": str, "functions": list}
_FUNCTION = {"key": str, "function": str, "location": str, "compiles": int, "kinds": dict,
             "signatures": int, "trace_s": _NUMBER, "lower_s": _NUMBER, "compile_s": _NUMBER,
             "total_s": _NUMBER, "causes": list, "misses": list}
_CAUSE = {"kind": str, "path": str, "text": str, "fix": str}
_MISS = {"seq": int, "kind": str, "call_site": (str, type(None)), "explanation": str, "total_s": _NUMBER,
         "signature": (dict, type(None))}
_SIGNATURE = {"arrays": list, "statics": list}
_UNWATCHED = {"compiles": int, "seconds": _NUMBER}
_TYPE_NAMES = {str: "a string", list: "a list", dict: "an object", int: "an integer", _NUMBER: "a number"}


def _missing(obj: Any, fields: dict[str, Any], where: str) -> str | None:
    if not isinstance(obj, dict):
        return f"{where} is {type(obj).__name__}, expected an object"
    for name, typ in fields.items():
        if name not in obj:
            return f"{where} has no \"{name}\""
        value = obj[name]
        if isinstance(value, bool) or not isinstance(value, typ):
            if typ == (str, type(None)) or typ == (dict, type(None)):
                expected = f"{_TYPE_NAMES[typ[0]]} or null"
            else:
                expected = _TYPE_NAMES.get(typ, str(typ))
            return f"{where}[\"{name}\"] is {value!r:.40}, expected {expected}"
    return None


def _problem(data: dict[str, Any]) -> str | None:
    """The first missing or mistyped field, described; None for a complete report."""
    problem = _missing(data, _REPORT, "the report")
    for i, f in enumerate(data["functions"]):
        name = f" ({f['function']})" if isinstance(f, dict) and isinstance(f.get("function"), str) else ""
        where = f"functions[{i}]{name}"
        problem = problem or _missing(f, _FUNCTION, where)
        if problem:
            return problem
        for j, c in enumerate(f["causes"]):
            problem = problem or _missing(c, _CAUSE, f"{where} causes[{j}]")
        for j, m in enumerate(f["misses"]):
            problem = problem or _missing(m, _MISS, f"{where} misses[{j}]")
            if problem is None and m["signature"] is not None:
                problem = _missing(m["signature"], _SIGNATURE, f"{where} misses[{j}] signature")
        if problem:
            return problem
    unwatched = data.get("unwatched", {})
    if not isinstance(unwatched, dict):
        return f"\"unwatched\" is {type(unwatched).__name__}, expected an object"
    for name, v in unwatched.items():
        problem = problem or _missing(v, _UNWATCHED, f"unwatched[{name!r}]")
    return problem
