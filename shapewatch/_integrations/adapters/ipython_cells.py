"""IPython and Jupyter: a notebook cell is named as Jupyter names it, ``In [3]``.

The code of a cell has no file of its own: IPython compiles it under a made-up
name (``<ipython-input-3-…>``; in a Jupyter kernel, a temporary file such as
``ipykernel_<pid>/<hash>.py`` in the temporary folder) and remembers which execution it came
from. A call site or a function defined in a cell is named by that execution
count and the line in the cell (``In [3]:2``), at the time of the miss, as the
cell's prompt showed it then; any other file keeps its ``file:line``.
"""

from __future__ import annotations

from typing import Any

from IPython.core.getipython import get_ipython

from shapewatch._monitor import adapt as _adapt


def _execution_count(shell: Any, filename: str) -> int | None:
    """The execution count of the cell IPython compiled under ``filename``, or None."""
    counts = getattr(getattr(shell, "compile", None), "_filename_map", None)  # IPython's own table
    number = counts.get(filename) if isinstance(counts, dict) else None
    return number if isinstance(number, int) else None


class IPythonCellsAdapter(_adapt.Adapter):
    name = "IPython"

    def place(self, filename: str, line: int) -> str | None:
        shell = get_ipython()
        if shell is None:
            return None
        number = _execution_count(shell, filename)
        return None if number is None else f"In [{number}]:{line}"


_adapt.register(IPythonCellsAdapter())
