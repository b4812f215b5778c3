"""``python -m shapewatch run``: watch every ``jax.jit`` of an unmodified program."""

from __future__ import annotations

import functools
import sys
from typing import Any

import jax

from shapewatch._monitor.jit import watched_jit

_original: Any = None


@functools.wraps(jax.jit)
def _jit(fun: Any = None, /, *args: Any, **kwargs: Any) -> Any:
    if args:  # jax.jit's positional options (old jax): leave them to jax
        return _original(fun, *args, **kwargs)
    return watched_jit(fun, **kwargs) if fun is not None else watched_jit(**kwargs)


def install() -> None:
    """Replaces ``jax.jit`` (and every ``from jax import jit`` already made) by ``watched_jit``.

    JAX's own modules are left alone: their functions were jitted when JAX was
    imported, and compiles they make are reported as outside watched functions.
    """
    global _original
    if _original is not None:
        return
    _original = jax.jit
    jax.jit = _jit
    for name, module in list(sys.modules.items()):
        if module is None or name.startswith(("jax", "jaxlib", "shapewatch")):
            continue
        namespace = getattr(module, "__dict__", {})
        for attr, value in list(namespace.items()):
            if value is _original:
                namespace[attr] = _jit


def uninstall() -> None:
    global _original
    if _original is not None:
        jax.jit = _original
        _original = None
