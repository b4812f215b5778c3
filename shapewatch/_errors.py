"""shapewatch's exceptions and warnings, in one place."""

from __future__ import annotations


class ShapewatchWarning(UserWarning):
    """shapewatch itself failed; the watched program goes on unharmed."""


class RecompileWarning(UserWarning):
    """A watched function compiled more often than its budget allows."""


class RecompileError(RuntimeError):
    """A compile happened where a guard forbids it."""


for _cls in (ShapewatchWarning, RecompileWarning, RecompileError):
    _cls.__module__ = "shapewatch"
del _cls
