"""``watched_jit``: a drop-in for ``jax.jit`` that records every cache miss.

The hot path is here, and it is empty: ``watched_jit`` returns JAX's own jitted
object, built around a trace hook. A call that hits the cache runs JAX's C++
dispatch and nothing of shapewatch. JAX runs the hook only when it traces (a
cache miss): the hook reads the abstract signature, calls the user's function,
and commits the miss (``_miss.py``). Compile costs arrive afterwards through
``jax.monitoring`` (``_events.py``).

With ``count_calls=True`` a thin Python wrapper counts calls; it costs a few
percent on every call, so it is off by default.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

import jax

from shapewatch._monitor import compat as _compat
from shapewatch._monitor import events as _events
from shapewatch._monitor import miss as _miss
from shapewatch._monitor.config import ON_EXCESS, settings
from shapewatch._monitor.errors import RecompileError, internal_failure
from shapewatch._monitor.registry import registry

P = ParamSpec("P")
R = TypeVar("R")

_hook_ids = itertools.count(1)
# fun -> hook: applying watched_jit twice to one function shares the hook,
# hence JAX's caches, as jax.jit shares them. The hook holds fun weakly.
_hooks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_hooks_lock = threading.Lock()
_UNSET: Any = object()
_HOOK_ATTR = "__shapewatch_hook__"
_jax_jit = jax.jit  # `shapewatch run` replaces jax.jit; watched_jit keeps the original


class _Hook:
    """The function JAX traces in place of the user's: it runs only on a cache miss.

    It holds the user's function weakly (the jitted object holds it strongly
    through ``__wrapped__``), so that the memo below keeps the hook, and with
    it JAX's caches, for as long as the user's function lives, and no longer.
    """

    def __init__(self, fun: Callable[..., Any]) -> None:
        try:
            ref = weakref.ref(fun)
            self._fun = lambda: ref()
        except TypeError:
            self._fun = lambda: fun
        self._id = next(_hook_ids)
        self._names: list[Any] = []
        # JAX names its events and errors after __name__; a partial or a
        # callable object has none of its own.
        self.__name__ = getattr(fun, "__name__", None) or _compat.fun_name(fun)
        self.__qualname__ = getattr(fun, "__qualname__", self.__name__)
        self.__module__ = getattr(fun, "__module__", None)
        self.__doc__ = getattr(fun, "__doc__", None)

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        return self._fun()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fun = self._fun()
        try:
            pending = _miss.begin(fun, self._id, self._names, args, kwargs)
        except Exception:
            pending = None
            internal_failure("recording a miss")
        out = fun(*args, **kwargs)
        if pending is not None:
            try:
                _miss.commit(pending)
            except RecompileError:
                raise
            except Exception:
                internal_failure("recording a miss")
        return out


def _hook_for(fun: Callable[..., Any]) -> _Hook:
    with _hooks_lock:
        try:
            hook = _hooks.get(fun)
        except TypeError:  # unhashable or not weak-referenceable: no sharing
            return _Hook(fun)
        if hook is None:
            hook = _Hook(fun)
            _hooks[fun] = hook
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
    plain = _jax_jit(fun, **jit_kwargs)  # raises exactly what jax.jit raises
    if not settings.enabled:
        return plain
    try:
        hook = _hook_for(fun)
        jitted = _jax_jit(hook, **jit_kwargs)
        jitted.__wrapped__ = fun
        setattr(jitted, _HOOK_ATTR, hook)
        state = registry.state_for(fun)
        # The latest watched_jit of this code sets its budget (None: the global default).
        registry.set_budget(fun, None if max_recompiles is _UNSET else max_recompiles, on_excess)
        _events.install()
    except Exception:
        internal_failure("wrapping a function")
        return plain
    if count_calls:
        return _counting(jitted, state)
    return jitted


def _counting(jitted: Any, state: Any) -> Any:
    count = registry.count_call

    @functools.wraps(jitted)
    def counted(*args: Any, **kwargs: Any) -> Any:
        count(state)
        return jitted(*args, **kwargs)

    for name in ("lower", "trace", "eval_shape", "clear_cache"):
        if hasattr(jitted, name):
            setattr(counted, name, getattr(jitted, name))
    counted.__wrapped__ = jitted.__wrapped__
    setattr(counted, _HOOK_ATTR, getattr(jitted, _HOOK_ATTR))
    state.calls = state.calls or 0
    return counted


def is_watched(fn: Any) -> bool:
    """Whether ``fn`` was made by :func:`watched_jit`."""
    return getattr(fn, _HOOK_ATTR, None) is not None


def watched_target(fn: Any) -> Any:
    """The user's function behind a watched function (raises ``TypeError`` otherwise)."""
    if not is_watched(fn):
        raise TypeError(
            f"[shapewatch] {fn!r} is not a watched function: wrap it with shapewatch.watched_jit "
            "(or run the program under `python -m shapewatch run`)."
        )
    return fn.__wrapped__


_compat.hide_frames_of(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # shapewatch/
