"""shapewatch's own logger under ``shapewatch run``: silent unless asked.

A watched program that turns on INFO logging (absl's ``--alsologtostderr``,
``logging.basicConfig(level=logging.INFO)``) would otherwise get one
``[shapewatch] ... compile at ...`` line per compile on its stderr, which
``run`` promises to leave unchanged. Asked with ``-v`` or ``SHAPEWATCH_LOG``
(``info``, ``debug``, or ``1`` for info), the lines go to stderr through a
handler of shapewatch's own, whatever the program configures.
"""

from __future__ import annotations

import logging
import os
import sys

_LEVELS = {"1": logging.INFO, "true": logging.INFO, "yes": logging.INFO, "on": logging.INFO,
           "info": logging.INFO, "debug": logging.DEBUG, "0": None, "false": None, "no": None, "off": None, "": None}


def level_asked(verbose: int) -> int | None:
    """The level asked for by ``-v`` (``-vv``: debug) or ``SHAPEWATCH_LOG``, or None.

    Raises:
      ValueError: for a ``SHAPEWATCH_LOG`` that is not one of the valid values (listed).
    """
    text = os.environ.get("SHAPEWATCH_LOG", "").strip().lower()
    if text not in _LEVELS:
        raise ValueError(f"[shapewatch] SHAPEWATCH_LOG={text!r} is not valid: use info, debug, 1 (info) "
                         "or 0 (off).")
    asked = _LEVELS[text]
    if verbose:
        by_flag = logging.DEBUG if verbose > 1 else logging.INFO
        asked = by_flag if asked is None else min(asked, by_flag)
    return asked


def configure(level: int | None) -> None:
    """Silences shapewatch's INFO and DEBUG records (``level`` None), or prints them from ``level`` on."""
    logger = logging.getLogger("shapewatch")
    if level is None:
        logger.setLevel(logging.WARNING)  # its warnings (an internal failure) still reach the program's handlers
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False  # once, on stderr, not again through the program's own handlers
