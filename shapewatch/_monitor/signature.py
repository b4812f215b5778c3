"""The abstract signature of a traced call, by argument name, and the diff of two.

A signature is what ``jax.jit`` keys its cache on, made readable: every array
leaf by its argument name and pytree path (``batch['tokens']``), with shape,
dtype and weak type, and every static argument by name with its value. It keeps
no reference to user values: statics are kept as their ``repr`` and hash. The
call convention is part of it, as it is of JAX's cache key: which arguments were
passed by keyword, and which were left to their defaults.

Everything here runs on a cache miss only, never on a cached call; what the
calls of one tree structure share (names, paths, treedef texts) is made once per
structure and function (``_Plan``), and a signature is stored compactly over it
(``layout.py``). ``explain.py`` diffs two signatures.
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
import types
from collections.abc import Callable, Sequence
from typing import Any

import jax

from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor import compat as _compat
from shapewatch._monitor import layout as _layout
from shapewatch._monitor import placement as _placement
from shapewatch._monitor.explain import explain as explain
from shapewatch._monitor.signature_types import IDENTICAL as IDENTICAL
from shapewatch._monitor.signature_types import ArrayLeaf as ArrayLeaf
from shapewatch._monitor.signature_types import Change as Change
from shapewatch._monitor.signature_types import Signature as Signature
from shapewatch._monitor.signature_types import StaticLeaf as StaticLeaf
from shapewatch._monitor.signature_types import identical as identical

_ADDRESSED = re.compile(r"<function ([\w.<>]+) at 0x[0-9a-fA-F]+>")
_REPR_LIMIT = 80
_TEXT_LIMIT = 4096  # of a static's repr kept to show where two long ones differ


def _repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a user's __repr__ may fail
        text = f"<{type(value).__name__} object>"
    if " at 0x" in text and isinstance(getattr(value, "__qualname__", None), str):
        text = value.__qualname__  # a function: `relu`, not its address
    text = _ADDRESSED.sub(r"\1", text)  # a function inside (a partial's): its name, not its address
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."


def _shorten(text: str) -> str:
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _static_leaf(path: str, value: Any) -> StaticLeaf:
    hashed_by = "identity" if type(value).__hash__ is object.__hash__ else "value"
    text = _repr(value)
    try:
        h = hash(value)
    except Exception:  # unhashable (inside a hashable static): equal texts are equal
        h = hash(text)
    return StaticLeaf(path, _shorten(text), type(value).__name__, hashed_by, h, text if len(text) > _REPR_LIMIT else "",
                      _code_of(value) if hashed_by == "identity" or callable(value) else "")


def _code_of(value: Any) -> str:
    """``file:line`` of the code a callable runs, or "".

    Through partials, bound methods, jitted functions (``__wrapped__``) and JAX's
    ``custom_jvp``/``custom_vjp`` functions (``fun``): ``jax.nn.relu`` is its code's line.
    """
    for _ in range(100):
        if isinstance(value, functools.partial):
            value = value.func
        elif getattr(value, "__code__", None) is None and callable(getattr(value, "__func__", None)):
            value = value.__func__
        elif getattr(value, "__code__", None) is None and callable(getattr(value, "__wrapped__", None)):
            value = value.__wrapped__
        elif getattr(value, "__code__", None) is None and type(value).__name__ in ("custom_jvp", "custom_vjp"):
            value = value.fun
        else:
            break
    code = getattr(value, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if isinstance(code, types.CodeType) else ""


class NamedArgs(list):  # type: ignore[type-arg]
    """``(name, value)`` pairs of a call, with its convention: ``keywords`` and ``defaults``."""

    keywords: tuple[str, ...] = ()
    defaults: tuple[str, ...] = ()
    #: JAX's flat ``(tracers, concrete values)`` of the same miss (``compat.flat_arguments``), or None.
    flat: tuple[Sequence[Any], Sequence[Any]] | None = None


_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def bind_names(fun_signature: inspect.Signature | None, args: Sequence[Any], kwargs: dict[str, Any]) -> NamedArgs:
    """Pairs each argument of a call with its parameter name, noting the call convention."""
    named = NamedArgs()
    named.keywords = tuple(sorted(kwargs))
    if fun_signature is not None:
        try:
            bound = fun_signature.bind(*args, **kwargs)
            passed = set(bound.arguments)
            bound.apply_defaults()
            named += bound.arguments.items()
            named.defaults = tuple(n for n, p in fun_signature.parameters.items()
                                   if n not in passed and p.kind not in _VARIADIC)
            return named
        except TypeError:
            pass
    named += [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
    return named


class Concrete:
    """Stands for a concrete argument leaf as a tracer would: its abstract value (a compile
    without a retrace has no tracers; its signature is read from the call's real arguments)."""

    __slots__ = ("aval",)

    def __init__(self, x: Any) -> None:
        self.aval = _compat.abstract_value(x)


_TRACED = (_compat.Tracer, Concrete)


def _kind(leaves: list[Any]) -> Any:
    """True: every leaf a tracer; False: none; else which ones are, leaf by leaf."""
    types = set(map(type, leaves))
    if all(issubclass(t, _TRACED) for t in types):
        return True
    if not any(issubclass(t, _TRACED) for t in types):
        return False
    return tuple(isinstance(leaf, _TRACED) for leaf in leaves)


class _Plan:
    """What every call of one tree structure shares: its layout and where its statics are."""

    __slots__ = ("layout", "args")

    def __init__(self, named_args: list[tuple[str, Any]], flat: list[tuple[list[Any], Any, Any]],
                 defaults: tuple[str, ...]) -> None:
        structure: list[tuple[str, str]] = []
        paths: list[str] = []
        #: per argument: "static" (the whole argument), None (a pytree without tracers), or the
        #: paths of the static leaves among its tracers, by position (empty for none).
        self.args: list[Any] = []
        for (name, value), (leaves, treedef, kind) in zip(named_args, flat):
            if kind is not False:
                structure.append((name, str(treedef)))
                where = [name + _adapt.path_text(p) for p, _ in jax.tree_util.tree_flatten_with_path(value)[0]]
                mask = [True] * len(leaves) if kind is True else kind
                paths += [w for w, traced in zip(where, mask) if traced]
                self.args.append(() if kind is True else tuple((i, w) for i, (w, t) in enumerate(zip(where, mask)) if not t))
            elif not leaves and name not in defaults:  # None, () or {}: a pytree without leaves, not a static
                structure.append((name, str(treedef)))
                self.args.append(None)
            else:
                structure.append((name, "static"))
                self.args.append("static")
        self.layout = _layout.layout_of(tuple(structure), tuple(paths))
        if any("None" in tree for _, tree in structure) and not _layout.none_paths(self.layout):
            _layout.note_none_paths(self.layout, tuple(
                name + _adapt.path_text(p)
                for (name, value), (_, _, kind) in zip(named_args, flat) if kind is not False
                for p, leaf in jax.tree_util.tree_flatten_with_path(value, is_leaf=_is_none)[0]
                if leaf is None))


def _is_none(x: Any) -> bool:
    return x is None


def _leaves_like(treedef: Any, value: Any) -> list[Any] | None:
    """The leaves of a concrete argument of the tracers' structure ``treedef``, or None where
    it has another. Flattening up to a known structure skips sorting a dict's keys again:
    half the time of a flatten of a 20,000-key dict."""
    try:
        leaves = treedef.flatten_up_to(value)
    except Exception:  # another structure (an adapter's view of the call), or a node it cannot read
        return None
    if len(leaves) == treedef.num_leaves:
        return leaves
    return None


def _slots(named_args: Any, flat: list[tuple[list[Any], Any, Any]], specs: list[Any],
           jax_flat: tuple[Sequence[Any], Sequence[Any], Any]) -> list[tuple[int, int]] | None:
    """Where each argument's leaves lie in JAX's own flat lists of the call (``(start, end)``
    per argument, empty for those without tracers), or None.

    JAX flattens a call's dynamic arguments positional first, then keyword ones by name; the
    slots are trusted only where JAX's tracers at each argument's two ends are its first and last
    tracers (the same objects), the counts add up to JAX's, and the ends' shapes agree with the
    concrete values': else (a ``**kwargs`` parameter, static leaves inside an argument, another
    JAX) the caller flattens the concrete arguments itself, as before."""
    tracers, concrete, _ = jax_flat
    keywords = set(getattr(named_args, "keywords", ()))
    order = [i for i, (name, _) in enumerate(named_args) if name not in keywords]
    order += sorted((i for i, (name, _) in enumerate(named_args) if name in keywords), key=lambda i: named_args[i][0])
    slots = [(0, 0)] * len(named_args)
    start = 0
    for i in order:
        spec = specs[i]
        if spec == "static" or spec is None:
            continue
        if spec != ():
            return None
        leaves = flat[i][0]
        end = start + len(leaves)
        if end > len(tracers) or tracers[start] is not leaves[0] or tracers[end - 1] is not leaves[-1] \
                or not _same_shape(concrete[start], leaves[0]) or not _same_shape(concrete[end - 1], leaves[-1]):
            return None
        slots[i] = (start, end)
        start = end
    return slots if start == len(tracers) else None


def _same_shape(value: Any, tracer: Any) -> bool:
    """Whether a concrete value has its tracer's shape; False for a high-level value (a hijax
    Variable), whose attributes read it (inside jit's trace: one more input of the program)."""
    if _compat.is_high_level(value):
        return False
    try:
        return tuple(getattr(value, "shape", ())) == tuple(tracer.aval.shape)
    except Exception:
        return False


class _Fast:
    """A call structure seen before, as JAX flattened it: the plan, and per argument its spec
    and where its leaves lie in JAX's flat lists (``_slots``). A miss whose call has the same
    structure (JAX's ``PyTreeDef`` of the call, equal) and the same argument names takes its
    tracers and concrete leaves from JAX's lists without flattening anything."""

    __slots__ = ("plan", "names", "slots", "count")

    def __init__(self, plan: _Plan, names: tuple[str, ...], slots: list[tuple[int, int]], count: int) -> None:
        self.plan, self.names, self.slots, self.count = plan, names, slots, count


#: The key, in a function's ``plans``, of its ``_Fast`` plans by JAX's structure of the call.
_FAST = ("<calls as JAX flattened them>",)
#: Call structures kept per function: each holds JAX's PyTreeDef of the call (about 1.3 MB at 20,000
#: leaves; JAX keeps one per signature in its own caches).
_FAST_PER_FUNCTION = 4
_PLANS_PER_FUNCTION = 64
_aval = operator.attrgetter("aval")


def signature_of(named_args: list[tuple[str, Any]], plans: dict[Any, Any] | None = None,
                 real: list[tuple[str, Any]] | None = None) -> Signature:
    """Builds the signature of a call whose array arguments are tracers.

    ``plans`` (one dict per watched function) keeps what a tree structure's calls
    share: names, paths and treedef texts are made once per structure; a miss then
    flattens its arguments and reads their abstract values in bulk. ``real``, the
    same call's concrete arguments by name (``real_arguments``), gives each array
    leaf its placement (sharding, committedness, memory kind); with it, JAX's own
    flat lists of the call (``real.flat``) spare both flattens once a structure
    was seen (``_Fast``).
    """
    defaults = tuple(getattr(named_args, "defaults", ()))
    keywords = tuple(getattr(named_args, "keywords", ()))
    jax_flat = getattr(real, "flat", None)
    fast = None
    if jax_flat is not None and jax_flat[2] is not None and plans is not None:
        try:
            fast = plans.get(_FAST, {}).get(jax_flat[2])
        except TypeError:
            fast = None
        if fast is not None:
            done = _signature_from_fast(fast, named_args, jax_flat, defaults, keywords)
            if done is not None:
                return done
    flat = []
    for _, value in named_args:
        leaves, treedef = jax.tree_util.tree_flatten(value)
        flat.append((leaves, treedef, _kind(leaves) if leaves else False))
    key = tuple((name, "static") if kind is False and (leaves or name in defaults) else (name, treedef, kind)
                for (name, _), (leaves, treedef, kind) in zip(named_args, flat))
    try:
        plan = plans.get(key) if plans is not None else None
    except TypeError:  # a treedef whose node data does not hash
        plans, plan = None, None
    if plan is None:
        plan = _Plan(named_args, flat, defaults)
        if plans is not None:
            if len(plans) >= _PLANS_PER_FUNCTION:
                plans.clear()
            plans[key] = plan
    avals: list[Any] = []
    sources: list[Any] = []  # the leaves whose abstract values these are
    statics: list[StaticLeaf] = []
    concrete = dict(real) if real is not None else None
    places: list[Any] | None = [] if concrete is not None else None
    slots = _slots(named_args, flat, plan.args, jax_flat) if jax_flat is not None else None
    if slots is not None and plans is not None and jax_flat[2] is not None:
        _remember(plans, jax_flat, _Fast(plan, tuple(name for name, _ in named_args), slots, len(jax_flat[0])))
    for arg, ((name, value), (leaves, treedef, _), spec) in enumerate(zip(named_args, flat, plan.args)):
        if spec == "static":
            statics.append(_static_leaf(name, value))
            continue
        if spec is None:
            continue
        if places is not None and concrete is not None:
            if slots is not None:
                at_real = jax_flat[1][slots[arg][0]:slots[arg][1]]
            else:
                at_real = _leaves_like(treedef, concrete[name]) if name in concrete else None
            if at_real is None or len(at_real) != len(leaves):  # not the same call: no placements
                places = None
            else:
                found = _placement.placements_of(at_real)
                skip = dict(spec) if spec != () else None
                places += found if skip is None else [p for i, p in enumerate(found) if i not in skip]
        if spec == ():
            avals += map(_aval, leaves)
            sources += leaves
        else:
            at = dict(spec)
            for i, leaf in enumerate(leaves):
                if i in at:
                    statics.append(_static_leaf(at[i], leaf))
                else:
                    avals.append(leaf.aval)
                    sources.append(leaf)
    return Signature.compact(plan.layout, _layout.codes_of_avals(avals, places, sources), statics, keywords, defaults)


def _remember(plans: dict[Any, Any], jax_flat: tuple[Sequence[Any], Sequence[Any], Any], fast: _Fast) -> None:
    try:
        known = plans.setdefault(_FAST, {})
        if len(known) >= _FAST_PER_FUNCTION:
            del known[next(iter(known))]  # the oldest: a fifth structure keeps the other three
        known[jax_flat[2]] = fast
    except TypeError:  # a structure whose node data does not hash
        pass


def _signature_from_fast(fast: _Fast, named_args: Any, jax_flat: tuple[Sequence[Any], Sequence[Any], Any],
                         defaults: tuple[str, ...], keywords: tuple[str, ...]) -> Signature | None:
    """The signature of a call of a structure seen before, from JAX's flat lists, or None (then
    the caller reads it the long way). The statics are read from the values, as always: JAX's
    structure of the call holds them on some versions only, so a static that went from a value
    with leaves to one without (or back) is caught here and sent the long way."""
    tracers, concrete, _ = jax_flat
    if len(tracers) != fast.count or len(named_args) != len(fast.names) \
            or any(name != known for (name, _), known in zip(named_args, fast.names)):
        return None
    avals: list[Any] = []
    sources: list[Any] = []
    statics: list[StaticLeaf] = []
    places: list[Any] = []
    for (name, value), spec, (start, end) in zip(named_args, fast.plan.args, fast.slots):
        if spec == () and start < end:
            leaves = tracers[start:end]
            places += _placement.placements_of(concrete[start:end])
            avals += map(_aval, leaves)
            sources += leaves
            continue
        if spec == ():  # an argument whose leaves were tracers has none now
            return None
        leaves = jax.tree_util.tree_leaves(value)
        if (spec == "static") != bool(leaves or name in defaults) or (leaves and _kind(leaves) is not False):
            return None  # a static now without leaves, or with (as the long way would key it)
        if spec == "static":
            statics.append(_static_leaf(name, value))
    return Signature.compact(fast.plan.layout, _layout.codes_of_avals(avals, places, sources), statics, keywords,
                             defaults)


def real_arguments(fun_signature: inspect.Signature | None, frame: Any, hook: Any,
                   resolve: bool = False) -> NamedArgs | None:
    """The concrete arguments, by name, of the jit call of ``hook`` on the stack (a miss only), or None.

    ``resolve``: the hook wraps a framework's function; its adapter names the arguments as the
    user wrote them, for the concrete values as for the tracers.
    """
    found = _compat.call_arguments(frame, hook)
    if found is None:
        return None
    if resolve:
        try:
            named = _adapt.resolve(hook.__wrapped__, *found)[1]
        except Exception:
            return None
        if named is not None:
            return named
    named = bind_names(fun_signature, *found)
    flat = _compat.flat_arguments(frame, hook)
    if flat is not None and _has_statics(hook):
        # JAX's structure of the call holds the statics (jax 0.10: kept alive by the short way's
        # structures) or leaves them out (0.5, 0.12: a static without leaves changes unseen)
        flat = (flat[0], flat[1], None)
    named.flat = flat
    return named


_NO_STATICS = ("None", "()", "[]", "''", '""')


def _has_statics(hook: Any) -> bool:
    return any(name in ("static_argnums", "static_argnames") and value not in _NO_STATICS
               for name, value in getattr(hook, "options", ()))


def concrete_signature(fun_signature: inspect.Signature | None, frame: Any, hook: Any,
                       static_names: set[str], plans: dict[Any, Any] | None) -> Signature | None:
    """The signature of a call compiled without a retrace, read from its concrete arguments
    (``static_names``: the arguments that the function's earlier signatures hold as static)."""
    real = real_arguments(fun_signature, frame, hook, resolve=fun_signature is None)
    if real is None:
        return None
    stand_ins = NamedArgs((name, value if name in static_names else jax.tree_util.tree_map(Concrete, value))
                          for name, value in real)
    stand_ins.keywords, stand_ins.defaults = real.keywords, real.defaults
    return signature_of(stand_ins, plans, real)


def named_signature(fun: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


_RETURNED_LIMIT = 16
_OUTPUT_LEAVES = 64


def output_shapes(out: Any) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The shapes of a traced output's leaves by path (``out``, ``out[0]``, ``out['ys']``,
    ``out.ys``, as ``jax.tree_util.keystr`` writes them; a Python scalar's is ``()``), for at most
    a few leaves: the walk stops at the limit, so a step that returns a 20,000-leaf model costs a
    few steps. None past the limit or at a node other than a tuple, namedtuple, list, dict or
    None. On a miss only."""
    found: list[tuple[str, tuple[int, ...]]] = []
    stack: list[tuple[str, Any]] = [("out", out)]
    while stack:
        path, x = stack.pop()
        if x is None:
            continue
        shape = () if isinstance(x, (bool, int, float, complex)) else getattr(x, "shape", None)
        if isinstance(shape, tuple) and not isinstance(x, (tuple, list, dict)):
            if len(found) >= _OUTPUT_LEAVES:
                return None
            found.append((path, tuple(int(d) if isinstance(d, int) else -1 for d in shape)))
        elif isinstance(x, tuple) and isinstance(getattr(type(x), "_fields", None), tuple) \
                and len(x) <= _OUTPUT_LEAVES:  # a namedtuple: its fields by name, as keystr writes them
            stack += [(f"{path}.{name}", v) for name, v in reversed(list(zip(type(x)._fields, x)))]
        elif isinstance(x, dict) and len(x) <= _OUTPUT_LEAVES:
            try:
                keys = sorted(x)
            except TypeError:
                return None
            stack += [(f"{path}[{k!r}]", x[k]) for k in reversed(keys)]
        elif isinstance(x, (tuple, list)) and not hasattr(x, "_fields") and len(x) <= _OUTPUT_LEAVES:
            stack += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(x)))]
        else:
            return None
    return tuple(found)


def returned_arguments(sig: Signature, out: Any, pinned: bool = False) -> tuple[str, ...]:
    """The arguments that the function returns whole (the carried state of a step): those whose
    tree structure is the output's or one of its top-level parts'; with ``pinned`` (the jit
    gives its outputs a sharding: ``out_shardings``), also a single-array argument when a part
    is one array of its shape and dtype (``x = f(x)``). On a miss only."""
    try:
        parts = [out]
        if isinstance(out, (tuple, list)) and len(out) <= _RETURNED_LIMIT:
            parts += list(out)
        elif isinstance(out, dict) and len(out) <= _RETURNED_LIMIT:
            parts += list(out.values())
        trees = {str(jax.tree_util.tree_structure(p)) for p in parts}
        arrays = {(tuple(p.shape), str(p.dtype)) for p in parts if pinned
                  and hasattr(p, "shape") and hasattr(p, "dtype") and not isinstance(p, (tuple, list, dict))}
        found = []
        for name, tree in sig.structure:
            if tree != "PyTreeDef(*)":
                if tree in trees:
                    found.append(name)
                continue
            if not pinned:  # an array out of an elementwise step keeps the caller's placement
                continue
            leaf = sig.array_at(name)
            if leaf is not None and (tuple(leaf.shape), str(leaf.dtype)) in arrays:
                found.append(name)
        return tuple(found)
    except Exception:
        return ()
