"""Causes of recompiles from placement: a leaf's sharding, device, committedness or memory kind changed.

Each miss names the leaves whose placement changed (``Change`` fields
``"sharding"``, ``"placement"``, ``"memory_kind"``, ``"devices"``); here they are aggregated per
leaf (and the leaves that changed the same way in the same misses, a whole train
state, into one cause), with the fix that fits: a leaf the step returns (its carried state) that
came back with another sharding than it was given, an input that comes from the
host or uncommitted on some calls, or a leaf placed differently by the caller.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from shapewatch._monitor.records import Miss
from shapewatch._reports.grouping import argument_of, group_text, owners_text

FIELDS = ("sharding", "placement", "memory_kind", "devices")


def _target(miss: Miss, path: str) -> str:
    """The placement ``path`` had on ``miss``, as the argument of a ``jax.device_put``."""
    leaf = miss.signature.array_at(path) if miss.signature is not None else None
    new = None if leaf is None else leaf.placement
    if new is not None and new.mesh:
        return f"NamedSharding(mesh, {new.sharding})"
    if new is not None and new.committed and new.one_device:
        return f"the device {new.sharding}"
    if new is not None and new.committed and not new.host:
        return f"one sharding ({new.sharding})"
    return "one fixed sharding"


def _way(path: str, miss: Miss, change: Any) -> str:
    """How a leaf's placement changed, as its fix sees it: ``memory_kind``, ``devices``,
    ``returned`` (the step gave its carried state another sharding), ``host`` (from the
    host or uncommitted on some calls, placed on others) or ``placed`` (placed differently)."""
    if change.field in ("memory_kind", "devices"):
        return change.field
    leaf = miss.signature.array_at(path) if miss.signature is not None else None
    new = None if leaf is None else leaf.placement
    if (new is not None and new.committed and argument_of(path) in miss.returns
            and not change.old.startswith("from the host")):
        return "returned"
    if change.old.startswith(("from the host", "uncommitted")) or (new is not None and (new.host or not new.committed)):
        return "host"
    return "placed"


def _fix(path: str, miss: Miss, change: Any) -> str:
    old, way, target = change.old, _way(path, miss, change), _target(miss, path)
    if way == "memory_kind":
        sharding = target if target.startswith("NamedSharding") else "x.sharding"
        return (f"keep {path} in one memory kind every call (it came in {old}, then in {change.new}): "
                f"jax.device_put(x, {sharding}.with_memory_kind(...)) with the kind it should live in, "
                "or jit's in_shardings with that memory kind")
    if way == "devices":
        return (f"{path} came on a mesh of the same shape and axis names over other devices ({old}, "
                f"then {change.new}): build the mesh once (jax.make_mesh or Mesh(devices, names) with "
                "one device order) and reuse it for every call")
    if way == "returned":
        argument = argument_of(path)
        leaf = miss.signature.array_at(path) if miss.signature is not None else None
        where = leaf.placement.where() if leaf is not None and leaf.placement is not None else change.new
        return (f"{argument} is returned by the step, so {where} is most likely the sharding the step "
                f"gave {path} on the previous call (it was passed in as {old}): give the input that sharding "
                f"from the start (jax.device_put(..., {target})), or pin the output to the input's sharding "
                "(jit's out_shardings, or jax.lax.with_sharding_constraint in the step)")
    if way == "host":
        return (f"{path} comes from the host or uncommitted on some calls and placed on others: put it on "
                f"the devices once per step with one jax.device_put(x, {target}) (or jit's in_shardings), "
                "the same way every call")
    return (f"place {path} the same way every call (one jax.device_put with {target}, or jit's "
            "in_shardings)")


def _group_fix(paths: list[str], miss: Miss, change: Any) -> str:
    """One fix for leaves whose placement changed the same way in the same misses (a whole state)."""
    way, owners = _way(paths[0], miss, change), owners_text(paths)
    one = len({argument_of(p) for p in paths}) == 1
    targets = list(dict.fromkeys(_target(miss, p) for p in paths))
    shardings = ", ".join(targets[:3]) + (f" and {len(targets) - 3} more" if len(targets) > 3 else "")
    if way == "host":
        return (f"{owners} {'comes' if one else 'come'} from the host or uncommitted on some calls and placed "
                f"on others, all {len(paths)} leaves on the same calls: place the state once, before the loop, "
                f"with the shardings the step leaves it in (one jax.device_put of the whole state: {shardings}), "
                "or give it jit's in_shardings; then every call sees one placement")
    if way == "returned":
        return (f"{owners} {'is' if one else 'are'} returned by the step with other shardings than "
                f"{'it was' if one else 'they were'} given: place the state once, before the loop, with the "
                f"shardings the step gives it ({shardings}), or pin the outputs to the inputs' shardings "
                "(jit's out_shardings, or jax.lax.with_sharding_constraint in the step)")
    return f"for all {len(paths)} leaves of {owners}: {_fix(paths[0], miss, change)}"


def _moves(seen: list[tuple[Miss, Any]]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    moves = collections.Counter(f"{c.old} -> {c.new}" for _, c in seen)
    values, counts = zip(*moves.most_common())
    return tuple(values), tuple(counts)


def _moves_text(values: Sequence[str], counts: Sequence[int], counted: Any, shown: int = 3) -> str:
    """The moves of a group's leaves: ``uncommitted -> 2 shardings on mesh {model: 8}: P() (5 leaves),
    P(None, 'model') (3 leaves)``, or each move with its count of leaves."""
    parts = [v.split(" -> ", 1) for v in values]
    olds = {p[0] for p in parts}
    suffix = parts[0][-1][parts[0][-1].find(" on mesh "):] if " on mesh " in parts[0][-1] else ""
    if len(olds) == 1 and all(len(p) == 2 for p in parts) and (len(values) == 1 or (
            suffix and all(p[1].endswith(suffix) for p in parts))):
        if len(values) == 1:
            return values[0]
        news = ", ".join(f"{p[1].removesuffix(suffix)} ({counted(n, 'leaf', 'leaves')})"
                         for p, n in zip(parts[:shown], counts[:shown]))
        more = f" and {len(values) - shown} more" if len(values) > shown else ""
        return f"{parts[0][0]} -> {len(values)} shardings{suffix}: {news}{more}"
    more = f"; and {counted(len(values) - shown, 'other change')}" if len(values) > shown else ""
    return "; ".join(f"{v} ({counted(n, 'leaf', 'leaves')})" for v, n in zip(values[:shown], counts[:shown])) + more


def _what(change: Any) -> str:
    return {"sharding": "sharding", "memory_kind": "memory kind", "devices": "mesh devices"}.get(change.field, "placement")


def placement_causes(misses: Sequence[Miss], cause: Any, counted: Any) -> tuple[list[Any], set[int]]:
    """The placement causes of a function's misses (``cause`` makes one), and the misses they explain.

    Leaves whose placement changed the same way (``_way``) in the same misses are one
    cause with one fix: a train state placed after the first step is one event.
    """
    by_path: dict[str, list[tuple[Miss, Any]]] = collections.defaultdict(list)
    for m in misses:
        for c in m.changes:
            if c.field in FIELDS:
                by_path[c.path].append((m, c))
    groups: dict[Any, list[str]] = collections.defaultdict(list)
    for path, seen in by_path.items():
        m, c = seen[-1]
        groups[(tuple(m.seq for m, _ in seen), c.field, _way(path, m, c))].append(path)
    found = []
    for paths in groups.values():
        seen = [s for p in paths for s in by_path[p]]
        m, c = by_path[paths[0]][-1]
        values, counts = _moves(seen)
        compiles = counted(len(by_path[paths[0]]), "compile")
        if len(paths) == 1:
            text = (f"{paths[0]} {_what(c)} changed ({compiles}): {values[0]}"
                    + (f" and {counted(len(values) - 1, 'other change')}" if len(values) > 1 else ""))
            found.append(cause("placement", paths[0], len(seen), values, counts, text, _fix(paths[0], m, c)))
            continue
        text = group_text(paths, f"the {_what(c)} of {len(paths)} leaves changed ({compiles}): "
                                 f"{_moves_text(values, counts, counted)}")
        found.append(cause("placement", ", ".join(dict.fromkeys(map(argument_of, paths))), len(by_path[paths[0]]),
                           values, counts, text, _group_fix(paths, m, c), paths=tuple(paths)))
    return found, {m.seq for seen in by_path.values() for m, _ in seen}
