"""Helpers of the framework tests: the examples, imported as modules, and their lines."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def example(name: str) -> Any:
    """``examples/<name>.py`` imported afresh (its jit wrappers made now)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def line_of(path: str, text: str) -> int:
    """The number of the first line of ``path`` that contains ``text``."""
    with open(path) as fh:
        return next(i for i, line in enumerate(fh, 1) if text in line)
