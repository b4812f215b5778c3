"""Flax NNX: ``nnx.jit`` seen as the user's function, with graph nodes named by attribute.

``nnx.jit`` jits a ``JitFn`` (or ``SimpleJitFn``) around the user's function and
passes each graph node (a Module, an Optimizer) as its graph definition and a flat
list of states. The adapter merges each back into its node, as NNX does inside the
trace, and names its leaves by graph path: ``model.embed.embedding``,
``model.layers[0].kernel``, and its public scalar attributes as statics
(``model.rate``). A graph that gains or loses an attribute shows as the keys of
that node changing.
"""

from __future__ import annotations

import functools
from typing import Any

import flax
from flax import nnx

from shapewatch._integrations.adapters._common import named, package_dir
from shapewatch._monitor import adapt as _adapt

_DIR = package_dir(flax)
_SCALARS = (bool, int, float, str)


class Attr(str):
    """A key of a graph path: written ``.name``, or ``[i]`` for an item of a list."""

    index = False


def _key(part: Any) -> Attr:
    key = Attr(part)
    key.index = not isinstance(part, str)
    return key


def _value(variable: Any) -> Any:
    get = getattr(variable, "get_value", None)
    return get() if callable(get) else variable.value


def _node_tree(node: Any) -> dict[Attr, Any]:
    """The node's variables and public scalar attributes, nested by graph path."""
    tree: dict[Attr, Any] = {}
    for path, value in nnx.graph.iter_graph(node):
        if not path or any(isinstance(p, str) and p.startswith("_") for p in path):
            continue
        if isinstance(value, nnx.Variable):
            leaf = _value(value)
        elif type(value) in _SCALARS:
            leaf = value
        else:
            continue
        where = tree
        for part in path[:-1]:
            where = where.setdefault(_key(part), {})
            if not isinstance(where, dict):
                break
        else:
            where[_key(path[-1])] = leaf
    return tree


def _user_value(value: Any) -> Any:
    if not (hasattr(value, "graphdef") and hasattr(value, "states")):
        return value
    for merge in (nnx.merge, nnx.graph.unflatten):  # flax < 0.11 merges flat states with unflatten
        try:
            return _node_tree(merge(value.graphdef, *value.states))
        except Exception:
            continue
    return value  # a node shared with another argument, say: its own leaves, unnamed


class FlaxNNXAdapter(_adapt.Adapter):
    name = "flax.nnx"

    def library_dirs(self) -> tuple[str, ...]:
        return (_DIR,)

    def resolve(self, fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        if not type(fun).__module__.startswith("flax.nnx") or not callable(getattr(fun, "f", None)):
            return None
        user_fun = fun.f
        user_args = tuple(_user_value(a) for a in args)
        user_kwargs = {k: _user_value(v) for k, v in kwargs.items()}
        return user_fun, named(user_fun, user_args, user_kwargs)

    def jitted(self, obj: Any) -> Any:
        if isinstance(obj, functools.partial) and type(obj.func).__module__.startswith("flax.nnx"):
            obj = obj.func  # a method: flax >= 0.11 binds the wrapper to the instance with a partial
        if type(obj).__module__.startswith("flax.nnx"):
            return getattr(obj, "jitted_fn", None)
        inner = getattr(obj, "inner", None)  # flax < 0.11: a function with the jitted JitFn as .inner
        if type(getattr(inner, "__wrapped__", None)).__module__.startswith("flax.nnx"):
            return inner
        return None

    def key_text(self, key: Any) -> str | None:
        name = getattr(key, "key", None)
        if isinstance(name, Attr):
            return f"[{name}]" if name.index else f".{name}"
        return None


_adapt.register(FlaxNNXAdapter())
