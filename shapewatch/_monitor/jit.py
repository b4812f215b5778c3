"""``watched_jit``: a drop-in for ``jax.jit`` that records every cache miss.

The hot path is here, and it is empty: ``watched_jit`` returns JAX's own jitted
object, built around a trace hook. A call that hits the cache runs JAX's C++
dispatch and nothing of shapewatch. JAX runs the hook only when it traces (a
cache miss): the hook reads the abstract signature, calls the user's function,
and commits the miss (``miss.py``). Compile costs arrive afterwards through
``jax.monitoring`` (``events.py``).

Nothing of shapewatch is set on the jitted object: its attributes and methods
(``lower``, ``trace``, ``eval_shape``, ``clear_cache``) are ``jax.jit``'s, so they
work however it is held and whatever copies them (``functools.wraps``,
``jax.grad``) gets what it gets from ``jax.jit``. The hook tells an ahead-of-time
trace by the stack (``compat.ahead_of_time_call``); ``clear_cache`` is noted by
JAX's own evict function, wrapped once (``compat.note_clear_cache``).

With ``count_calls=True`` a thin Python wrapper counts calls; it costs a few
percent on every call, so it is off by default. Once such a function recompiles
on a shape, the wrapper also counts its calls per signature (``calls.py``), so
that the report's padding figures are weighed by calls.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

import jax

from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor import compat as _compat
from shapewatch._monitor import events as _events
from shapewatch._monitor import jit_site as _jit_site
from shapewatch._monitor import miss as _miss
from shapewatch._monitor.config import ON_EXCESS, settings
from shapewatch._monitor.errors import RecompileError, internal_failure
from shapewatch._monitor.registry import registry

P = ParamSpec("P")
R = TypeVar("R")

_hook_ids = itertools.count(1)
# fun -> {options: hook}: applying watched_jit twice to one function object with the
# same options shares the hook, hence JAX's caches, as jax.jit shares them. A hook
# holds its function weakly (the jitted object holds it strongly, as __wrapped__),
# so this memo keeps a hook as long as its function lives, and no longer.
_hooks: weakref.WeakKeyDictionary[Any, dict[Any, _Hook]] = weakref.WeakKeyDictionary()
_hooks_lock = threading.Lock()
# The types of the jitted objects watched_jit made: a hook is found through a jitted
# object's function (compat.jitted_function), never through a copy of its attributes.
_jitted_types: set[type] = set()
# jax 0.5's lower/trace/eval_shape are closures over the hook, not over the jitted object, and the
# hook holds the user's function weakly: each closure keeps the function alive, as under jax.jit.
_kept_alive: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_UNSET: Any = object()
_HOOK_ATTR = "__shapewatch_hook__"
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_jax_jit = jax.jit  # `shapewatch run` replaces jax.jit; watched_jit keeps the original
#: Called with (user function, jitted object) when a watched function is made (never on a call):
#: ``shapewatch.warm`` starts compiling an earlier run's signatures of it from there.
on_create: list[Callable[[Any, Any], None]] = []


class _Hook:
    """The function JAX traces in place of the user's: it runs only on a cache miss.

    Its ``__dict__`` mirrors the user's function (``jax.jit`` copies it onto the
    jitted object, with ``__annotations__``); shapewatch's own state lives in slots.
    """

    __slots__ = ("_fun", "id", "names", "plans", "options", "budgets", "calls", "cleared", "ahead_of_time",
                 "state", "generation", "tally", "last_signature", "__dict__", "__weakref__")

    def __init__(self, fun: Callable[..., Any], options: Any) -> None:
        self._fun = weakref.ref(fun)
        self.id = next(_hook_ids)
        self.names: list[Any] = []
        self.plans: dict[Any, Any] = {}  # tree structure -> what its signatures share (signature._Plan)
        self.options = options  # jax.jit's keywords, as a key: compiles are counted per options
        # (max_recompiles, on_excess) of each watched_jit sharing this hook; the strictest applies.
        self.budgets: list[tuple[int | None, str | None]] = []
        self.calls: int | None = None
        self.tally: Any = None  # calls per signature (calls.CallTally), once counting calls met a shape change
        self.last_signature: Any = None  # of the latest miss traced through this hook
        self.cleared = False  # clear_cache() was called since the last miss
        self.ahead_of_time: list[Any] = []  # signatures traced by lower/trace/eval_shape, not yet compiled
        self.state: Any = None  # the registry's records of this function (set at the first miss)
        self.generation = -1
        self.__dict__.update(getattr(fun, "__dict__", None) or {})
        # JAX names its events and errors after __name__; a partial or a
        # callable object has none of its own.
        self.__name__ = getattr(fun, "__name__", None) or _compat.fun_name(fun)
        self.__qualname__ = getattr(fun, "__qualname__", self.__name__)
        self.__module__ = getattr(fun, "__module__", None)
        self.__doc__ = getattr(fun, "__doc__", None)
        self.__annotations__ = dict(getattr(fun, "__annotations__", None) or {})
        registry.hooks.add(self)

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        return self._fun()

    @property
    def budget(self) -> tuple[int | None, str | None]:
        """The strictest budget of the watched_jits that share this hook (hence one JAX cache)."""
        set_ = [b for b in self.budgets if b[0] is not None]
        if set_:
            return min(set_, key=lambda b: b[0])
        return (None, next((b[1] for b in self.budgets if b[1] is not None), None))

    def __repr__(self) -> str:
        return repr(self._fun())

    def __reduce__(self) -> Any:
        # Pickled as its function (not as its weak reference), so that pickling a watched
        # function fails where and as pickling jax.jit's fails: at jit's own parts.
        return (_Hook, (self._fun(), self.options))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fun = self._fun()
        try:
            pending = _miss.begin(self, args, kwargs)
        except Exception:
            pending = None
            internal_failure("recording a miss")
        out = fun(*args, **kwargs)
        if pending is not None and _compat.valid_output(out):  # else JAX raises: nothing compiles
            try:
                _miss.commit(pending, out)
            except RecompileError:
                raise
            except Exception:
                internal_failure("recording a miss")
        return out


def _options_key(jit_kwargs: dict[str, Any]) -> Any:
    return tuple(sorted((k, repr(v)) for k, v in jit_kwargs.items()))


def _hook_for(fun: Callable[..., Any], budget: tuple[Any, Any], jit_kwargs: dict[str, Any]) -> _Hook:
    """The hook of ``fun`` with these jit options, shared as jax.jit shares its cache; ``budget`` joins it."""
    options = _options_key(jit_kwargs)
    hook = None
    try:
        hash(options)
        with _hooks_lock:
            per_options = _hooks.get(fun)
            if per_options is None:
                per_options = _hooks[fun] = {}
            if all(h.__wrapped__ is fun for h in per_options.values()):  # not an equal but other object
                hook = per_options.get(options)
                if hook is None:
                    hook = per_options[options] = _Hook(fun, options)
    except TypeError:  # unhashable: no sharing
        pass
    if hook is None:
        hook = _Hook(fun, options)
    hook.budgets.append(budget)
    return hook


def _check_budget(max_recompiles: Any, on_excess: Any) -> None:
    if max_recompiles is not None and (
        isinstance(max_recompiles, bool) or not isinstance(max_recompiles, int) or max_recompiles < 0
    ):
        raise ValueError(
            f"[shapewatch] max_recompiles={max_recompiles!r} is not a budget: use None or an integer >= 0 "
            "(the number of compiles allowed after the first)."
        )
    if on_excess is not None and on_excess not in ON_EXCESS:
        raise ValueError(f"[shapewatch] on_excess={on_excess!r} is not valid: use one of {', '.join(map(repr, ON_EXCESS))}.")


def _user_frame() -> Any:
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE_DIR)
                                 or frame.f_code.co_filename == functools.__file__):
        frame = frame.f_back
    return frame


def _reissue(seen: list[tuple[type[Warning], str]]) -> None:
    frame = _user_frame()
    for category, message in seen:
        if frame is None:
            warnings.warn(message, category, stacklevel=2)
            continue
        module_globals = frame.f_globals
        warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                               module=module_globals.get("__name__"),
                               registry=module_globals.setdefault("__warningregistry__", {}))


def _jit_once(fun: Callable[..., Any], jit_kwargs: dict[str, Any], hooked: Callable[[], Any]) -> Any:
    """``jax.jit(fun, **jit_kwargs)``, raising what it raises; then ``hooked()``.

    JAX's warnings at jit time (a deprecated keyword, say) are shown once, at the
    user's line, as ``jax.jit`` shows them, rather than once per jit made here.
    """
    seen: list[tuple[type[Warning], str]] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                plain = _jax_jit(fun, **jit_kwargs)  # raises exactly what jax.jit raises
                jitted = hooked() if settings.enabled else None
            finally:
                for w in caught:
                    if (w.category, str(w.message)) not in seen:
                        seen.append((w.category, str(w.message)))
    finally:
        _reissue(seen)
    return plain if jitted is None else jitted


@overload
def watched_jit(
    fun: Callable[P, R], /, *, max_recompiles: int | None = ..., on_excess: str | None = ...,
    count_calls: bool = ..., **jit_kwargs: Any,
) -> Callable[P, R]: ...


@overload
def watched_jit(
    fun: None = None, /, *, max_recompiles: int | None = ..., on_excess: str | None = ...,
    count_calls: bool = ..., **jit_kwargs: Any,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def watched_jit(
    fun: Callable[..., Any] | None = None, /, *, max_recompiles: int | None = _UNSET,
    on_excess: str | None = None, count_calls: bool = False, **jit_kwargs: Any,
) -> Any:
    """``jax.jit`` that records, explains and can limit every cache miss.

    Use it bare (``@watched_jit``), with options (``@watched_jit(static_argnames="mode")``)
    or as ``watched_jit(f, ...)``. Every keyword of the installed ``jax.jit`` is
    passed through unchanged; the result *is* JAX's jitted function, so cached
    calls cost exactly what ``jax.jit`` costs.

    Args:
      fun: the function to compile.
      max_recompiles: compiles allowed after the first (None: no budget). The
        default comes from ``shapewatch.configure(max_recompiles=...)``.
      on_excess: what to do at the miss that exceeds the budget: ``"warn"``
        (a :class:`RecompileWarning`, once), ``"raise"`` (:class:`RecompileError`
        before the new executable is built) or ``"log"``.
      count_calls: also count calls (adds a Python wrapper to every call).
      **jit_kwargs: the keywords of ``jax.jit`` (``static_argnums``,
        ``static_argnames``, ``donate_argnums``, ``in_shardings``, ...).

    Returns:
      The jitted function (or a decorator, without ``fun``).

    Raises:
      ValueError: for a bad budget or ``on_excess``, listing the valid values.
      TypeError, ValueError: whatever ``jax.jit`` raises for the same arguments.

    >>> import jax.numpy as jnp, shapewatch
    >>> @shapewatch.watched_jit
    ... def double(x):
    ...     return 2 * x
    >>> double(jnp.ones(3)).tolist(), double(jnp.ones(4)).shape
    ([2.0, 2.0, 2.0], (4,))
    >>> [m.explanation for m in shapewatch.misses(double)]
    ['first compile', 'x.shape[0]: 3 -> 4']
    """
    if fun is None:
        return functools.partial(watched_jit, max_recompiles=max_recompiles, on_excess=on_excess,
                                 count_calls=count_calls, **jit_kwargs)
    _check_budget(None if max_recompiles is _UNSET else max_recompiles, on_excess)
    budget = (None if max_recompiles is _UNSET else max_recompiles, on_excess)
    made: list[_Hook] = []

    def hooked() -> Any:
        try:
            weakref.ref(fun)
        except TypeError:
            return None  # jax.jit itself fails on the first call: return its object as it is
        try:
            hook = _hook_for(fun, budget, jit_kwargs)
            _jit_site.note(fun, _user_frame())
            _install()
            jitted = _jax_jit(hook, **jit_kwargs)
            jitted.__wrapped__ = fun
            for method in _compat.own_methods(jitted):
                _kept_alive[method] = fun
            _jitted_types.add(type(jitted))
            made.append(hook)
            for notify in list(on_create):
                notify(fun, jitted)
            return jitted
        except Exception:
            internal_failure("wrapping a function")
            return None

    jitted = _jit_once(fun, jit_kwargs, hooked)
    if count_calls and made:
        return _counting(jitted, made[0])
    return jitted


def _install() -> None:
    """Listens to JAX's compile events and notes ``clear_cache`` (once per process)."""
    _events.install()
    _compat.note_clear_cache(_cleared)


def _cleared(jitted: Any) -> None:
    """Before a jitted object's ``clear_cache()``: the retrace after it is explained."""
    hook = _compat.jitted_function(jitted)
    if isinstance(hook, _Hook):
        hook.cleared = True


def _counting(jitted: Any, hook: _Hook) -> Any:
    hook.calls = hook.calls or 0
    registry.count_calls_of(hook)

    @functools.wraps(jitted)
    def counted(*args: Any, **kwargs: Any) -> Any:
        hook.calls += 1
        tally = hook.tally  # set once the function recompiled on a shape: then calls count per signature
        if tally is None:
            out = jitted(*args, **kwargs)
            if hook.tally is not None:  # this call's miss started the count
                hook.tally.started(args, kwargs)
            return out
        return tally.call(jitted, args, kwargs)

    for name in ("lower", "trace", "eval_shape", "clear_cache", "_cache_size"):
        if hasattr(jitted, name):
            setattr(counted, name, getattr(jitted, name))
    counted.__wrapped__ = jitted.__wrapped__
    setattr(counted, _HOOK_ATTR, hook)
    return counted


def _attached(fn: Any) -> _Hook | None:
    """The hook of a jitted object made by watched_jit (or of its call counter), else None."""
    if type(fn) in _jitted_types:
        hook = _compat.jitted_function(fn)
        return hook if isinstance(hook, _Hook) else None
    return getattr(fn, _HOOK_ATTR, None)


def is_watched(fn: Any) -> bool:
    """Whether ``fn`` was made by :func:`watched_jit`."""
    return _attached(fn) is not None


def hook_of(fn: Any) -> _Hook | None:
    """The hook of a watched function; None when shapewatch is switched off (``SHAPEWATCH=0``).

    Raises:
      TypeError: if ``fn`` is not watched while shapewatch is on.
    """
    hook = _attached(fn)
    if hook is None:  # a framework's jit wrapper (eqx.filter_jit, nnx.jit) holds a jitted object
        hook = _attached(_adapt.jitted(fn))
    if hook is None and settings.enabled:
        raise TypeError(
            f"[shapewatch] {fn!r} is not a watched function: wrap it with shapewatch.watched_jit "
            "(or run the program under `python -m shapewatch run`)."
        )
    return hook


def watched_target(fn: Any) -> Any:
    """The user's function behind a watched function (raises ``TypeError`` otherwise)."""
    hook = hook_of(fn)
    return fn.__wrapped__ if hook is not None else None


_compat.hide_frames_of(_PACKAGE_DIR)
