"""The diff of two signatures: what changed between a miss and the nearest earlier one.

Runs on a miss only. Against signatures of the same layout (``layout.py``) the
leaves that differ are found by a vectorised comparison of their codes, and only
those are read; the nearest signature is found from counts over the deltas,
without reading the leaves of the others.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from shapewatch._monitor import layout as _layout
from shapewatch._monitor import treediff as _treediff
from shapewatch._monitor.index import _FAR, SignatureIndex
from shapewatch._monitor.signature_types import ArrayLeaf, Change, Signature, StaticLeaf, identical

_REPR_LIMIT = 80


def _shorten(text: str) -> str:
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


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
    if a.placement != b.placement and a.placement is not None and b.placement is not None and not (
            _uncommitted(a.placement) and _uncommitted(b.placement)):
        changes += _placement_changes(a.path, b.placement, a.placement)
    return changes


def _uncommitted(p: Any) -> bool:
    """From the host or uncommitted on one device: jit keys both alike (JAX may move them)."""
    return p.host or (not p.committed and not p.mesh)


def _placement_changes(path: str, old: Any, new: Any) -> list[Change]:
    """``old`` and ``new`` placements (``placement.Placement``) of one leaf, which differ."""
    if old.mesh and old.mesh == new.mesh and old.committed == new.committed and old.sharding != new.sharding:
        return [Change(path, "sharding", None, old.sharding, f"{new.sharding} on mesh {new.mesh}")]
    if (old.sharding, old.mesh, old.committed) == (new.sharding, new.mesh, new.committed):
        found = []
        if old.memory_kind != new.memory_kind:
            found.append(Change(path, "memory_kind", None, old.memory_kind or "default", new.memory_kind or "default"))
        if old.devices != new.devices:
            found.append(Change(path, "devices", None, old.devices or "unknown", new.devices or "unknown"))
        if found:
            return found
    return [Change(path, "placement", None, old.describe(), new.describe())]


def _static_change(s: StaticLeaf, t: StaticLeaf) -> Change:
    """``s`` (new) against ``t`` (old), which compare unequal."""
    new, old = s.text or s.value, t.text or t.value
    if s.code and t.code and s.code != t.code:  # two functions, not one re-created
        return Change(s.path, "static", None, f"{t.value} ({_where(t.code)})", f"{s.value} ({_where(s.code)})")
    if new == old and s.type == t.type:
        if s.hashed_by == "identity":
            return Change(s.path, "identity", None, s.type, s.value)
        return Change(s.path, "static", None, t.value, "an equal-looking value (same repr, compared by hash: another hash)")
    if s.type != t.type and s.value == t.value:
        return Change(s.path, "static", None, f"{t.value} ({t.type})", f"{s.value} ({s.type})")
    if max(len(new), len(old)) > _REPR_LIMIT:
        return Change(s.path, "static", None, *_differing_parts(old, new))
    return Change(s.path, "static", None, t.value, s.value)


def _where(code: str) -> str:
    """``file.py:12`` of a ``/path/to/file.py:12``."""
    return os.path.basename(code)


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


def _leaf_changes(new: Signature, old: Signature, new_codes: np.ndarray | None = None) -> list[Change]:
    """The changes of leaves at the same positions: only the leaves whose codes differ are read."""
    changes: list[Change] = []
    if new.layout is old.layout:
        codes = new.codes if new_codes is None else new_codes
        for i in np.flatnonzero(codes != old.codes).tolist():
            changes += _array_changes(new.array(i), old.array(i))
    else:  # the same structure text in two layouts (paths that the text does not show): leaf by leaf
        for a, b in zip(new.arrays, old.arrays):
            if a != b:
                changes += _array_changes(a, b)
    for s, t in zip(new.statics, old.statics):
        if s != t:
            changes.append(_static_change(s, t))
    return changes


def _weak(leaf: ArrayLeaf) -> str:
    if leaf.weak_type:  # a Python scalar comes from the host; jnp.array(1.0) is a weakly typed array
        host = leaf.placement is None or leaf.placement.host
        return "Python scalar (weak_type)" if leaf.shape == () and host else f"weakly typed {leaf.dtype} array"
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
    leaves = [i for i, p in enumerate(sig.layout.paths) if p == name or p.startswith((name + "[", name + "."))]
    if len(leaves) == 1 and sig.layout.paths[leaves[0]] == name:
        return f"{how}, traced {sig.array(leaves[0]).describe()}"
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
    codes = ({p: c for p, c in zip(old.layout.paths, old.codes.tolist())},
             {p: c for p, c in zip(new.layout.paths, new.codes.tolist())})

    def describe(path: str, in_new: bool) -> str:
        code = codes[in_new].get(path)
        return ArrayLeaf(path, *_layout.value_of(code)).describe() if code is not None else "a leaf"

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
        found = _treediff.diff(name, tree_old, tree_new, describe) if tree_old and tree_new else None
        if not found or not _named_like_leaves(found, old, new) or any(  # a framework's names, custom nodes
                o == n or "CustomNode(" in o + n for _, o, n in found):
            by_paths = _treediff.path_diff(name, _leaf_kinds(old), _leaf_kinds(new), describe)
            if by_paths:
                changes += [Change(p, "structure", None, o, n) for p, o, n in by_paths]
                continue
        if tree_old is None or tree_new is None:
            changes.append(Change(name, "structure", None, _shorten(repr(before)), _shorten(repr(after))))
            continue
        changes += [Change(p, "structure", None, o, n) for p, o, n in found or ()]
    # Leaves at the same path in both, outside what changed shape.
    for path, a in codes[True].items():
        b = codes[False].get(path)
        if b is not None and a != b:
            changes += _array_changes(ArrayLeaf(path, *_layout.leaf_value(a)), ArrayLeaf(path, *_layout.leaf_value(b)))
    return changes


def _leaf_paths(sig: Signature) -> list[str]:
    return list(sig.layout.paths) + [s.path for s in sig.statics]


def _leaf_kinds(sig: Signature) -> dict[str, str]:
    """Each leaf path of ``sig``: an array, a static, or a None child of its structure."""
    kinds = dict.fromkeys(_layout.none_paths(sig.layout), "none")
    kinds.update(dict.fromkeys((s.path for s in sig.statics), "static"))
    kinds.update(dict.fromkeys(sig.layout.paths, "array"))
    return kinds


def _named_like_leaves(found: list[tuple[str, str, str]], old: Signature, new: Signature) -> bool:
    """Whether the paths the treedef diff found are written as the leaves' paths are (they are
    not when a framework's adapter names leaves its own way: ``model.blocks[1]``)."""
    paths = _leaf_paths(old) + _leaf_paths(new)
    return all(any(p == q or q.startswith((p + ".", p + "[")) for q in paths) for p, _, _ in found)


def explain(new: Signature, earlier: SignatureIndex | Sequence[Signature],
            reason: str | None = None) -> tuple[Change, ...]:
    """Diffs ``new`` against the nearest of ``earlier`` signatures.

    The nearest is the one with the same tree structure and the fewest
    differing leaves (the latest on a tie); with no signature of the same
    structure, the one whose structure differs in the fewest arguments. Returns
    ``()`` only with no earlier signature (a first compile); for a signature
    equal to an earlier one, the :func:`identical` marker, whose text is
    ``reason`` when the caller knows why JAX retraced (a cleared cache, a
    re-created function, another configuration context).

    ``earlier`` is a function's :class:`~shapewatch._monitor.index.SignatureIndex`
    (a miss: the search reads the leaves of the candidates that can be nearest, not
    of every earlier signature), or a sequence, oldest first.

    >>> a = Signature((ArrayLeaf("x", (8, 128), "float32", False),), (), (("x", "*"),))
    >>> b = Signature((ArrayLeaf("x", (8, 131), "float32", False),), (), (("x", "*"),))
    >>> [c.text for c in explain(b, [a])]
    ['x.shape[1]: 128 -> 131']
    >>> [c.text for c in explain(b, [a, b])]
    ['identical signature: retraced for a reason outside the arguments']
    """
    if not isinstance(earlier, SignatureIndex):
        index = SignatureIndex()
        for s in dict.fromkeys(earlier):
            index.add(s)
        earlier = index
    if not len(earlier):
        return ()
    sigs, bounds, seqs, _ = earlier.candidates(new)
    if sigs:
        # Lower bounds first, the latest first among equal bounds: a candidate whose bound exceeds
        # the best number of changes so far (or equals it, and is older) cannot be nearer.
        order = np.lexsort((-seqs, bounds))
        best: list[Change] | None = None
        best_seq = -1
        for i in order.tolist():
            bound = int(bounds[i])
            if sigs[i] is None or bound >= _FAR:
                break
            if best is not None and (bound > len(best) or (bound == len(best) and seqs[i] < best_seq)):
                break
            s = sigs[i]
            c = _leaf_changes(new, s)
            changed = {x.path for x in c}  # a new static value says more than "passed, not default"
            c += [x for x in _default_changes(new, s) if x.path not in changed] + _convention_changes(new, s)
            if best is None or len(c) < len(best) or (len(c) == len(best) and seqs[i] > best_seq):
                best, best_seq = c, int(seqs[i])
            if not best:
                return (identical(reason),)
        if best is not None:
            return tuple(best)
    nearest = earlier.nearest_structure(new)
    assert nearest is not None
    return tuple(_structure_changes(new, nearest) + _convention_changes(new, nearest))
