"""Naming a watched function that its own code would misname: after the user's ``jax.jit`` line.

A watched function is named by its code: its qualified name and ``file:line``
(``registry.code_key``). Some callables that users jit have no code of their own
worth naming: JAX's transformations (``jax.value_and_grad(partial(loss, k=2.0))``
is JAX's wrapper, in ``traceback_util.py``), an installed library's closure
(Haiku's ``net.apply``, an optax ``update``), a bound method of a library class
(Flax linen's ``Module.apply``), and a ``functools.partial`` of a bound method. For
those, :func:`note` keeps, when the function is jitted, the user's line that jitted
it, and :class:`JitSiteAdapter` (consulted after the frameworks' adapters) gives the
monitor a stand-in named after it:

- inside JAX's wrappers and partials, the user's own function, where it is one
  (``loss`` at its ``def``, as a plain ``partial(loss)`` is named);
- a bound method (in a partial, or of a library class): the bound object's class and
  the method (``GPT.apply``), at the user's jit line;
- any other library function: its name, at the user's jit line.

Its arguments are named by the call's own parameters, or by an adapter's
``call_signature`` where the framework knows better (linen's ``apply``: the module's
``__call__``). Everything here runs when a function is jitted or on a miss, never on
a cached call.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import types
import weakref
from typing import Any

from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor import compat as _compat
from shapewatch._monitor.signature import NamedArgs, bind_names, named_signature

_sites: weakref.WeakKeyDictionary[Any, tuple[str, int]] = weakref.WeakKeyDictionary()
_named: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # fun -> its stand-in, or None
_lock = threading.Lock()
_NONE: Any = object()


@functools.cache
def site_dirs() -> tuple[str, ...]:
    """The folders of installed packages (site-packages), as real paths ending in ``os.sep``."""
    import site
    import sysconfig

    dirs = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    dirs.update(getattr(site, "getsitepackages", list)())
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


def note(fun: Any, frame: types.FrameType | None) -> None:
    """Remembers the user's line that jitted ``fun`` (the innermost user frame at or above ``frame``)."""
    from shapewatch._monitor.stack import user_frame

    user = user_frame(frame)
    if user is None:
        return
    try:
        with _lock:
            _sites[fun] = (user.f_code.co_filename, user.f_lineno)
    except TypeError:  # not hashable or not weakly referable: named by its code
        pass


def _code_file(obj: Any) -> str | None:
    code = getattr(getattr(obj, "__func__", obj), "__code__", None)
    if code is None:
        call = type(obj).__dict__.get("__call__")
        code = getattr(getattr(call, "__func__", call), "__code__", None)
    return getattr(code, "co_filename", None)


def _is_library_file(filename: str | None) -> bool:
    """Installed packages, JAX and the frameworks (``configure(library_modules=...)`` too)."""
    if not filename or filename.startswith("<"):
        return False
    real = os.path.realpath(filename)
    dirs = _adapt.library_dirs(_compat.JAX_DIRS)
    return real.startswith(site_dirs()) or filename.startswith(dirs) or real.startswith(dirs)


def _is_framework_file(filename: str | None) -> bool:
    """The frameworks' files (Equinox, Flax) and those of ``configure(library_modules=...)``."""
    return bool(filename) and filename.startswith(_adapt.library_dirs(()))


def _inside(fun: Any) -> tuple[Any, bool]:
    """The callable inside JAX's wrappers (``__wrapped__``) and partials, stopping at a bound
    method; and whether a partial was passed on the way."""
    partial = False
    for _ in range(100):
        if inspect.ismethod(fun):
            break
        if isinstance(fun, functools.partial):
            fun, partial = fun.func, True
            continue
        inner = getattr(fun, "__wrapped__", None)
        if inner is None or not callable(inner) or not _is_library_file(_code_file(fun)):
            break  # a user's decorator: code_key names the function it wraps
        fun = inner
    return fun, partial


def _stand_in(qualname: str, module: str, filename: str, line: int) -> Any:
    """A function whose code is at ``filename:line``, named ``qualname``: what ``code_key`` reads."""

    def jitted() -> None:  # pragma: no cover  (never called: it only carries a name and a line)
        return None

    code = jitted.__code__.replace(co_filename=filename, co_firstlineno=line,
                                   co_name=qualname.rpartition(".")[2] or qualname)
    out = types.FunctionType(code, {})
    out.__qualname__, out.__module__ = qualname, module
    return out


def _display(fun: Any) -> Any:
    """The stand-in that names ``fun`` in reports, or None where its own code names it."""
    inner, partial = _inside(fun)
    site = _sites.get(fun)
    if inspect.ismethod(inner) and (partial or _is_library_file(_code_file(inner))):
        owner = type(inner.__self__)
        if site is None:
            return None
        return _stand_in(f"{owner.__qualname__}.{inner.__func__.__name__}", owner.__module__, *site)
    if not partial and _is_framework_file(_code_file(inner)):
        return None  # a framework's own wrapper (eqx.filter_jit's): its adapter names the user's function
    if not _is_library_file(_code_file(inner)):  # the user's function: at its def, inside JAX's wrappers
        return inner if inner is not fun and _is_library_file(_code_file(fun)) else None
    if site is None:
        return None
    qualname = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    return _stand_in(qualname, getattr(inner, "__module__", None) or "?", *site)


def display(fun: Any) -> Any:
    """The stand-in naming ``fun`` (once per function), or None."""
    try:
        found = _named.get(fun, _NONE)
    except TypeError:
        return None
    if found is _NONE:
        found = _display(fun)
        try:
            with _lock:
                _named[fun] = found
        except TypeError:
            pass
    return found


def code_key_of(fun: Any) -> tuple[str, str, str, str]:
    """``registry.code_key`` of ``fun`` as its misses are named (by its stand-in, where it has one)."""
    from shapewatch._monitor.registry import code_key

    return code_key(display(fun) or fun)


class _Signed:
    """A callable that only carries a signature, for ``inspect`` to apply a partial to."""

    def __init__(self, signature: inspect.Signature) -> None:
        self.__signature__ = signature

    def __call__(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover  (never called)
        return None


def call_signature(fun: Any) -> inspect.Signature | None:
    """The parameters ``fun`` is called by: through partials, an adapter's (linen's ``apply``:
    the module's ``__call__``), else its own."""
    if isinstance(fun, functools.partial):
        inner = call_signature(fun.func)
        if inner is None:
            return None
        try:
            return inspect.signature(functools.partial(_Signed(inner), *fun.args, **fun.keywords))
        except (TypeError, ValueError):
            return None
    for adapter in _adapt.adapters():
        found = adapter.call_signature(fun)
        if found is not None:
            return found
    return named_signature(fun)


class JitSiteAdapter(_adapt.Adapter):
    """Consulted after the frameworks' adapters: names what :func:`display` names."""

    name = "jit site"
    fallback = True

    def resolve(self, fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        shown = display(fun)
        if shown is None:
            return None
        named: NamedArgs = bind_names(call_signature(fun), args, kwargs)
        return shown, named


_adapt.register(JitSiteAdapter())
