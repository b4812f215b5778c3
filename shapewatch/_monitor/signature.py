"""The abstract signature of a traced call, by argument name, and the diff of two.

A signature is what ``jax.jit`` keys its cache on, made readable: every array
leaf by its argument name and pytree path (``batch['tokens']``), with shape,
dtype and weak type, and every static argument by name with its value. It keeps
no reference to user values: statics are kept as their ``repr`` and hash. The
call convention is part of it, as it is of JAX's cache key: which arguments were
passed by keyword, and which were left to their defaults.

Everything here runs on a cache miss only, never on a cached call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax

from shapewatch._monitor import adapt as _adapt
from shapewatch._monitor import compat as _compat
from shapewatch._monitor import treediff as _treediff
from shapewatch._monitor.signature_types import IDENTICAL as IDENTICAL
from shapewatch._monitor.signature_types import ArrayLeaf as ArrayLeaf
from shapewatch._monitor.signature_types import Change as Change
from shapewatch._monitor.signature_types import Signature as Signature
from shapewatch._monitor.signature_types import StaticLeaf as StaticLeaf
from shapewatch._monitor.signature_types import identical as identical

_REPR_LIMIT = 80
_TEXT_LIMIT = 4096  # of a static's repr kept to show where two long ones differ


def _repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a user's __repr__ may fail
        text = f"<{type(value).__name__} object>"
    if " at 0x" in text and isinstance(getattr(value, "__qualname__", None), str):
        text = value.__qualname__  # a function: `relu`, not its address
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."


def _short_repr(value: Any) -> str:
    return _shorten(_repr(value))


def _shorten(text: str) -> str:
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _static_leaf(path: str, value: Any) -> StaticLeaf:
    hashed_by = "identity" if type(value).__hash__ is object.__hash__ else "value"
    text = _repr(value)
    try:
        h = hash(value)
    except Exception:  # unhashable (inside a hashable static): equal texts are equal
        h = hash(text)
    return StaticLeaf(path, _shorten(text), type(value).__name__, hashed_by, h, text if len(text) > _REPR_LIMIT else "")


class NamedArgs(list):  # type: ignore[type-arg]
    """``(name, value)`` pairs of a call, with its convention: ``keywords`` and ``defaults``."""

    keywords: tuple[str, ...] = ()
    defaults: tuple[str, ...] = ()


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


def signature_of(named_args: list[tuple[str, Any]]) -> Signature:
    """Builds the signature of a call whose array arguments are tracers."""
    arrays: list[ArrayLeaf] = []
    statics: list[StaticLeaf] = []
    structure: list[tuple[str, str]] = []
    defaults = getattr(named_args, "defaults", ())
    for name, value in named_args:
        leaves, treedef = jax.tree_util.tree_flatten_with_path(value)
        if any(isinstance(leaf, _compat.Tracer) for _, leaf in leaves):
            structure.append((name, str(treedef)))
            for path, leaf in leaves:
                where = name + _adapt.path_text(path)
                if isinstance(leaf, _compat.Tracer):
                    arrays.append(ArrayLeaf(where, *_compat.aval_of(leaf)))
                else:
                    statics.append(_static_leaf(where, leaf))
        elif not leaves and name not in defaults:  # None, () or {}: a pytree without leaves, not a static
            structure.append((name, str(treedef)))
        else:
            structure.append((name, "static"))
            statics.append(_static_leaf(name, value))
    return Signature(tuple(arrays), tuple(statics), tuple(structure),
                     tuple(getattr(named_args, "keywords", ())), tuple(defaults))


def _array_changes(a: ArrayLeaf, b: ArrayLeaf) -> list[Change]:
    changes: list[Change] = []
    if a.shape != b.shape:
        if len(a.shape) == len(b.shape):
            changes += [Change(a.path, "shape", i, str(db), str(da))
                        for i, (da, db) in enumerate(zip(a.shape, b.shape)) if da != db]
        else:
            changes.append(Change(a.path, "rank", None, str(b.shape), str(a.shape)))
    if a.dtype != b.dtype:
        changes.append(Change(a.path, "dtype", None, b.dtype, a.dtype))
    if a.weak_type != b.weak_type:
        changes.append(Change(a.path, "weak_type", None, _weak(b), _weak(a)))
    return changes


def _static_change(s: StaticLeaf, t: StaticLeaf) -> Change:
    """``s`` (new) against ``t`` (old), which compare unequal."""
    new, old = s.text or s.value, t.text or t.value
    if new == old and s.type == t.type:
        if s.hashed_by == "identity":
            return Change(s.path, "identity", None, s.type, s.value)
        return Change(s.path, "static", None, t.value, "an equal-looking value (same repr, compared by hash: another hash)")
    if s.type != t.type and s.value == t.value:
        return Change(s.path, "static", None, f"{t.value} ({t.type})", f"{s.value} ({s.type})")
    if max(len(new), len(old)) > _REPR_LIMIT:
        return Change(s.path, "static", None, *_differing_parts(old, new))
    return Change(s.path, "static", None, t.value, s.value)


def _differing_parts(old: str, new: str, before: int = 16, width: int = 40) -> tuple[str, str]:
    """The parts of two long texts around their first difference: ``...steps=100)``."""
    same = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    start = max(0, same - before)
    space = old.find(" ", start, same)
    start = space + 1 if start and space >= 0 else start  # begin at a word

    def part(text: str) -> str:
        end = start + width
        return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")

    return part(old), part(new)


def _leaf_changes(new: Signature, old: Signature) -> list[Change]:
    changes: list[Change] = []
    for a, b in zip(new.arrays, old.arrays):
        if a != b:
            changes += _array_changes(a, b)
    for s, t in zip(new.statics, old.statics):
        if s != t:
            changes.append(_static_change(s, t))
    return changes


def _weak(leaf: ArrayLeaf) -> str:
    if leaf.weak_type:
        return "Python scalar (weak_type)" if leaf.shape == () else f"weakly typed {leaf.dtype} array"
    return f"{leaf.dtype} array"


def _describe_argument(sig: Signature, name: str) -> str:
    """How an argument was given: ``default (not passed)``, ``passed by keyword, traced int32[]``."""
    if name in sig.defaults:
        return "default (not passed)"
    how = "passed by keyword" if name in sig.keywords else "passed"
    tree = dict(sig.structure).get(name)
    if tree == "static":
        value = next((s.value for s in sig.statics if s.path == name), "?")
        return f"{how}, static {value}"
    leaves = [a for a in sig.arrays if a.path == name or a.path.startswith((name + "[", name + "."))]
    if len(leaves) == 1 and leaves[0].path == name:
        return f"{how}, traced {leaves[0].describe()}"
    if not leaves:
        return f"{how}, {(tree or '?').removeprefix('PyTreeDef(').removesuffix(')')}"
    return f"{how}, traced pytree of {len(leaves)} array{'s' * (len(leaves) != 1)}"


def _convention_changes(new: Signature, old: Signature) -> list[Change]:
    """Arguments passed positionally in one call and by keyword in the other."""
    if new.keywords == old.keywords:
        return []
    names = dict(new.structure).keys() & dict(old.structure).keys()
    flipped = (set(new.keywords) ^ set(old.keywords)) & names - set(new.defaults) - set(old.defaults)
    return [Change(n, "convention", None, "by keyword" if n in old.keywords else "positionally",
                   "by keyword" if n in new.keywords else "positionally")
            for n, _ in new.structure if n in flipped]


def _default_changes(new: Signature, old: Signature) -> list[Change]:
    """Arguments left to their default in one call and passed in the other."""
    flipped = set(new.defaults) ^ set(old.defaults)
    return [Change(n, "default", None, _describe_argument(old, n), _describe_argument(new, n))
            for n, _ in new.structure if n in flipped]


def _structure_changes(new: Signature, old: Signature) -> list[Change]:
    changes = _default_changes(new, old)
    skip = {c.path for c in changes}
    old_tree, new_tree = dict(old.structure), dict(new.structure)
    arrays = ({a.path: a for a in old.arrays}, {a.path: a for a in new.arrays})

    def describe(path: str, in_new: bool) -> str:
        leaf = arrays[in_new].get(path)
        return leaf.describe() if leaf is not None else "a leaf"

    for name in list(new_tree) + [n for n in old_tree if n not in new_tree]:
        before, after = old_tree.get(name), new_tree.get(name)
        if before == after or name in skip:
            continue
        if before is None or after is None:
            changes.append(Change(name, "structure", None, "absent" if before is None else "present",
                                  "absent" if after is None else "present"))
            continue
        if "static" in (before, after):
            changes.append(Change(name, "structure", None, _describe_argument(old, name).removeprefix("passed, "),
                                  _describe_argument(new, name).removeprefix("passed, ")))
            continue
        tree_old, tree_new = _treediff.parse(before), _treediff.parse(after)
        if tree_old is None or tree_new is None:
            changes.append(Change(name, "structure", None, _short_repr(before), _short_repr(after)))
            continue
        changes += [Change(p, "structure", None, o, n) for p, o, n in _treediff.diff(name, tree_old, tree_new, describe)]
    # Leaves at the same path in both, outside what changed shape.
    for path, a in arrays[True].items():
        b = arrays[False].get(path)
        if b is not None and a != b:
            changes += _array_changes(a, b)
    return changes


def _mismatched_arguments(new: Signature, old: Signature) -> int:
    return len(set(new.structure) ^ set(old.structure)) + len(set(new.defaults) ^ set(old.defaults))


def explain(new: Signature, earlier: Sequence[Signature], reason: str | None = None) -> tuple[Change, ...]:
    """Diffs ``new`` against the nearest of ``earlier`` signatures.

    The nearest is the one with the same tree structure and the fewest
    differing leaves (the latest on a tie); with no signature of the same
    structure, the one whose structure differs in the fewest arguments. Returns
    ``()`` only with no earlier signature (a first compile); for a signature
    equal to an earlier one, the :func:`identical` marker, whose text is
    ``reason`` when the caller knows why JAX retraced (a cleared cache, a
    re-created function, another configuration context).

    >>> a = Signature((ArrayLeaf("x", (8, 128), "float32", False),), (), (("x", "*"),))
    >>> b = Signature((ArrayLeaf("x", (8, 131), "float32", False),), (), (("x", "*"),))
    >>> [c.text for c in explain(b, [a])]
    ['x.shape[1]: 128 -> 131']
    >>> [c.text for c in explain(b, [a, b])]
    ['identical signature: retraced for a reason outside the arguments']
    """
    if not earlier:
        return ()
    best: list[Change] | None = None
    for s in reversed(earlier):
        if s.structure == new.structure and len(s.arrays) == len(new.arrays) and len(s.statics) == len(new.statics):
            c = _leaf_changes(new, s)
            changed = {x.path for x in c}  # a new static value says more than "passed, not default"
            c += [x for x in _default_changes(new, s) if x.path not in changed] + _convention_changes(new, s)
            if best is None or len(c) < len(best):
                best = c
            if not best:
                return (identical(reason),)
    if best is not None:
        return tuple(best)
    nearest = min(reversed(earlier), key=lambda s: _mismatched_arguments(new, s))
    return tuple(_structure_changes(new, nearest) + _convention_changes(new, nearest))


def named_signature(fun: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None
