"""What the framework adapters share: a package's folder, and the user's function by name."""

from __future__ import annotations

import os
from typing import Any

from shapewatch._monitor.signature import NamedArgs, bind_names, named_signature


def package_dir(module: Any) -> str:
    """The folder of a package (``.../flax/``), as a prefix of its files' names."""
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


def named(user_fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> NamedArgs:
    """The user's arguments paired with the user's function's parameter names."""
    return bind_names(named_signature(user_fun), args, kwargs)
