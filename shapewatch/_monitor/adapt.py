"""The framework-neutral interface through which jit wrappers are seen in the user's terms.

Frameworks such as Equinox and Flax wrap ``jax.jit``: the function JAX traces is
theirs, its arguments are their flattened pieces, and their frames sit between the
user's call and the trace. An :class:`Adapter` answers, for one framework: is this
function a wrapper of mine, what is the user's function and how are its arguments
named (:meth:`Adapter.resolve`), which jitted object lies inside a wrapper object
(:meth:`Adapter.jitted`), how is a key of a leaf's path written
(:meth:`Adapter.key_text`), which files are library code
(:meth:`Adapter.library_dirs`), and how a line of code is named in reports
(:meth:`Adapter.place`: a notebook cell as ``In [3]:2``).

The monitor knows no framework: adapters live in ``shapewatch/_integrations/adapters/``
and are registered with :func:`register`, or with :func:`register_when_imported`,
which loads one only once its framework's module is imported. Everything here runs
on a cache miss, or when a guard or ``misses()`` looks a function up; never on a
cached call.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

import jax

from shapewatch._monitor.config import settings
from shapewatch._monitor.errors import internal_failure


class Adapter:
    """One framework's answers; every method may say "not mine" (None, or nothing)."""

    name = "framework"
    #: asked after every other adapter (a framework-neutral naming that a framework's own overrides)
    fallback = False

    def library_dirs(self) -> Iterable[str]:
        """Files (or folders, ending in ``os.sep``) whose frames are never the user's call site."""
        return ()

    def resolve(self, fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """For a function that JAX traces, ``(user's function, its arguments by name)``, or None.

        The arguments by name are ``(name, value)`` pairs (``signature.bind_names``
        gives them with the call convention) whose values are the tracers in the
        user's own containers; None there leaves the naming to the user's function's
        signature.
        """
        return None

    def call_signature(self, fun: Any) -> inspect.Signature | None:
        """The parameters a callable of this framework is called by, where its own signature
        hides them (linen's ``module.apply``: ``variables`` and the module's ``__call__``), or None."""
        return None

    def jitted(self, obj: Any) -> Any:
        """The ``jax.jit`` object inside a wrapper object of this framework, or None."""
        return None

    def key_text(self, key: Any) -> str | None:
        """How one entry of a leaf's key path is written, or None to leave it to JAX."""
        return None

    def place(self, filename: str, line: int) -> str | None:
        """How line ``line`` of ``filename`` is named in reports, or None for ``file:line``.

        Code that has no file of its own (a notebook cell, whose file is the kernel's
        temporary one) is named as its tool names it, keeping the ``name:line`` form.
        """
        return None

    def jit_replaced(self) -> None:
        """``jax.jit`` was replaced (``watch``) or put back: drop the framework's own caches
        of ``jax.jit`` objects, so that functions it wraps from now on get the new one."""


_adapters: list[Adapter] = []
_pending: dict[str, list[Callable[[], Any]]] = {}  # module name -> loaders of its adapters
_lock = threading.Lock()
_dirs_cache: dict[Any, tuple[str, ...]] = {}


def register(adapter: Adapter) -> Adapter:
    """Adds an adapter (once); returns it."""
    with _lock:
        if all(type(a) is not type(adapter) for a in _adapters):
            _adapters.append(adapter)
            _dirs_cache.clear()
    return adapter


def unregister(adapter: Adapter) -> None:
    with _lock:
        _adapters[:] = [a for a in _adapters if a is not adapter]
        _dirs_cache.clear()


def register_when_imported(module: str, load: Callable[[], Any]) -> None:
    """Calls ``load`` (which registers an adapter) once ``module`` is imported; at once if it is."""
    with _lock:
        _pending.setdefault(module, []).append(load)
    _load_imported()


def _load_imported() -> None:
    if not _pending:
        return
    with _lock:
        ready = [m for m in _pending if m in sys.modules]
        loads = [load for m in ready for load in _pending.pop(m)]
    for load in loads:
        try:
            load()
        except Exception:
            internal_failure("loading a framework adapter")


def jit_replaced() -> None:
    """Tells every adapter that ``jax.jit`` was replaced or put back."""
    for adapter in adapters():
        try:
            adapter.jit_replaced()
        except Exception:
            internal_failure(f"refreshing {adapter.name}'s jit caches")


def adapters() -> list[Adapter]:
    """The registered adapters, after loading those whose framework was imported since."""
    _load_imported()
    return sorted(_adapters, key=lambda a: a.fallback)


def resolve(fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(the user's function, its arguments by name or None)`` for a traced function."""
    for adapter in adapters():
        try:
            found = adapter.resolve(fun, args, kwargs)
        except Exception:
            internal_failure(f"reading a {adapter.name} function")
            continue
        if found is not None:
            return found
    return fun, None


def jitted(obj: Any) -> Any:
    """The ``jax.jit`` object inside a framework's wrapper object, or None."""
    for adapter in adapters():
        inner = adapter.jitted(obj)
        if inner is not None:
            return inner
    return None


def place(filename: str, line: int) -> str:
    """``file:line`` of a line of code, or the name an adapter gives it (``In [3]:2`` for a notebook cell)."""
    for adapter in adapters():
        try:
            named = adapter.place(filename, line)
        except Exception:
            internal_failure(f"naming a line of {adapter.name} code")
            continue
        if named is not None:
            return named
    return f"{filename}:{line}"


def path_text(path: Iterable[Any]) -> str:
    """A leaf's key path as text: ``.embed.weight``, ``['params']['Dense_0']``, ``[0]``."""
    renderers = [a.key_text for a in _adapters if type(a).key_text is not Adapter.key_text]
    if not renderers:
        return jax.tree_util.keystr(tuple(path))
    out = []
    for key in path:
        text = next((t for t in (r(key) for r in renderers) if t is not None), None)
        out.append(text if text is not None else jax.tree_util.keystr((key,)))
    return "".join(out)


def _module_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    if spec.submodule_search_locations:
        return os.path.dirname(os.path.abspath(spec.origin)) + os.sep
    return os.path.abspath(spec.origin)


def library_dirs(base: tuple[str, ...]) -> tuple[str, ...]:
    """``base``, the adapters' library files, and those of ``configure(library_modules=...)``."""
    found = adapters()
    key = (base, tuple(map(id, found)), settings.library_modules)
    dirs = _dirs_cache.get(key)
    if dirs is None:
        extra = [d for a in found for d in a.library_dirs()]
        extra += [d for d in map(_module_dir, settings.library_modules) if d is not None]
        dirs = _dirs_cache[key] = base + tuple(extra)
    return dirs
