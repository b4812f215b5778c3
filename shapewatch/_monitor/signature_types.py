"""The classes of a signature and of its diff: ``ArrayLeaf``, ``StaticLeaf``, ``Signature``, ``Change``.

``signature.py`` builds and diffs them (and re-exports them); here they are plain
frozen data with ``to_dict()`` (the keys of the JSON schema in the README).
"""

from __future__ import annotations

import dataclasses
from typing import Any

IDENTICAL = "identical"  # Change.field of a retrace whose signature equals an earlier one


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
    #: the repr, longer than ``value`` (up to 4096 characters), to show where two long ones differ.
    text: str = dataclasses.field(default="", compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "value": self.value, "type": self.type, "hashed_by": self.hashed_by}


@dataclasses.dataclass(frozen=True)
class Signature:
    """The abstract signature of one traced call.

    Attributes:
      arrays: the array leaves, in argument order.
      statics: the static arguments.
      structure: per argument name, the pytree structure (``str`` of its treedef,
        or ``"static"``).
      keywords: the arguments passed by keyword (JAX caches ``f(x, y)`` and
        ``f(x, y=y)`` apart).
      defaults: the arguments not passed, whose default was used.
    """

    arrays: tuple[ArrayLeaf, ...]
    statics: tuple[StaticLeaf, ...]
    structure: tuple[tuple[str, str], ...]
    keywords: tuple[str, ...] = ()
    defaults: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "arrays": [a.to_dict() for a in self.arrays],
            "statics": [s.to_dict() for s in self.statics],
            "structure": {name: tree for name, tree in self.structure},
            "keywords": list(self.keywords),
            "defaults": list(self.defaults),
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
        ``"identity"`` (an equal-looking static of a class that hashes by identity),
        ``"structure"``, ``"default"`` (passed in one call, left to its default in
        the other), ``"convention"`` (passed positionally in one, by keyword in the
        other), ``"function"``, or ``"identical"`` (:data:`IDENTICAL`: the signature
        equals an earlier one; ``new`` is the reason, as a sentence, when the caller knows it).
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
        if self.field == "identity":
            return (f"{self.path} (static): {self.new}, same repr, compared by identity: a new object on every call "
                    f"({self.old} is a class that hashes by identity)")
        if self.field == "convention":
            return f"{self.path}: passed {self.old} -> {self.new}"
        if self.field == "function":
            return f"{self.path}: {self.new}"
        if self.field == IDENTICAL:
            return self.new or "identical signature: retraced for a reason outside the arguments"
        return f"{self.path}: {self.old} -> {self.new}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "field": self.field, "axis": self.axis, "old": self.old, "new": self.new, "text": self.text}


def identical(reason: str | None = None) -> Change:
    """The marker of a retrace whose signature equals an earlier one.

    ``reason``, when the caller knows why JAX retraced, is the sentence to show.

    >>> identical().text
    'identical signature: retraced for a reason outside the arguments'
    >>> identical("identical signature: retraced after clear_cache()").text
    'identical signature: retraced after clear_cache()'
    """
    return Change("", IDENTICAL, None, "", reason or "")
