"""Leaves that changed the same way in the same misses: one cause, with its leaves listed compactly.

A train state placed after the first step changes the placement of every one of
its leaves in one miss; a model cast to bfloat16 changes the dtype of each of its
weights. Each such event is one cause with one fix, not one per leaf: here the
causes of one kind whose leaves changed the same way in the same misses are
merged (:func:`group_causes`), and their leaves written compactly
(:func:`leaves_text`: ``model.{w1, w2}, optimizer.step``), after ``; leaves: ``. ``placing.py`` groups
placement changes itself, with fixes that fit a whole state.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from shapewatch._monitor.records import Miss

WEAK_ARRAY = "a weakly typed array"  # a weak_type cause of an array on a device (not a Python scalar)

_KEY = re.compile(r"(\.[^.\[]+|\[[^\]]*\])$")  # the last key of a path: `.w1`, `[0]`, `['kernel']`
_SHOWN = 6  # groups of leaves written out before "and N more"


def argument_of(path: str) -> str:
    """The argument a leaf path belongs to: ``optimizer`` of ``optimizer.opt_state[0].mu.w2``."""
    cut = [i for i in (path.find("["), path.find(".")) if i > 0]
    return path[:min(cut)] if cut else path


def owners_text(paths: Sequence[str]) -> str:
    """The arguments that hold ``paths``: ``model``, ``model and optimizer``, ``4 arguments``."""
    names = list(dict.fromkeys(map(argument_of, paths)))
    if len(names) > 3:
        return f"{len(names)} arguments"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def leaves_text(paths: Sequence[str], shown: int = _SHOWN) -> str:
    """Leaf paths written compactly: siblings under their parent, at most ``shown`` groups.

    >>> leaves_text(["model.w1", "model.w2", "opt.mu.w1", "opt.mu.w2", "opt.step", "x"])
    'model.{w1, w2}, opt.mu.{w1, w2}, opt.step, x'
    >>> leaves_text([f"xs[{i}]" for i in range(9)], shown=2)
    'xs[0], xs[1] and 7 more leaves'
    """
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for path in paths:
        last = _KEY.search(path)
        if last is None or last.start() == 0 or not last.group().startswith("."):
            groups[path].append("")  # an argument, or an item: written whole
        else:
            groups[path[:last.start()]].append(last.group()[1:])
    parts: list[tuple[str, int]] = []
    for parent, names in groups.items():
        if names == [""]:
            parts.append((parent, 1))
        elif len(names) == 1:
            parts.append((f"{parent}.{names[0]}", 1))
        else:
            parts.append((f"{parent}.{{{', '.join(names)}}}", len(names)))
    text = ", ".join(p for p, _ in parts[:shown])
    rest = sum(n for _, n in parts[shown:])
    return text + (f" and {rest} more {'leaf' if rest == 1 else 'leaves'}" if rest else "")


LEAVES = "; leaves: "  # where a grouped cause's text lists its leaves (the headline stops there)


def group_text(paths: Sequence[str], what: str) -> str:
    """``model and optimizer: <what>; leaves: model.{w1, w2}, ...``: a grouped cause's text."""
    return f"{owners_text(paths)}: {what}{LEAVES}{leaves_text(paths)}"


def _leaf_way(misses: Sequence[Miss], path: str, read: Callable[[Any], Hashable]) -> tuple[Hashable, ...]:
    """What ``read`` gives of the leaf at ``path`` in each traced miss (None where absent)."""
    out = []
    for m in misses:
        leaf = m.signature.array_at(path) if m.signature is not None else None
        out.append(None if leaf is None else read(leaf))
    return tuple(out)


def _change_way(misses: Sequence[Miss], field: str, path: str) -> tuple[Hashable, ...]:
    """The misses whose changes have ``field`` at ``path``, with what changed."""
    return tuple((m.seq, c.old, c.new) for m in misses for c in m.changes if c.field == field and c.path == path)


_WAYS: dict[str, Callable[[Sequence[Miss], str], tuple[Hashable, ...]]] = {
    "dtype": lambda misses, path: _leaf_way(misses, path, lambda a: a.dtype),
    "weak_type": lambda misses, path: _leaf_way(misses, path, lambda a: a.weak_type),
    "structure": lambda misses, path: tuple(s for s, _, _ in _change_way(misses, "structure", path)),
    "default": lambda misses, path: tuple((s, o.startswith("default")) for s, o, _ in _change_way(misses, "default", path)),
    "convention": lambda misses, path: _change_way(misses, "convention", path),
}


def _names(paths: Sequence[str]) -> str:
    return paths[0] if len(paths) == 1 else ", ".join(paths[:-1]) + f" and {paths[-1]}"


def _times(n: int) -> str:
    return f"{n} time{'s' * (n != 1)}"


def _grouped_text(first: Any, paths: Sequence[str]) -> tuple[str, str]:
    """The text and fix of one cause for the leaves ``paths``, which changed as ``first``'s did."""
    n = len(paths)
    if first.kind == "dtype":
        return group_text(paths, f"the dtype of {n} leaves took {len(first.values)} values: "
                                 f"{', '.join(first.values)}"), first.fix
    if first.kind == "weak_type":
        weak = WEAK_ARRAY if WEAK_ARRAY in first.text else "a Python scalar (weak type)"
        return group_text(paths, f"{n} leaves flipped between {weak} and a typed array"), first.fix
    if first.kind == "structure":
        return group_text(paths, f"{n} entries changed tree structure {_times(first.misses)}"), first.fix
    names = _names(paths)
    if first.kind == "default":
        return (f"{names} were left to their defaults in some calls and passed in others: each way compiles "
                f"apart; changed {_times(first.misses)}", f"pass {names} in every call or in none")
    return (f"{names} were passed positionally in some calls and by keyword in others (jit caches each way "
            f"apart); changed {_times(first.misses)}",
            f"pass {names} the same way every call (always positionally or always by keyword)")


def _merged(group: list[Any], misses: Sequence[Miss]) -> Any:
    """One cause for ``group``, causes of one kind whose leaves changed the same way."""
    paths = [p for c in group for p in (c.paths or (c.path,))]
    if group[0].kind in ("structure", "default", "convention"):  # in the order the misses name them
        order = {c.path: i for i, c in reversed(list(enumerate(c for m in misses for c in m.changes)))}
        paths.sort(key=lambda p: order.get(p, len(order)))
    text, fix = _grouped_text(group[0], paths)
    return dataclasses.replace(group[0], path=", ".join(dict.fromkeys(map(argument_of, paths))),
                               text=text, fix=fix, paths=tuple(paths))


def group_causes(found: Sequence[Any], misses: Sequence[Miss]) -> list[Any]:
    """``found`` with the causes of one kind whose leaves changed the same way in the same
    misses merged into one (kinds ``dtype``, ``weak_type``, ``structure``, ``default``,
    ``convention``), in the place of the first of them."""
    traced = [m for m in misses if m.signature is not None]
    groups: dict[Hashable, list[Any]] = {}
    order: list[Hashable] = []
    for i, c in enumerate(found):
        way = _WAYS.get(c.kind)
        key: Hashable = (c.kind, c.values, c.counts, c.misses, way(traced, c.path)) if way and c.path else i
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(c)
    return [groups[k][0] if len(groups[k]) == 1 else _merged(groups[k], misses) for k in order]
