"""Reading a saved JSON report, with one clear error for every way a file can be wrong."""

from __future__ import annotations

import json
from typing import Any

from shapewatch._reports.report import SCHEMA


class ReportFileError(Exception):
    """A saved report that cannot be read: missing, truncated, or not of a known schema."""


def load_report(path: str) -> dict[str, Any]:
    """Reads a saved report; any problem is a :class:`ReportFileError` naming the file."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ReportFileError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise ReportFileError(f"{path}: not valid JSON (truncated or not a shapewatch report): {e.msg} at line {e.lineno}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportFileError(f"{path}: cannot be read: {e}") from None
    if not isinstance(data, dict) or "schema" not in data:
        raise ReportFileError(f"{path}: not a shapewatch report (no \"schema\" field)")
    if data["schema"] != SCHEMA:
        raise ReportFileError(f"{path}: schema {data['schema']!r} is not supported; this shapewatch reads {SCHEMA!r}")
    if not isinstance(data.get("functions"), list) or "summary" not in data:
        raise ReportFileError(f"{path}: a {SCHEMA} report without its \"functions\" or \"summary\" (truncated?)")
    return data
