"""The abstract signature of a traced call, by argument name, and the diff of two.

A signature is what ``jax.jit`` keys its cache on, made readable: every array
leaf by its argument name and pytree path (``batch['tokens']``), with shape,
dtype and weak type, and every static argument by name with its value. It keeps
no reference to user values: statics are kept as their ``repr`` and hash.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax

from shapewatch._monitor import compat as _compat

_REPR_LIMIT = 80


@dataclasses.dataclass(frozen=True)
class ArrayLeaf:
    """An array argument (a tracer at trace time): ``path``, ``shape``, ``dtype``, ``weak_type``."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    weak_type: bool

    def describe(self) -> str:
        base = f"{self.dtype}[{','.join(map(str, self.shape))}]"
        return f"{base} (weak_type)" if self.weak_type else base

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "shape": list(self.shape), "dtype": self.dtype, "weak_type": self.weak_type}


@dataclasses.dataclass(frozen=True)
class StaticLeaf:
    """A static argument: ``path``, ``value`` (its repr), ``hashed_by`` (``"value"`` or ``"identity"``)."""

    path: str
    value: str
    type: str
    hashed_by: str
    hash: int = dataclasses.field(compare=True, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "value": self.value, "type": self.type, "hashed_by": self.hashed_by}


@dataclasses.dataclass(frozen=True)
class Signature:
    """The abstract signature of one traced call.

    Attributes:
      arrays: the array leaves, in argument order.
      statics: the static arguments.
      structure: per argument name, the pytree structure (``str`` of its treedef).
    """

    arrays: tuple[ArrayLeaf, ...]
    statics: tuple[StaticLeaf, ...]
    structure: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "arrays": [a.to_dict() for a in self.arrays],
            "statics": [s.to_dict() for s in self.statics],
            "structure": {name: tree for name, tree in self.structure},
        }

    def short(self, limit: int = 4) -> str:
        """A one-line summary, e.g. ``x: float32[8,128], mode='train'``."""
        parts = [f"{a.path}: {a.describe()}" for a in self.arrays[:limit]]
        if len(self.arrays) > limit:
            parts.append(f"... {len(self.arrays) - limit} more arrays")
        parts += [f"{s.path}={s.value}" for s in self.statics[:limit]]
        return ", ".join(parts) or "(no arguments)"


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference between two signatures.

    Attributes:
      path: the argument path (``batch['tokens']``).
      field: ``"shape"``, ``"rank"``, ``"dtype"``, ``"weak_type"``, ``"static"``,
        ``"structure"`` or ``"function"``.
      axis: the axis for a ``"shape"`` change, else ``None``.
      old: the earlier value, as text.
      new: the new value, as text.
    """

    path: str
    field: str
    axis: int | None
    old: str
    new: str

    @property
    def text(self) -> str:
        if self.field == "shape":
            return f"{self.path}.shape[{self.axis}]: {self.old} -> {self.new}"
        if self.field == "rank":
            return f"{self.path}.shape: {self.old} -> {self.new}"
        if self.field == "dtype":
            return f"{self.path} dtype: {self.old} -> {self.new}"
        if self.field == "static":
            return f"{self.path} (static): {self.old} -> {self.new}"
        if self.field == "function":
            return f"{self.path}: {self.new}"
        return f"{self.path}: {self.old} -> {self.new}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "field": self.field, "axis": self.axis, "old": self.old, "new": self.new, "text": self.text}


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a user's __repr__ may fail
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _static_leaf(path: str, value: Any) -> StaticLeaf:
    hashed_by = "identity" if type(value).__hash__ is object.__hash__ else "value"
    try:
        h = hash(value)
    except Exception:
        h = id(value)
    return StaticLeaf(path, _short_repr(value), type(value).__name__, hashed_by, h)


def bind_names(fun_signature: inspect.Signature | None, args: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """Pairs each argument of a call with its parameter name."""
    if fun_signature is not None:
        try:
            bound = fun_signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return list(bound.arguments.items())
        except TypeError:
            pass
    return [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())


def signature_of(named_args: list[tuple[str, Any]]) -> Signature:
    """Builds the signature of a call whose array arguments are tracers."""
    arrays: list[ArrayLeaf] = []
    statics: list[StaticLeaf] = []
    structure: list[tuple[str, str]] = []
    for name, value in named_args:
        leaves, treedef = jax.tree_util.tree_flatten_with_path(value)
        if any(isinstance(leaf, _compat.Tracer) for _, leaf in leaves):
            structure.append((name, str(treedef)))
            for path, leaf in leaves:
                where = name + jax.tree_util.keystr(path)
                if isinstance(leaf, _compat.Tracer):
                    arrays.append(ArrayLeaf(where, *_compat.aval_of(leaf)))
                else:
                    statics.append(_static_leaf(where, leaf))
        else:
            structure.append((name, "static"))
            statics.append(_static_leaf(name, value))
    return Signature(tuple(arrays), tuple(statics), tuple(structure))


def _leaf_changes(new: Signature, old: Signature) -> list[Change]:
    changes: list[Change] = []
    for a, b in zip(new.arrays, old.arrays):
        if a == b:
            continue
        if a.shape != b.shape:
            if len(a.shape) == len(b.shape):
                changes += [
                    Change(a.path, "shape", i, str(db), str(da))
                    for i, (da, db) in enumerate(zip(a.shape, b.shape))
                    if da != db
                ]
            else:
                changes.append(Change(a.path, "rank", None, str(b.shape), str(a.shape)))
        if a.dtype != b.dtype:
            changes.append(Change(a.path, "dtype", None, b.dtype, a.dtype))
        if a.weak_type != b.weak_type:
            changes.append(Change(a.path, "weak_type", None, _weak(b), _weak(a)))
    for s, t in zip(new.statics, old.statics):
        if s != t:
            changes.append(Change(s.path, "static", None, t.value, s.value))
    return changes


def _weak(leaf: ArrayLeaf) -> str:
    if leaf.weak_type:
        return "Python scalar (weak_type)" if leaf.shape == () else f"weakly typed {leaf.dtype} array"
    return f"{leaf.dtype} array"


def _keys(paths: list[str], name: str) -> str:
    tops = sorted({p[len(name):].split("]")[0] + "]" for p in paths if p.startswith(name + "[")})
    inner = ",".join(t[1:-1] for t in tops)
    return "{" + inner + "}"


def _structure_changes(new: Signature, old: Signature) -> list[Change]:
    changes = []
    old_tree, new_tree = dict(old.structure), dict(new.structure)
    for name in list(new_tree) + [n for n in old_tree if n not in new_tree]:
        before, after = old_tree.get(name), new_tree.get(name)
        if before == after:
            continue
        if before is None or after is None:
            changes.append(Change(name, "structure", None, "absent" if before is None else "present",
                                  "absent" if after is None else "present"))
            continue
        old_paths = [a.path for a in old.arrays] + [s.path for s in old.statics]
        new_paths = [a.path for a in new.arrays] + [s.path for s in new.statics]
        if before.startswith("PyTreeDef({") and after.startswith("PyTreeDef({"):
            changes.append(Change(name, "structure", None, "keys " + _keys(old_paths, name), _keys(new_paths, name)))
        elif "static" in (before, after):
            changes.append(Change(name, "structure", None,
                                  "static" if before == "static" else "traced",
                                  "static" if after == "static" else "traced"))
        else:
            changes.append(Change(name, "structure", None, _short_repr(before), _short_repr(after)))
    return changes


def explain(new: Signature, earlier: Sequence[Signature]) -> tuple[Change, ...]:
    """Diffs ``new`` against the nearest of ``earlier`` signatures.

    The nearest is the one with the same tree structure and the fewest
    differing leaves (the latest on a tie); with no signature of the same
    structure, the structure is diffed against the latest.

    >>> a = Signature((ArrayLeaf("x", (8, 128), "float32", False),), (), (("x", "*"),))
    >>> b = Signature((ArrayLeaf("x", (8, 131), "float32", False),), (), (("x", "*"),))
    >>> [c.text for c in explain(b, [a])]
    ['x.shape[1]: 128 -> 131']
    """
    same = [s for s in earlier if s.structure == new.structure and len(s.arrays) == len(new.arrays)
            and len(s.statics) == len(new.statics)]
    if same:
        best: list[Change] | None = None
        for s in reversed(same):
            c = _leaf_changes(new, s)
            if best is None or len(c) < len(best):
                best = c
        return tuple(best or ())
    if earlier:
        return tuple(_structure_changes(new, earlier[-1]))
    return ()


def named_signature(fun: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None
