"""Equinox: ``eqx.filter_jit`` seen as the user's function, with the user's arguments.

``filter_jit`` jits an inner ``fun_wrapped(dynamic_donate, dynamic_nodonate, static)``
whose arguments are the flattened leaves of the user's function and arguments,
split into arrays and the rest. The adapter puts them back together, as
``fun_wrapped`` itself does, so that leaves are named by the user's parameters and
by field (``model.embed.weight``), and non-array fields are statics
(``model.activation``).
"""

from __future__ import annotations

import functools
import types
from typing import Any

import equinox
import jax

from shapewatch._integrations.adapters._common import named, package_dir
from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor.signature import NamedArgs

_DIR = package_dir(equinox)


def _combine(dynamic: Any, static: Any) -> Any:
    """Equinox's ``hashable_combine``: the static leaves where they are, the arrays elsewhere."""
    static_leaves, treedef = static
    leaves = [d if s is None else s for d, s in zip(dynamic, static_leaves)]
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _named_call(user_fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> NamedArgs:
    """The call by the user's names, with what the callable itself carries (Equinox traces it too).

    An ``eqx.Partial``'s bound arguments (a pytree: its arrays are traced) are bound to the
    parameters of the function inside; a callable object (``eqx.filter_jit(model)``) or a bound
    method is the ``self`` of its call, so that a compile caused by its arrays or fields
    (``self.w.shape[0]: 2 -> 4``) is named. A ``functools.partial`` is one static leaf to
    Equinox (not a pytree, compared by identity): it is the argument ``partial``, before
    the parameters left to pass, so that a new partial on every call is named as such.
    """
    fun = user_fun
    if isinstance(fun, functools.partial):  # one static leaf, compared by identity
        call = named(fun, args, kwargs)
        out = NamedArgs([("partial", fun), *call])
        out.keywords, out.defaults = call.keywords, call.defaults
        return out
    while type(fun) is equinox.Partial:
        args = tuple(fun.args) + tuple(args)
        kwargs = {**fun.keywords, **kwargs}
        fun = fun.func
    if isinstance(fun, types.FunctionType):
        return named(fun, args, kwargs)
    owner = getattr(fun, "__self__", None)
    if owner is not None and isinstance(getattr(fun, "__func__", None), types.FunctionType):
        return named(fun.__func__, (owner,) + tuple(args), kwargs)  # a bound method
    call = named(fun, args, kwargs)
    out = NamedArgs([("self", fun), *call])
    out.keywords, out.defaults = call.keywords, call.defaults
    return out


class EquinoxAdapter(_adapt.Adapter):
    name = "equinox"

    def library_dirs(self) -> tuple[str, ...]:
        return (_DIR,)

    def resolve(self, fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        code = getattr(fun, "__code__", None)
        if code is None or code.co_name != "fun_wrapped" or not code.co_filename.startswith(_DIR):
            return None
        dynamic_donate, dynamic_nodonate, static = args
        dynamic = {**dynamic_donate, **dynamic_nodonate}
        static_fun, static_first, static_rest = static
        user_fun = _combine(dynamic["fun"], static_fun)
        first = _combine(dynamic["first"], static_first)
        rest, user_kwargs = _combine(dynamic["rest"], static_rest)
        user_args = ((first,) + tuple(rest))[:-1]  # equinox appends a dummy None
        return user_fun, _named_call(user_fun, user_args, dict(user_kwargs))

    def jit_replaced(self) -> None:
        # filter_jit keeps one jax.jit per function (per class for a Module or a partial):
        # without this, a function decorated before watch() and again inside it keeps the old one
        import equinox

        equinox.clear_caches()

    def jitted(self, obj: Any) -> Any:
        obj = getattr(obj, "func", obj)  # a method: equinox's Partial of the wrapper
        if type(obj).__module__.startswith("equinox") and type(obj).__name__ == "_JitWrapper":
            return getattr(obj, "_cached", None)
        return None


_adapt.register(EquinoxAdapter())
