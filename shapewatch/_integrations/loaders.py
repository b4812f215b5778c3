"""``compile_records(step)``: link an auto-bucketing loader to a watched step.

``buckets/`` imports nothing of ``_monitor``; a loader takes any callable that returns
compile records (objects with ``total_s``). This builds one for a watched step, with
``max_shapes`` set from the step's recompile budget when it has one.
"""

from __future__ import annotations

from typing import Any

from shapewatch._monitor.access import misses
from shapewatch._monitor.config import settings
from shapewatch._monitor.jit import hook_of
from shapewatch._monitor.records import COMPILING_KINDS

__all__ = ["compile_records"]


class _Records:
    """Callable: the step's compiling misses so far; ``max_shapes``: its budget's compiles."""

    def __init__(self, step: Any) -> None:
        hook = hook_of(step)
        if hook is None:
            raise TypeError(f"[shapewatch] compile_records needs a watched_jit function; got {step!r}")
        self._step = step
        self._hook = hook

    @property
    def max_shapes(self) -> int | None:
        """The step's budget + 1: its own ``max_recompiles``, else ``configure``'s, else None."""
        budget = self._hook.budget[0]
        if budget is None:
            budget = settings.max_recompiles
        return None if budget is None else int(budget) + 1

    def __call__(self) -> list[Any]:
        return [m for m in misses(self._step) if m.kind in COMPILING_KINDS]


def compile_records(step: Any) -> _Records:
    """A callable returning ``step``'s compile records, for ``group_by_length(...,
    compile_records=...)`` and ``bucketed``: the loader then takes each new shape's compile
    seconds from shapewatch's own records, and its ``max_shapes`` from the step's
    ``max_recompiles`` budget (budget + 1 compiles; its own, else the ``configure`` default)
    when it has one.

    Args:
        step: the ``watched_jit`` function the loader's batches are fed to.

    Returns:
        A callable with no arguments that returns ``step``'s compiling misses so far (read
            on each call), to pass as ``compile_records=``; its ``max_shapes`` is the step's
            budget + 1, or None.

    Raises:
        TypeError: if ``step`` is not a ``watched_jit`` function.
    """
    return _Records(step)
