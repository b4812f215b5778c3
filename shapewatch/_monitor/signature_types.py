"""The classes of a signature and of its diff: ``ArrayLeaf``, ``StaticLeaf``, ``Signature``, ``Change``.

``signature.py`` builds them and ``explain.py`` diffs them (``signature.py``
re-exports them all); here they are immutable data with ``to_dict()`` (the keys
of the JSON schema in the README). A ``Signature`` is stored compactly over an
interned ``Layout`` (``layout.py``); its ``arrays`` are made on access.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from shapewatch._monitor import layout as _layout

IDENTICAL = "identical"  # Change.field of a retrace whose signature equals an earlier one


@dataclasses.dataclass(frozen=True)
class ArrayLeaf:
    """An array argument (a tracer at trace time): ``path``, ``shape``, ``dtype``, ``weak_type``,
    and ``placement`` (a ``Placement``: sharding, committedness, memory kind; None where not read)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    weak_type: bool
    #: where the argument lived (``Placement``), or None where not read; not compared: two leaves
    #: of one abstract value are equal, while signatures (what jit keys on) compare placements too.
    placement: Any = dataclasses.field(default=None, compare=False)

    def describe(self) -> str:
        base = f"{self.dtype}[{','.join(map(str, self.shape))}]"
        return f"{base} (weak_type)" if self.weak_type else base

    def to_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "shape": list(self.shape), "dtype": self.dtype, "weak_type": self.weak_type}
        if self.placement is not None:
            out["placement"] = self.placement.to_dict()
        return out


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
    #: ``file:line`` of the code of a function (or partial, or method) compared by identity, else "":
    #: one code is one function re-created, two codes are two functions.
    code: str = dataclasses.field(default="", compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "value": self.value, "type": self.type, "hashed_by": self.hashed_by}
        if self.code:
            out["code"] = self.code
        return out


class Signature:
    """The abstract signature of one traced call.

    Attributes:
      arrays: the array leaves, in argument order (made on access from the
        compact form: use :meth:`array_at` for one leaf).
      statics: the static arguments.
      structure: per argument name, the pytree structure (``str`` of its treedef,
        or ``"static"``).
      keywords: the arguments passed by keyword (JAX caches ``f(x, y)`` and
        ``f(x, y=y)`` apart).
      defaults: the arguments not passed, whose default was used.

    Stored compactly: the structure and the array paths live in a :class:`Layout`
    shared by every signature of that structure, and the shapes, dtypes and weak
    types as codes where they differ from the layout's first signature.
    Immutable, hashable, equal when every field is equal.
    """

    __slots__ = ("layout", "statics", "keywords", "defaults", "_idx", "_val", "_hash", "_ukey")

    layout: _layout.Layout
    statics: tuple[StaticLeaf, ...]
    keywords: tuple[str, ...]
    defaults: tuple[str, ...]

    def __init__(self, arrays: Sequence[ArrayLeaf], statics: Sequence[StaticLeaf],
                 structure: Sequence[tuple[str, str]], keywords: Sequence[str] = (),
                 defaults: Sequence[str] = ()) -> None:
        layout = _layout.layout_of(tuple((n, t) for n, t in structure), tuple(a.path for a in arrays))
        codes = _layout.codes_of((a.shape, a.dtype, a.weak_type, a.placement) for a in arrays)
        self._set(layout, codes, statics, keywords, defaults)

    @classmethod
    def compact(cls, layout: _layout.Layout, codes: Any, statics: Sequence[StaticLeaf],
                keywords: Sequence[str] = (), defaults: Sequence[str] = ()) -> Signature:
        """A signature from its layout and the codes of its array leaves (``layout.py``)."""
        sig = cls.__new__(cls)
        sig._set(layout, codes, statics, keywords, defaults)
        return sig

    def _set(self, layout: _layout.Layout, codes: Any, statics: Sequence[StaticLeaf],
             keywords: Sequence[str], defaults: Sequence[str]) -> None:
        idx, val = _layout.delta(layout, codes)
        for name, value in (("layout", layout), ("statics", tuple(statics)), ("keywords", tuple(keywords)),
                            ("defaults", tuple(defaults)), ("_idx", idx), ("_val", val), ("_hash", None),
                            ("_ukey", None)):  # the unplaced key, made once (``index.unplaced_key``)
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    @property
    def structure(self) -> tuple[tuple[str, str], ...]:
        return self.layout.structure

    @property
    def codes(self) -> Any:
        """The code of every array leaf (a read-only ``numpy`` array; ``layout.value_of`` decodes one)."""
        return _layout.full(self.layout, self._idx, self._val)

    @property
    def delta(self) -> tuple[Any, Any]:
        """``(positions, codes)`` where this signature differs from its layout's base."""
        return self._idx, self._val

    @property
    def arrays(self) -> tuple[ArrayLeaf, ...]:
        value = _layout.leaf_value
        return tuple(ArrayLeaf(p, *value(c)) for p, c in zip(self.layout.paths, self.codes.tolist()))

    def array(self, i: int) -> ArrayLeaf:
        """The ``i``-th array leaf."""
        j = int(np.searchsorted(self._idx, i))
        code = self._val[j] if j < len(self._idx) and self._idx[j] == i else self.layout.base[i]  # type: ignore[index]
        return ArrayLeaf(self.layout.paths[i], *_layout.leaf_value(int(code)))

    def array_at(self, path: str) -> ArrayLeaf | None:
        """The array leaf at ``path`` (``batch['tokens']``), or None."""
        i = self.layout.index(path)
        return None if i is None else self.array(i)

    def unplaced(self) -> tuple[Any, ...]:
        """What JAX traces on, placements aside: equal for the same call traced and then compiled
        without a retrace (whose signature is read with the arguments' placements).

        Deprecated: shapewatch no longer uses it (its index keeps these keys, made once per
        signature); it will be removed in the next release."""
        warnings.warn("Signature.unplaced() is deprecated and will be removed in the next release",
                      DeprecationWarning, stacklevel=2)
        return (self.layout.structure, self.layout.paths, tuple(_layout.value_of(int(c)) for c in self.codes),
                self.statics, self.keywords, self.defaults)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Signature):
            return NotImplemented
        return self is other or (
            self.layout is other.layout and self.statics == other.statics and self.keywords == other.keywords
            and self.defaults == other.defaults and self._idx.tobytes() == other._idx.tobytes()
            and self._val.tobytes() == other._val.tobytes())

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((self.layout, self._idx.tobytes(), self._val.tobytes(),
                                                    self.statics, self.keywords, self.defaults)))
        return self._hash  # type: ignore[return-value]

    def __repr__(self) -> str:
        return (f"Signature(arrays={self.arrays!r}, statics={self.statics!r}, structure={self.structure!r}, "
                f"keywords={self.keywords!r}, defaults={self.defaults!r})")

    def __reduce__(self) -> Any:
        return Signature, (self.arrays, self.statics, self.structure, self.keywords, self.defaults)

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
        n = len(self.layout.paths)
        parts = [f"{a.path}: {a.describe()}" for a in map(self.array, range(min(n, limit)))]
        if n > limit:
            parts.append(f"... {n - limit} more arrays")
        parts += [f"{s.path}={s.value}" for s in self.statics[:limit]]
        return ", ".join(parts) or "(no arguments)"


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference between two signatures.

    Attributes:
      path: the argument path (``batch['tokens']``).
      field: ``"shape"``, ``"rank"``, ``"dtype"``, ``"weak_type"``, ``"static"``,
        ``"identity"`` (an equal-looking static of a class that hashes by identity),
        ``"sharding"`` (a leaf's sharding on one mesh changed), ``"placement"`` (its device,
        committedness, mesh or host origin changed), ``"memory_kind"``, ``"devices"`` (the
        devices of its mesh, same shape and axis names), ``"structure"``, ``"default"`` (passed in one call, left to its default in
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
        if self.field in ("sharding", "memory_kind"):
            return f"{self.path} {self.field.replace('_', ' ')}: {self.old} -> {self.new}"
        if self.field == "devices":
            return f"{self.path} mesh devices: {self.old} -> {self.new}"
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
