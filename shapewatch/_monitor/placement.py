"""Where an array argument lives: what jit's compile cache keys on beyond shape and dtype.

A :class:`Placement` is the sharding of a leaf (the mesh's axis names and sizes
with the ``PartitionSpec``, or the device of a single-device array), whether it
is committed to it, and its memory kind; or, for a NumPy array or a Python
scalar, that it came from the host. It is read from the call's real arguments
on a cache miss only (``compat.call_arguments``), never on a cached call.

Placements are interned: one object per distinct ``(sharding, committed)``, so a
2,000-leaf pytree on one sharding reads 2,000 dict lookups and stores one
object. ``layout.py`` folds the placement into a leaf's code with its shape and
dtype, so a signature keeps only the leaves whose code differs from the first.
"""

from __future__ import annotations

import dataclasses
import operator
import re
import threading
from typing import Any

import numpy as np

from shapewatch._monitor import compat as _compat


@dataclasses.dataclass(frozen=True)
class Placement:
    """The placement of one array argument.

    Attributes:
      sharding: ``"P('model',)"`` for a named sharding, the device (``"cpu:0"``)
        for a single-device array, ``"host"`` for a NumPy array or Python scalar,
        else the sharding's ``repr``.
      mesh: the mesh of a named sharding, ``"{data: 2, model: 4}"``, else ``""``.
      committed: committed to its devices (``jax.device_put`` with a device or a
        sharding, or a jit's output); an uncommitted array may be moved by JAX.
      memory_kind: the memory kind (``"device"``, ``"pinned_host"``, ...) or ``""``.
      devices: a mesh's devices in mesh order (``"cpu:0..7"``, ``"cpu:[7, 6, 5, 4, 3, 2,
        1, 0]"``): two meshes of one shape and axis names on other devices (or in another
        order) compile apart. ``""`` without a mesh.
    """

    sharding: str
    mesh: str = ""
    committed: bool = False
    memory_kind: str = ""
    devices: str = ""

    @property
    def host(self) -> bool:
        return self.sharding == "host"

    @property
    def one_device(self) -> bool:
        """On one device (``cpu:0``), not a mesh nor another multi-device sharding."""
        return not self.mesh and _ONE_DEVICE.fullmatch(self.sharding) is not None

    def where(self) -> str:
        """The sharding in words: ``P('model',) on mesh {data: 2, model: 4}``, ``cpu:0``."""
        return f"{self.sharding} on mesh {self.mesh}" if self.mesh else self.sharding

    def describe(self) -> str:
        """``committed to cpu:0``, ``uncommitted``, ``P() on mesh {...}``, ``host (NumPy array or Python scalar)``."""
        if self.host:
            return "from the host (NumPy array or Python scalar)"
        if not self.committed:
            return "uncommitted" if not self.mesh else f"uncommitted, {self.where()}"
        return self.where() if self.mesh else f"committed to {self.sharding}"

    def to_dict(self) -> dict[str, Any]:
        return {"sharding": self.sharding, "mesh": self.mesh, "committed": self.committed,
                "memory_kind": self.memory_kind, "devices": self.devices}


_ONE_DEVICE = re.compile(r"[\w-]+:(\d+|\?)")
HOST = Placement("host")
_lock = threading.Lock()
_interned: dict[Placement, Placement] = {}
_by_key: dict[Any, Placement] = {}  # (sharding object, committed) -> its placement
_KEY_CAP = 10_000


def intern(p: Placement) -> Placement:
    found = _interned.get(p)
    if found is None:
        with _lock:
            found = _interned.setdefault(p, p)
    return found


def _device(device: Any) -> str:
    return f"{getattr(device, 'platform', 'device')}:{getattr(device, 'id', '?')}"


def _mesh_devices(mesh: Any) -> str:
    """The mesh's devices in mesh order: ``cpu:0..7`` when their ids run up by one, else listed."""
    try:
        devices = list(np.asarray(mesh.devices).flat)
    except Exception:  # an abstract mesh has no devices
        return ""
    if not devices:
        return ""
    platform = getattr(devices[0], "platform", "device")
    ids = [getattr(d, "id", -1) for d in devices]
    if len(ids) > 1 and ids == list(range(ids[0], ids[0] + len(ids))):
        return f"{platform}:{ids[0]}..{ids[-1]}"
    shown = ", ".join(map(str, ids[:16])) + (", ..." if len(ids) > 16 else "")
    return f"{platform}:[{shown}]"


def _spec(spec: Any) -> str:
    return "P" + repr(tuple(spec))


def _of_sharding(sharding: Any, committed: bool) -> Placement:
    memory_kind = getattr(sharding, "memory_kind", None) or ""
    mesh = getattr(sharding, "mesh", None)
    spec = getattr(sharding, "spec", None)
    if mesh is not None and spec is not None:
        shape = getattr(mesh, "shape", {})
        axes = ", ".join(f"{name}: {size}" for name, size in dict(shape).items())
        return Placement(_spec(spec), "{" + axes + "}", committed, memory_kind, _mesh_devices(mesh))
    devices = getattr(sharding, "device_set", None)
    if devices is not None and len(devices) == 1:
        return Placement(_device(next(iter(devices))), "", committed, memory_kind)
    text = " ".join(repr(sharding).split())  # one line: PositionalSharding's repr spans several
    return Placement(text if len(text) <= 80 else text[:77] + "...", "", committed, memory_kind)


def placement_of(x: Any) -> Placement | None:
    """The placement of a concrete argument leaf, or None (a tracer, or unreadable)."""
    if isinstance(x, (np.ndarray, np.generic, int, float, complex)):
        return HOST
    if isinstance(x, _compat.Tracer) or _compat.is_high_level(x):  # a hijax value's .sharding reads it
        return None
    sharding = getattr(x, "sharding", None)
    if sharding is None:
        return None
    try:
        key = (sharding, _compat.committed(x))
        found = _by_key.get(key)
        if found is None:
            found = intern(_of_sharding(sharding, key[1]))
            if len(_by_key) > _KEY_CAP:
                _by_key.clear()
            _by_key[key] = found
        return found
    except Exception:  # a sharding that does not hash, or an array type without committedness
        return None


_sharding_of = operator.attrgetter("_sharding")  # x.sharding, without its Python property
_committed_of = operator.attrgetter("_committed")


def placements_of(leaves: list[Any]) -> list[Placement | None]:
    """The placements of a call's leaves. Arrays share their sharding objects (JAX caches
    them), so each distinct ``(sharding object, committed)`` is read once per call; where
    every leaf is a ``jax.Array`` on one sharding (a model on one device, or replicated),
    the leaves are read in bulk: a few C-level passes over 20,000 leaves, no Python per leaf."""
    array = _compat.ArrayImpl
    if array is not None and leaves and all(map(array.__instancecheck__, leaves)) \
            and type(leaves[0]) is array:
        shardings = list(map(_sharding_of, leaves))
        first = shardings[0]
        if shardings.count(first) == len(shardings):  # identity first: one sharding object (usual)
            committed = list(map(_committed_of, leaves))
            if committed.count(committed[0]) == len(committed):
                return [placement_of(leaves[0])] * len(leaves)
    memo: dict[tuple[int, bool], Placement | None] = {}
    out: list[Placement | None] = []
    for x in leaves:
        if type(x) is not array:  # numpy, scalars, tracers, other array types: one by one
            out.append(placement_of(x))
            continue
        key = (id(x._sharding), x._committed)
        found = memo.get(key, memo)
        if found is memo:
            found = memo[key] = placement_of(x)
        out.append(found)
    return out
