"""Flax NNX: ``nnx.jit`` seen as the user's function, with graph nodes named by attribute.

``nnx.jit`` jits a ``JitFn`` (or ``SimpleJitFn``) around the user's function and
passes each graph node (a Module, an Optimizer) as its graph definition and a flat
list of states. The adapter merges each back into its node, as NNX does inside the
trace, and names its leaves by graph path: ``model.embed.embedding``,
``model.layers[0].kernel``, and its public scalar attributes as statics
(``model.rate``). A graph that gains or loses an attribute shows as the keys of
that node changing. The arguments of one call merge with one shared index, as
``nnx.jit`` merges them, so a node that refers to another argument's (an
``nnx.ModelAndOptimizer`` passed beside its model) merges too; the leaves they
share are named under the argument that passes them first (``model.w1``, and the
optimizer's own ``optimizer.opt_state[0].mu.w1``).
"""

from __future__ import annotations

import functools
import inspect
import types
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
    """What the variable holds, as ``nnx.jit`` passes it to JAX: its raw value, never read.

    A ref-mode variable (``nnx.with_vars(module, ref=True)``) holds a ``jax.Ref``;
    ``get_value()`` would read it (``ref[...]``): inside the trace that is a read of
    the concrete Ref that jit is also passed, and JAX rejects it as closed over. The
    raw value is the Ref itself, named like an array by its shape and dtype.
    """
    get_raw = getattr(variable, "get_raw_value", None)  # flax >= 0.11.3
    if callable(get_raw):
        return get_raw()
    if isinstance(inspect.getattr_static(type(variable), "raw_value", None), types.MemberDescriptorType):
        return variable.raw_value  # flax < 0.11.3: a slot; a property (deprecated) from then on
    get = getattr(variable, "get_value", None)
    return get() if callable(get) else variable.value


def _node_tree(node: Any, seen: set[int]) -> dict[Attr, Any]:
    """The node's variables and public scalar attributes, nested by graph path.

    ``seen``: the ids of the graph nodes and variables of the arguments before this
    one; what this node shares with them (the model that an ``nnx.ModelAndOptimizer``
    holds) is named there only, as JAX receives its leaves once. Gets this node's.
    """
    found = list(nnx.graph.iter_graph(node))
    shared = [path for path, value in found if path and _is_node(value) and id(value) in seen]
    seen.update(id(value) for _, value in found if _is_node(value))
    tree: dict[Attr, Any] = {}
    for path, value in found:
        if not path or any(isinstance(p, str) and p.startswith("_") for p in path):
            continue
        if any(path[: len(s)] == s for s in shared):
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


def _is_node(value: Any) -> bool:
    return isinstance(value, nnx.Variable) or nnx.graph.is_graph_node(value)


def _merged(value: Any, index_ref: Any) -> Any:
    """The graph node that ``value`` (a graph definition and its states) stands for.

    ``index_ref`` is shared by the arguments of one call, as ``nnx.jit`` shares it:
    a node that refers to another argument's (an optimizer to its model) merges.
    """
    if len(value.states) == 1:
        try:
            return nnx.graph.unflatten(value.graphdef, value.states[0], index_ref=index_ref)
        except Exception:
            pass
    for merge in (nnx.merge, nnx.graph.unflatten):  # flax < 0.11 merges flat states with unflatten
        try:
            return merge(value.graphdef, *value.states)
        except Exception:
            continue
    return None


def _user_values(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with each graph node merged back and named by graph path.

    Nodes merge in the order ``nnx.jit`` merges them (the positional arguments,
    then the keywords by name), so that one node's references to an earlier
    one's resolve.
    """
    index_ref = getattr(nnx.graph, "IndexMap", dict)()
    seen: set[int] = set()

    def user_value(value: Any) -> Any:
        if not (hasattr(value, "graphdef") and hasattr(value, "states")):
            return value
        node = _merged(value, index_ref)
        return value if node is None else _node_tree(node, seen)  # None: its own leaves, unnamed

    user_args = tuple(user_value(a) for a in args)
    by_name = {k: user_value(kwargs[k]) for k in sorted(kwargs)}
    return user_args, {k: by_name[k] for k in kwargs}


class FlaxNNXAdapter(_adapt.Adapter):
    name = "flax.nnx"

    def library_dirs(self) -> tuple[str, ...]:
        return (_DIR,)

    def resolve(self, fun: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        if not type(fun).__module__.startswith("flax.nnx") or not callable(getattr(fun, "f", None)):
            return None
        user_fun = fun.f
        user_args, user_kwargs = _user_values(args, kwargs)
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
