"""Interned storage of signatures: one layout per tree structure, one code per abstract value.

A signature of a function taking a 2,000-leaf pytree names 2,000 paths, but two
misses of one structure name the same ones. So the names are kept once, in a
:class:`Layout` (argument names, treedefs, array paths), shared by every
signature of that structure; each distinct ``(shape, dtype, weak_type)`` gets a
small integer code (with the leaf's placement, ``placement.py``, when it was
read: one code per distinct value and placement); a signature is its layout plus the codes of its leaves,
kept as the positions and codes where it differs from the layout's base (the
first signature of that structure). Comparing two signatures of one layout is a
vectorised comparison of code arrays.

The tables only grow with what is distinct: structures and abstract values.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from shapewatch._monitor import compat as _compat

CODE = np.uint32
_EMPTY = np.zeros(0, CODE)
_EMPTY.setflags(write=False)
_lock = threading.Lock()
_values: list[tuple[tuple[int, ...], str, bool, Any]] = []  # code -> (shape, dtype, weak_type, placement)
_codes: dict[tuple[tuple[int, ...], str, bool, Any], int] = {}
_by_aval: dict[Any, int] = {}  # a JAX aval (hashable by value), or (aval, placement) -> its code
_by_aval_at: dict[int, dict[Any, int]] = {}  # placement (interned: its id) -> aval -> its code
_AVAL_CAP = 100_000
#: code -> the code of its value without a placement (its own code where it has none), grown as codes are
_plain = np.zeros(64, CODE)


def code_of(shape: tuple[Any, ...], dtype: str, weak_type: bool, placement: Any = None) -> int:
    """The code of one ``(shape, dtype, weak_type, placement)``, allocated at first sight."""
    global _plain
    key = (shape, dtype, weak_type, placement)
    code = _codes.get(key)
    if code is None:
        plain = None if placement is None else code_of(shape, dtype, weak_type)
        with _lock:
            code = _codes.get(key)
            if code is None:
                code = len(_values)
                _values.append(key)
                if code >= len(_plain):
                    grown = np.zeros(2 * len(_plain), CODE)
                    grown[: len(_plain)] = _plain
                    _plain = grown
                _plain[code] = code if plain is None else plain
                _codes[key] = code  # published last: a code read without the lock has its unplaced code
    return code


def unplaced(codes: np.ndarray) -> np.ndarray:
    """The codes of the same values without their placements."""
    return _plain[codes]


def value_of(code: int) -> tuple[tuple[int, ...], str, bool]:
    """``(shape, dtype, weak_type)`` of a code."""
    return _values[code][:3]


def placement_at(code: int) -> Any:
    """The placement (``placement.Placement``) of a code, or None where it was not read."""
    return _values[code][3]


def leaf_value(code: int) -> tuple[tuple[int, ...], str, bool, Any]:
    """``(shape, dtype, weak_type, placement)`` of a code."""
    return _values[code]


def _aval_code(aval: Any, placement: Any = None, source: Any = None) -> int:
    fields = _compat.array_fields(aval)
    if fields is None:  # another kind of value (a token, a high-level value): read each time
        return code_of(*_compat.aval_fields(aval, source), placement)
    code = code_of(*fields, placement)
    try:
        if len(_by_aval) > _AVAL_CAP:
            _by_aval.clear()
            _by_aval_at.clear()
        _by_aval[aval if placement is None else (aval, id(placement))] = code
        if placement is not None:
            _by_aval_at.setdefault(id(placement), {})[aval] = code
    except TypeError:  # an unhashable abstract value: no shortcut for it
        pass
    return code


def codes_of_avals(avals: Sequence[Any], placements: Sequence[Any] | None = None,
                   sources: Sequence[Any] | None = None) -> np.ndarray:
    """The codes of JAX abstract values (with their placements, when read), in bulk: one dict
    lookup per leaf once they were seen. ``sources``: the tracers they are of, which hold
    what the abstract value of a mutable high-level value does not (its current type)."""
    keys: Sequence[Any] = avals
    table = _by_aval
    if placements is not None and placements:  # interned placements: their id is their value
        first = placements[0]
        if first is not None and placements.count(first) == len(placements):  # one placement (usual)
            table = _by_aval_at.get(id(first)) or _by_aval_at.setdefault(id(first), {})
        else:
            keys = [a if p is None else (a, id(p)) for a, p in zip(avals, placements)]
    try:
        found = list(map(table.get, keys))
    except TypeError:
        found = [None] * len(avals)
    i = -1
    try:
        while True:  # the few values not seen before
            i = found.index(None, i + 1)
            found[i] = _aval_code(avals[i], None if placements is None else placements[i],
                                  None if sources is None else sources[i])
    except ValueError:
        pass
    return np.array(found, CODE) if found else _EMPTY


def codes_of(values: Iterable[tuple[Any, ...]]) -> np.ndarray:
    """The codes of ``(shape, dtype, weak_type)`` or ``(shape, dtype, weak_type, placement)`` values."""
    codes = [code_of(tuple(v[0]), v[1], bool(v[2]), v[3] if len(v) > 3 else None) for v in values]
    return np.array(codes, CODE) if codes else _EMPTY


class Layout:
    """What signatures of one tree structure share: per argument its treedef, and the array paths.

    Interned: while any signature holds a layout, an equal one is that same object.
    ``base`` is the codes of the first signature made with it; the others are kept
    as their difference from it.
    """

    __slots__ = ("structure", "paths", "base", "_hash", "_index", "_plain_base", "__weakref__")

    structure: tuple[tuple[str, str], ...]
    paths: tuple[str, ...]
    base: np.ndarray | None

    def __hash__(self) -> int:
        return self._hash

    def index(self, path: str) -> int | None:
        """The position of an array path (a dict built at the first call, once per layout)."""
        if self._index is None:
            self._index = {p: i for i, p in enumerate(self.paths)}
        return self._index.get(path)

    def plain_base(self) -> np.ndarray:
        """The base's codes without placements (made once per layout)."""
        if self._plain_base is None:
            assert self.base is not None
            self._plain_base = unplaced(self.base)
        return self._plain_base

    def set_base(self, codes: np.ndarray) -> np.ndarray:
        if self.base is None:
            with _lock:
                if self.base is None:
                    codes = codes.copy()
                    codes.setflags(write=False)
                    self.base = codes
        return self.base

    def __repr__(self) -> str:
        return f"Layout({len(self.structure)} arguments, {len(self.paths)} array leaves)"


_layouts: weakref.WeakValueDictionary[tuple[Any, ...], Layout] = weakref.WeakValueDictionary()


def layout_of(structure: tuple[tuple[str, str], ...], paths: tuple[str, ...]) -> Layout:
    """The interned layout of a structure and its array paths."""
    key = (structure, paths)
    found = _layouts.get(key)
    if found is not None:
        return found
    with _lock:
        found = _layouts.get(key)
        if found is None:
            found = Layout.__new__(Layout)
            found.structure, found.paths, found.base = structure, paths, None
            found._hash, found._index, found._plain_base = hash(key), None, None
            _layouts[key] = found
    return found


def delta(layout: Layout, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, codes)`` where ``codes`` differ from the layout's base."""
    base = layout.set_base(codes)
    where = np.flatnonzero(codes != base)
    if not where.size:
        return _EMPTY, _EMPTY
    return where.astype(CODE), codes[where]


def full(layout: Layout, idx: np.ndarray, val: np.ndarray) -> np.ndarray:
    """The codes of every leaf, from the base and a delta."""
    assert layout.base is not None
    if not idx.size:
        return layout.base
    codes = layout.base.copy()
    codes[idx] = val
    return codes


#: layout -> the paths of its arguments' None children (the tree structure holds them; noted
#: once per layout, on a miss, for the diff of two structures)
_NONE_PATHS: weakref.WeakKeyDictionary[Layout, tuple[str, ...]] = weakref.WeakKeyDictionary()


def note_none_paths(layout: Layout, paths: tuple[str, ...]) -> None:
    _NONE_PATHS[layout] = paths


def none_paths(layout: Layout) -> tuple[str, ...]:
    """The paths of the None children of a layout's arguments (``t.b``), as its leaves' are written."""
    return _NONE_PATHS.get(layout, ())
