"""Whether the HTML report's browser tests can run here, and whether they must.

They drive Debian's ``chromium`` through ``chromedriver`` (package ``chromium-driver``).
Where either is missing they are skipped with the command that installs both, except
where browser tests are required: under ``CI=true`` (``.ci/run`` installs both before
it runs ``make test`` so), a missing one fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping

INSTALL = "apt-get install chromium chromium-driver; .ci/run does it"


def chromium(which: Callable[[str], str | None] = shutil.which) -> str | None:
    return which("chromium") or which("chromium-browser")


def missing(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """What is missing for the browser tests, as a message with the install command, or None."""
    browser = chromium(which)
    if browser is None:
        return f"[shapewatch] no chromium on this machine ({INSTALL})"
    if which("chromedriver") is None:
        return f"[shapewatch] chromium is at {browser} but chromedriver is not ({INSTALL})"
    return None


def required(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a missing browser fails the browser tests rather than skipping them: ``CI=true``."""
    return environ.get("CI") == "true"
