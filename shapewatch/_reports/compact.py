"""The compact report (schema ``shapewatch.report/2``) and the one in-memory form every reader uses.

A big model's misses share almost everything: the tree structure, 2,000 paths,
and all shapes but one. Schema 2 stores each of those once and refers to them:

* ``values``: every distinct ``[shape, dtype, weak_type]`` of an array leaf, with a
  fourth item, its ``placement`` (``sharding``, ``mesh``, ``committed``, ``memory_kind``, ``devices``),
  where it was read;
* ``structures``: per tree structure, its ``arguments`` (``{arg: treedef}``), its
  array ``paths`` and the ``base`` value index of each leaf;
* ``signatures``: a ``structure`` index, the ``changed`` leaves (``[leaf index,
  value index]`` where the signature differs from the structure's base), and its
  ``statics``, ``keywords`` and ``defaults`` as in schema 1;
* each miss's ``signature`` is an index into ``signatures`` (or null).

:func:`expand` turns it into the schema 1 form (each miss with its signature
inline), which is what ``Report.to_dict()`` and ``load_report`` return and what
text, diff, merge and HTML read: misses of one signature share one signature
dict, and signatures of one structure share the dicts of their unchanged leaves,
so the expanded form costs pointers, not leaves. Treat it as read-only.
"""

from __future__ import annotations

from typing import Any

from shapewatch._monitor import layout as _layout

SCHEMA_1 = "shapewatch.report/1"
SCHEMA_2 = "shapewatch.report/2"


def encode(environment: dict[str, Any], summary: str, functions: list[Any],
           unwatched: dict[str, tuple[int, float]]) -> dict[str, Any]:
    """The schema 2 dict of a report's parts (``functions``: ``FunctionReport`` objects)."""
    values: dict[int, int] = {}
    structures: dict[Any, int] = {}
    signatures: dict[Any, int] = {}
    out_values: list[list[Any]] = []
    out_structures: list[dict[str, Any]] = []
    out_signatures: list[dict[str, Any]] = []

    def value(code: int) -> int:
        i = values.get(code)
        if i is None:
            shape, dtype, weak, placed = _layout.leaf_value(code)
            i = values[code] = len(out_values)
            out_values.append([list(shape), dtype, weak] + ([placed.to_dict()] if placed is not None else []))
        return i

    def structure(layout: Any) -> int:
        i = structures.get(layout)
        if i is None:
            i = structures[layout] = len(out_structures)
            out_structures.append({"arguments": dict(layout.structure), "paths": list(layout.paths),
                                   "base": [value(c) for c in layout.base.tolist()]})
        return i

    def signature(sig: Any) -> int | None:
        if sig is None:
            return None
        i = signatures.get(sig)
        if i is None:
            idx, val = sig.delta
            entry = {"structure": structure(sig.layout),
                     "changed": [[j, value(c)] for j, c in zip(idx.tolist(), val.tolist())],
                     "statics": [s.to_dict() for s in sig.statics],
                     "keywords": list(sig.keywords), "defaults": list(sig.defaults)}
            i = signatures[sig] = len(out_signatures)
            out_signatures.append(entry)
        return i

    fns = [{**f.record.to_dict([m.to_dict(signature(m.signature)) for m in f.record.misses]),
            "causes": [c.to_dict() for c in f.causes]} for f in functions]
    return {
        "schema": SCHEMA_2,
        "environment": environment,
        "summary": summary,
        "values": out_values,
        "structures": out_structures,
        "signatures": out_signatures,
        "functions": fns,
        "unwatched": {k: {"compiles": c, "seconds": s} for k, (c, s) in unwatched.items()},
    }


def expand(data: dict[str, Any]) -> dict[str, Any]:
    """The schema 1 form of a (checked) schema 2 dict, sharing what the signatures share."""
    def leaf(path: str, v: int) -> dict[str, Any]:
        value = data["values"][v]
        out = {"path": path, "shape": value[0], "dtype": value[1], "weak_type": value[2]}
        if len(value) > 3:
            out["placement"] = value[3]
        return out

    bases = [[leaf(p, v) for p, v in zip(s["paths"], s["base"])] for s in data["structures"]]
    sigs = []
    for sig in data["signatures"]:
        k = sig["structure"]
        arrays = bases[k]
        if sig["changed"]:
            arrays = list(arrays)
            paths = data["structures"][k]["paths"]
            for j, v in sig["changed"]:
                arrays[j] = leaf(paths[j], v)
        sigs.append({"arrays": arrays, "statics": sig["statics"], "structure": data["structures"][k]["arguments"],
                     "keywords": sig["keywords"], "defaults": sig["defaults"]})
    functions = [_with_signatures(f, sigs) for f in data["functions"]]
    out = {"schema": SCHEMA_1, "environment": data.get("environment", {}), "summary": data["summary"],
           "functions": functions, "unwatched": data.get("unwatched", {})}
    if "across_runs" in data:  # optional: signatures an earlier run compiled, compiled again (across.py)
        out["across_runs"] = data["across_runs"]
    return out


def _with_signatures(f: Any, sigs: list[dict[str, Any]]) -> Any:
    """A function's dict with each miss's signature inline; what is malformed is left for the checks."""
    if not isinstance(f, dict) or not isinstance(f.get("misses"), list):
        return f
    return {**f, "misses": [{**m, "signature": None if m["signature"] is None else sigs[m["signature"]]}
                            if isinstance(m, dict) and "signature" in m else m for m in f["misses"]]}


def _index(value: Any, size: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < size


def problem(data: dict[str, Any]) -> str | None:
    """The first thing that keeps a schema 2 dict from expanding, described; None if it expands."""
    for name in ("values", "structures", "signatures", "functions"):
        if not isinstance(data.get(name), list):
            return f"the report has no \"{name}\" list"
    if "summary" not in data:
        return "the report has no \"summary\""
    for i, v in enumerate(data["values"]):
        if not (isinstance(v, list) and len(v) in (3, 4) and isinstance(v[0], list)
                and (len(v) == 3 or isinstance(v[3], dict))):
            return f"values[{i}] is {v!r:.40}, expected [shape, dtype, weak_type] or [shape, dtype, weak_type, placement]"
    n_values = len(data["values"])
    for i, s in enumerate(data["structures"]):
        if not isinstance(s, dict) or not all(isinstance(s.get(k), t) for k, t in
                                              (("arguments", dict), ("paths", list), ("base", list))):
            return f"structures[{i}] needs \"arguments\" (an object), \"paths\" and \"base\" (lists)"
        if len(s["paths"]) != len(s["base"]) or not all(_index(v, n_values) for v in s["base"]):
            return f"structures[{i}] \"base\" needs one index into \"values\" per path"
    for i, sig in enumerate(data["signatures"]):
        if not isinstance(sig, dict) or not _index(sig.get("structure"), len(data["structures"])):
            return f"signatures[{i}] has no \"structure\" index"
        n_leaves = len(data["structures"][sig["structure"]]["paths"])
        changed = sig.get("changed")
        if not isinstance(changed, list) or not all(
                isinstance(c, list) and len(c) == 2 and _index(c[0], n_leaves) and _index(c[1], n_values)
                for c in changed):
            return f"signatures[{i}] \"changed\" needs [leaf index, value index] pairs"
        for name in ("statics", "keywords", "defaults"):
            if not isinstance(sig.get(name), list):
                return f"signatures[{i}] has no \"{name}\" list"
    for i, f in enumerate(data["functions"]):
        for j, m in enumerate(f.get("misses", []) if isinstance(f, dict) else []):
            sig = m.get("signature", None) if isinstance(m, dict) else None
            if sig is not None and not _index(sig, len(data["signatures"])):
                return f"functions[{i}] misses[{j}][\"signature\"] is {sig!r:.40}, expected an index into \"signatures\" or null"
    return None
