"""``python -m shapewatch run``: watch every ``jax.jit`` of an unmodified program."""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import jax

from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor import events as _events
from shapewatch._monitor.jit import watched_jit
from shapewatch._monitor.jit_site import site_dirs
from shapewatch._monitor.registry import code_key

_original: Any = None
_replaced: list[tuple[dict[str, Any], str]] = []  # (namespace, name) set to the patch


@functools.wraps(jax.jit)
def _jit(fun: Any = None, /, *args: Any, **kwargs: Any) -> Any:
    if args:  # jax.jit's positional options (old jax): leave them to jax
        return _original(fun, *args, **kwargs)
    if fun is None:
        return functools.partial(_jit, **kwargs)
    if _library_jit(fun, sys._getframe(1)):  # optax's own jits: compiles outside the user's functions
        return _original(fun, **kwargs)
    return watched_jit(fun, **kwargs)


def _framework_dirs() -> tuple[str, ...]:
    """The frameworks' folders (Equinox, Flax) and those of ``configure(library_modules=...)``."""
    return tuple(os.path.join(os.path.realpath(d), "") if d.endswith(os.sep) else os.path.realpath(d)
                 for d in _adapt.library_dirs(()))


_SKIPPED = (os.path.dirname(os.path.abspath(__file__)).rpartition(os.sep)[0] + os.sep,  # shapewatch/
            os.path.realpath(functools.__file__))


def _jit_caller(frame: Any) -> str | None:
    """The file of the code that called ``jax.jit``: the first frame that is neither shapewatch's,
    ``functools``' nor a framework's (a framework's jit wrapper, ``eqx.filter_jit``, is called by
    the code that decorates with it)."""
    skipped = _SKIPPED + _framework_dirs()
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<"):
            filename = os.path.realpath(filename)
        if not filename.startswith(skipped) or filename.endswith(_USER_CODE_IN_PACKAGE):
            return filename
        frame = frame.f_back
    return None


_USER_CODE_IN_PACKAGE = (os.path.join("_integrations", "demo.py"),)  # the built-in demo plays the user


def _library_jit(fun: Any, frame: Any) -> bool:
    """Whether this ``jax.jit`` is an installed library's own: called from the library's code, of a
    function defined in an installed package that is not a jit framework.

    A jit written in the program's code is the program's, whatever it jits (a JAX
    transformation of a ``functools.partial``, Haiku's ``apply``, any library's
    function); a library that jits the program's function (through ``jax.grad`` or a
    partial too) jits the program's; what a library jits of its own (optax's
    ``tree_bias_correction``) compiles outside the program's functions.
    """
    try:
        caller = _jit_caller(frame)
        if caller is None or not caller.startswith(site_dirs()):
            return False
        return _installed_library_function(fun)
    except Exception:  # unreadable: watch it, as before
        return False


def _innermost(fun: Any) -> Any:
    """The callable inside JAX's transformations (``__wrapped__``), partials and bound methods."""
    for _ in range(100):
        inner = getattr(fun, "__wrapped__", None)
        if inner is None and isinstance(fun, functools.partial):
            inner = fun.func
        if inner is None:
            inner = getattr(fun, "__func__", None)
        if inner is None or not callable(inner):
            break
        fun = inner
    return fun


def _installed_library_function(fun: Any) -> bool:
    """Whether ``fun`` (inside JAX's transformations and partials) is defined in an installed package
    that is not a jit framework.

    Such a library jits its own helpers (optax's ``tree_bias_correction``); a
    framework's wrapper (Equinox, Flax) carries the user's function and stays watched.
    """
    try:
        filename = code_key(_innermost(fun))[3].rpartition(":")[0]
        if not filename:
            return False
        filename = os.path.realpath(filename)
        return filename.startswith(site_dirs()) and not filename.startswith(_framework_dirs())
    except Exception:  # unreadable: watch it, as before
        return False


def install() -> bool:
    """Replaces ``jax.jit`` (and every ``from jax import jit`` already made) by ``watched_jit``.

    JAX's own modules are left alone: their functions were jitted when JAX was
    imported, and compiles they make are reported as outside watched functions,
    every one from now on (also those before the program's first ``jax.jit``).
    Returns False when it was installed already.
    """
    global _original
    _events.install()
    if _original is not None:
        return False
    _original = jax.jit
    jax.jit = _jit
    for name, module in list(sys.modules.items()):
        if module is None or name.startswith(("jax", "jaxlib", "shapewatch")):
            continue
        namespace = getattr(module, "__dict__", {})
        for attr, value in list(namespace.items()):
            if value is _original:
                namespace[attr] = _jit
                _replaced.append((namespace, attr))
    _adapt.jit_replaced()
    return True


def uninstall() -> None:
    """Puts ``jax.jit`` and the names :func:`install` replaced back; functions jitted meanwhile stay watched."""
    global _original
    if _original is not None:
        for namespace, attr in _replaced:
            if namespace.get(attr) is _jit:
                namespace[attr] = _original
        _replaced.clear()
        jax.jit = _original
        _original = None
        _adapt.jit_replaced()


class Watching:
    """What :func:`watch` returns: a context manager, and :meth:`stop` to undo the watch."""

    def __init__(self, owner: bool) -> None:
        self._owner = owner  # False when `shapewatch run` (or an earlier watch) installed it

    def stop(self) -> None:
        if self._owner:
            self._owner = False
            uninstall()

    def __enter__(self) -> Watching:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def watch() -> Watching:
    """Watches every ``jax.jit`` made from now on, in this process, as ``shapewatch run`` does.

    Every compile from now on is counted: those of functions jitted before, of
    JAX's own functions and of eager operations are reported as outside watched
    functions.

    Also the jit wrappers of Equinox (``eqx.filter_jit``) and Flax (``nnx.jit``,
    ``nn.jit``), which call ``jax.jit``: functions decorated after this call are
    watched (Equinox's own cache of jits is cleared, so that a function decorated
    before and again now is watched too). Use it as ``with shapewatch.watch(): ...``,
    or call it and undo it with ``shapewatch.unwatch()`` (or the result's
    ``stop()``); functions jitted meanwhile stay watched.

    >>> import jax, shapewatch
    >>> with shapewatch.watch():
    ...     double = jax.jit(lambda x: 2 * x)
    >>> shapewatch.is_watched(double), shapewatch.is_watched(jax.jit(abs))
    (True, False)
    """
    return Watching(install())


def unwatch() -> None:
    """Undoes :func:`watch`: ``jax.jit`` is JAX's own again."""
    uninstall()


def _fresh_main(**names: Any) -> dict[str, Any]:
    """A new ``__main__`` module in ``sys.modules``, with the names Python gives a program."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update(__annotations__={}, __builtins__=builtins, __doc__=None, **names)
    sys.modules["__main__"] = main
    return main.__dict__


def script_code(path: str) -> Any:
    """The code of a script, compiled as ``python script.py`` compiles it (absolute file name)."""
    import io

    with io.open_code(os.path.abspath(path)) as fh:
        source = fh.read()
    return compile(source, os.path.abspath(path), "exec", dont_inherit=True)


def run_script(path: str, args: list[str], code: Any) -> None:
    """Runs ``code`` of the script ``path`` as ``python path args...`` would run it.

    ``__file__`` is the absolute path, ``sys.argv`` the path as typed and its arguments,
    ``sys.path[0]`` the script's real directory, and the program's module is ``__main__``.
    """
    from importlib.machinery import SourceFileLoader

    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    namespace = _fresh_main(__file__=os.path.abspath(path), __cached__=None, __package__=None,
                            __spec__=None, __loader__=SourceFileLoader("__main__", os.path.abspath(path)))
    exec(code, namespace)


def module_spec(name: str) -> Any:
    """The spec that ``python -m name`` runs (a package's ``__main__``), or None.

    Like ``python -m``, it looks in the current directory first.
    """
    import importlib.util

    sys.path[0] = os.getcwd()
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{name}.__main__")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
        return None
    return spec


def run_module(spec: Any, args: list[str], code: Any) -> None:
    """Runs ``code`` of the module ``spec`` as ``python -m module args...`` would run it."""
    sys.argv = [spec.origin, *args]
    namespace = _fresh_main(__file__=spec.origin, __cached__=spec.cached, __package__=spec.parent,
                            __spec__=spec, __loader__=spec.loader)
    exec(code, namespace)
