"""IPython and Jupyter: a notebook cell is named as Jupyter names it, ``In [3]``.

The code of a cell has no file of its own: IPython compiles it under a made-up
name (``<ipython-input-3-…>``; in a Jupyter kernel, a temporary file such as
``ipykernel_<pid>/<hash>.py`` in the temporary folder) and remembers which execution it came
from. A call site or a function defined in a cell is named by that execution
count and the line in the cell (``In [3]:2``), at the time of the miss, as the
cell's prompt showed it then; any other file keeps its ``file:line``.

Code that a magic runs (``%%time``, ``%time``, ``%%timeit``, ``%%capture``) is
named by the cell that ran the magic: IPython compiles it under names of its own
(``<timed exec>``) or, for ``%%capture``, as a cell of the next execution count.
"""

from __future__ import annotations

import linecache
import os
import sys
import timeit
from typing import Any

import IPython
from IPython.core.getipython import get_ipython

from shapewatch._monitor import adapt as _adapt

_MAGIC_FILES = ("<timed exec>", "<timed eval>", "<magic-timeit>")  # %%time / %time, %%timeit
# Frames between a magic's code and the cell that ran the magic: IPython's own, and timeit's.
_MACHINERY = (os.path.dirname(IPython.__file__) + os.sep, os.path.abspath(timeit.__file__), "<decorator-gen-")


def _execution_count(shell: Any, filename: str) -> int | None:
    """The execution count of the cell IPython compiled under ``filename``, or None."""
    counts = getattr(getattr(shell, "compile", None), "_filename_map", None)  # IPython's own table
    number = counts.get(filename) if isinstance(counts, dict) else None
    return number if isinstance(number, int) else None


def _cell_that_ran_a_magic(shell: Any, filename: str, line: int) -> str | None:
    """``In [N]:line`` when the code of ``filename`` runs in a magic of cell N, else None."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename != filename:
        frame = frame.f_back
    if frame is None:
        return None
    caller = frame = frame.f_back
    while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
        frame = frame.f_back
    if frame is None or frame is caller:  # called by user code, not run by IPython
        return None
    number = _execution_count(shell, frame.f_code.co_filename)
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    if number is None or not ("run_cell_magic(" in text or "run_line_magic(" in text):
        return None
    if "run_cell_magic(" in text:
        return f"In [{number}]:{line + 1}"  # a cell magic's code starts on the cell's second line
    return f"In [{number}]:{frame.f_lineno}"  # a line magic: the line it is on


class IPythonCellsAdapter(_adapt.Adapter):
    name = "IPython"

    def place(self, filename: str, line: int) -> str | None:
        shell = get_ipython()
        if shell is None:
            return None
        number = _execution_count(shell, filename)
        if number is None and filename not in _MAGIC_FILES:
            return None
        by_magic = _cell_that_ran_a_magic(shell, filename, line)
        if by_magic is not None or number is None:
            return by_magic
        return f"In [{number}]:{line}"


_adapt.register(IPythonCellsAdapter())
