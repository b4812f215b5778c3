"""Causes of recompiles from placement: a leaf's sharding, device, committedness or memory kind changed.

Each miss names the leaves whose placement changed (``Change`` fields
``"sharding"``, ``"placement"``, ``"memory_kind"``, ``"devices"``); here they are aggregated per
leaf, with the fix that fits: a leaf the step returns (its carried state) that
came back with another sharding than it was given, an input that comes from the
host or uncommitted on some calls, or a leaf placed differently by the caller.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from shapewatch._monitor.records import Miss

FIELDS = ("sharding", "placement", "memory_kind", "devices")


def _argument(path: str) -> str:
    cut = [i for i in (path.find("["), path.find(".")) if i > 0]
    return path[:min(cut)] if cut else path


def _fix(path: str, miss: Miss, change: Any) -> str:
    old = change.old
    leaf = miss.signature.array_at(path) if miss.signature is not None else None
    new = None if leaf is None else leaf.placement
    target = "one fixed sharding"
    if new is not None and new.mesh:
        target = f"NamedSharding(mesh, {new.sharding})"
    elif new is not None and new.committed and new.one_device:
        target = f"the device {new.sharding}"
    elif new is not None and new.committed and not new.host:
        target = f"one sharding ({new.sharding})"
    if change.field == "memory_kind":
        sharding = target if new is not None and new.mesh else "x.sharding"
        return (f"keep {path} in one memory kind every call (it came in {old}, then in {change.new}): "
                f"jax.device_put(x, {sharding}.with_memory_kind(...)) with the kind it should live in, "
                "or jit's in_shardings with that memory kind")
    if change.field == "devices":
        return (f"{path} came on a mesh of the same shape and axis names over other devices ({old}, "
                f"then {change.new}): build the mesh once (jax.make_mesh or Mesh(devices, names) with "
                "one device order) and reuse it for every call")
    argument = _argument(path)
    if new is not None and new.committed and argument in miss.returns and not old.startswith("from the host"):
        return (f"{argument} is returned by the step, so {new.where()} is most likely the sharding the step "
                f"gave {path} on the previous call (it was passed in as {old}): give the input that sharding "
                f"from the start (jax.device_put(..., {target})), or pin the output to the input's sharding "
                "(jit's out_shardings, or jax.lax.with_sharding_constraint in the step)")
    if old.startswith(("from the host", "uncommitted")) or (new is not None and (new.host or not new.committed)):
        return (f"{path} comes from the host or uncommitted on some calls and placed on others: put it on "
                f"the devices once per step with one jax.device_put(x, {target}) (or jit's in_shardings), "
                "the same way every call")
    return (f"place {path} the same way every call (one jax.device_put with {target}, or jit's "
            "in_shardings)")


def placement_causes(misses: Sequence[Miss], cause: Any, counted: Any) -> tuple[list[Any], set[int]]:
    """The placement causes of a function's misses (``cause`` makes one), and the misses they explain."""
    by_path: dict[str, list[tuple[Miss, Any]]] = collections.defaultdict(list)
    for m in misses:
        for c in m.changes:
            if c.field in FIELDS:
                by_path[c.path].append((m, c))
    found = []
    for path, seen in by_path.items():
        moves = collections.Counter(f"{c.old} -> {c.new}" for _, c in seen)
        values, counts = zip(*moves.most_common())
        what = {"sharding": "sharding", "memory_kind": "memory kind",
                "devices": "mesh devices"}.get(seen[-1][1].field, "placement")
        text = (f"{path} {what} changed ({counted(len(seen), 'compile')}): {values[0]}"
                + (f" and {counted(len(values) - 1, 'other change')}" if len(values) > 1 else ""))
        m, c = seen[-1]
        found.append(cause("placement", path, len(seen), tuple(values), tuple(counts), text, _fix(path, m, c)))
    return found, {m.seq for seen in by_path.values() for m, _ in seen}
