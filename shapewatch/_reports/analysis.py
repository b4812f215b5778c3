"""Why a function recompiled: causes aggregated over all its misses, and their fixes.

Per function, every leaf and axis whose size varied across the traced
signatures, with its distinct values, range, most frequent values and a text
histogram; static arguments that took several values; dtype and weak-type
flips; re-created functions; tree-structure changes; compiles without retrace.
Each cause carries a concrete suggestion (for a varying length: the buckets
that ``shapewatch.buckets`` would propose for the lengths seen).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from shapewatch._monitor.layout import leaf_value
from shapewatch._monitor.records import COMPILING_KINDS, Miss
from shapewatch._monitor.signature_types import ArrayLeaf
from shapewatch._reports.axis_fix import axis_fix, output_follows
from shapewatch._reports.grouping import LEAVES, WEAK_ARRAY, group_causes
from shapewatch._reports.placing import placement_causes


@dataclasses.dataclass(frozen=True)
class Cause:
    """One aggregated cause of recompiles.

    Attributes:
      kind: ``"axis"``, ``"static"``, ``"dtype"``, ``"weak_type"``,
        ``"recreated"``, ``"structure"``, ``"default"`` (an argument sometimes
        left to its default), ``"convention"`` (sometimes by keyword),
        ``"identical"`` (retraced with an identical signature), ``"placement"`` (a leaf's
        sharding, device, committedness or memory kind changed), ``"no_retrace"`` or
        ``"transform"`` (compiled under grad, vmap, ... applied outside jit), ``"inside"`` (traced
        first inside another jit, then compiled on its own: expected).
      path: the argument path, with ``.shape[axis]`` for an axis.
      misses: how many misses this cause explains.
      values: distinct values seen (as text), most frequent first.
      counts: how often each of ``values`` was traced; for an axis whose calls were counted
        (``watched_jit(count_calls=True)``), how often it was called (``histogram`` then
        opens with ``"bars: calls counted per length"``).
      text: the cause in one line.
      fix: what to do about it.
      histogram: a small text histogram of the values (axes only).
      paths: the leaves (or arguments) of a cause that groups several that changed the
        same way in the same misses (``path`` then names their arguments); else empty.
    """

    kind: str
    path: str
    misses: int
    values: tuple[str, ...]
    counts: tuple[int, ...]
    text: str
    fix: str
    histogram: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()

    @property
    def headline(self) -> str:
        """The cause in few words: without its most frequent values or its list of leaves."""
        return self.text.split(" (most")[0].split(LEAVES)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "path": self.path, "misses": self.misses, "values": list(self.values),
            "counts": list(self.counts), "text": self.text, "fix": self.fix, "histogram": list(self.histogram),
            "paths": list(self.paths),
        }


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 compile``, ``2 compiles``: a count with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def histogram(values: Sequence[int], rows: int = 6, width: int = 30,
              weights: Sequence[int] | None = None) -> tuple[str, ...]:
    """A text histogram of integers in at most ``rows`` equal-width bins (each value counted
    once, or ``weights`` times)."""
    weights = [1] * len(values) if weights is None else weights
    lo, hi = min(values), max(values)
    if lo == hi:
        return (f"{lo:>6}: {'#' * width} {sum(weights)}",)
    step = max(1, -(-(hi - lo + 1) // rows))
    bins: collections.Counter[int] = collections.Counter()
    for v, w in zip(values, weights):
        bins[(v - lo) // step] += w
    top = max(bins.values())
    lines = []
    for b in range((hi - lo) // step + 1):
        start, end = lo + b * step, min(hi, lo + (b + 1) * step - 1)
        n = bins.get(b, 0)
        lines.append(f"{start:>6}-{end:<6} {'#' * max(1 if n else 0, round(width * n / top))} {n}")
    return tuple(lines)


def _top(counter: collections.Counter[Any], n: int | None = None) -> tuple[tuple[str, ...], tuple[int, ...]]:
    items = counter.most_common(n)
    return tuple(str(v) for v, _ in items), tuple(c for _, c in items)


def _weak_words(path: str, array: bool) -> tuple[str, str]:
    """The text and fix of a leaf that flipped between weakly and strongly typed."""
    if array:  # jnp.array(1.0): weakly typed, then a typed result of the step passed back
        return (f"{path} flipped between {WEAK_ARRAY} (made from a Python scalar, e.g. jnp.array(1.0)) and a typed array",
                "give it a dtype where it is made (jnp.array(1.0, dtype=jnp.float32)): a weakly typed array "
                "and the typed array a step returns compile apart")
    return (f"{path} flipped between a Python scalar (weak type) and a typed array",
            "pass an array of fixed dtype every time (e.g. jnp.float32(x)), not a Python scalar")


def causes(misses: Sequence[Miss]) -> list[Cause]:
    """Aggregates the causes of a function's misses, most misses first."""
    traced = [m for m in misses if m.signature is not None]
    found: list[Cause] = []
    axes: dict[tuple[str, int], collections.Counter[int]] = collections.defaultdict(collections.Counter)
    dtypes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    weak: dict[str, collections.Counter[bool]] = collections.defaultdict(collections.Counter)
    statics: dict[str, collections.Counter[tuple[str, int]]] = collections.defaultdict(collections.Counter)
    # path -> {the (text, hash) of each static object: (its type, its code or "")}, for the paths where
    # some object hashes by identity (the others there, bound methods say, are counted with them)
    by_identity: dict[str, dict[tuple[str, int], tuple[str, str]]] = collections.defaultdict(dict)
    identity_paths: set[str] = set()
    weak_arrays: set[str] = set()
    varying = _varying_leaves(traced)
    for m, leaves in zip(traced, varying):
        for a in leaves:
            for i, d in enumerate(a.shape):
                axes[(a.path, i)][d] += 1
            dtypes[a.path][a.dtype] += 1
            weak[a.path][a.weak_type] += 1
            if a.weak_type and a.placement is not None and not a.placement.host:
                weak_arrays.add(a.path)  # jnp.array(1.0) on a device, not a Python scalar from the host
        for s in m.signature.statics:
            statics[s.path][(s.text or s.value, s.hash)] += 1
            by_identity[s.path][(s.text or s.value, s.hash)] = (s.type, s.code)
            if s.hashed_by == "identity":
                identity_paths.add(s.path)
    # Axes that always varied together (tokens and mask) are one cause.
    by_miss = [{a.path: a for a in leaves} for leaves in varying]
    sequences: dict[tuple[int, ...], list[str]] = collections.defaultdict(list)
    kinds: dict[tuple[int, ...], set[str]] = collections.defaultdict(set)
    for (path, axis), counter in axes.items():
        if len(counter) < 2:
            continue
        seq = tuple(_dim(by_path, path, axis) for by_path in by_miss)
        sequences[seq].append(f"{path}.shape[{axis}]")
        kinds[seq].add(_axis_kind(by_miss, path, axis))
    weights = _calls_of(traced)
    compile_s = _compile_seconds(misses)
    for seq, wheres in sequences.items():
        seen = [d for d in seq if d >= 0]
        counter = collections.Counter(seen)
        values, counts = _top(counter)
        where = " and ".join(wheres)
        kind = next(iter(kinds[seq])) if len(kinds[seq]) == 1 else ""
        output = output_follows(seen, [m.outputs for m, d in zip(traced, seq) if d >= 0])
        found.append(_axis_cause(where, seen, counter, values, counts,
                                 None if weights is None else [w for d, w in zip(seq, weights) if d >= 0],
                                 kind, compile_s, output))
    for path, counter in statics.items():
        if len(counter) < 2:
            continue
        found.append(_static_cause(path, counter, by_identity[path] if path in identity_paths else None))
    for path, counter in dtypes.items():
        if len(counter) < 2:
            continue
        values, counts = _top(counter)
        x64 = any(v.endswith("64") for v in values)
        fix = ("fix the dtype at the data source (x64 is on or a float64 array leaks in: cast with "
               "jnp.asarray(x, jnp.float32))" if x64 else "fix the dtype at the data source (cast once, before the call)")
        found.append(Cause("dtype", path, sum(counts) - 1, values, counts,
                           f"{path} dtype took {len(counter)} values: {', '.join(values)}", fix))
    for path, counter in weak.items():
        if len(counter) < 2:
            continue
        found.append(Cause("weak_type", path, min(counter.values()), ("weak", "strong"),
                           (counter[True], counter[False]), *_weak_words(path, path in weak_arrays)))
    recreated = sum(m.recreated for m in misses)
    if recreated:
        found.append(Cause("recreated", misses[0].function, recreated, (), (),
                           f"{misses[0].function} was re-created {counted(recreated, 'time')} (a new function "
                           "object with the same code each time)",
                           "hoist the watched_jit (or the lambda/closure it wraps) out of the loop; jit caches "
                           "by function identity"))
    found += _change_causes(misses)
    placed, explained = placement_causes(misses, Cause, counted)
    found += placed
    placement = sum(m.kind == "no_retrace" and m.reason is None and m.seq not in explained for m in misses)
    if placement:
        found.append(Cause("no_retrace", misses[0].function, placement, (), (),
                           f"{counted(placement, 'compile')} without a retrace (sharding, device or committedness changed)",
                           "place inputs the same way every call (jax.device_put with one sharding)"))
    inside, after_inlined = _compiled_after_inlined(misses)
    found += inside
    later = sum(m.kind == "no_retrace" and m.reason is not None and m.seq not in explained | after_inlined
                for m in misses)
    if later:
        found.append(Cause("no_retrace", misses[0].function, later, (), (),
                           f"{counted(later, 'compile')} without a retrace of a signature traced before "
                           "(inlined or under a transformation), or after a placement change",
                           "if the same arrays are placed differently (jax.device_put, committed vs. not), place "
                           "them the same way every call; a signature first traced inside grad, vmap or another "
                           "jit compiles once more when called on its own"))
    transformed = [m for m in misses if m.kind == "transform"]
    if transformed:
        found.append(Cause("transform", misses[0].function, len(transformed), (), (),
                           f"{counted(len(transformed), 'compile')} under a transformation applied outside jit "
                           "(grad, vmap, ...): each transformed call compiles its own executables",
                           "jit the transformed function (jax.jit(jax.grad(loss))) so that the transformation "
                           "is traced once inside it"))
    found = group_causes(found, misses)
    found.sort(key=lambda c: -c.misses)
    return found


def _calls_of(traced: Sequence[Miss]) -> list[int] | None:
    """Per miss, the calls counted for its signature (0 for a signature's later misses); None if not counted."""
    if not any(m.calls is not None for m in traced):
        return None
    return [m.calls or 0 for m in traced]


def _axis_kind(by_miss: list[dict[str, ArrayLeaf]], path: str, axis: int) -> str:
    """``"batch"`` (axis 0 of an array of 2 or more axes), ``"sequence"`` (a later axis) or ``""``."""
    if axis > 0:
        return "sequence"
    ndim = next((len(leaves[path].shape) for leaves in by_miss if path in leaves), 1)
    return "batch" if ndim >= 2 else ""


def _compile_seconds(misses: Sequence[Miss]) -> float | None:
    """The mean seconds a compile of this function took (trace, lower, compile), or None where not timed."""
    costs = [m.trace_s + m.lower_s + m.compile_s for m in misses if m.kind in COMPILING_KINDS and m.compile_s > 0]
    return sum(costs) / len(costs) if costs else None


def _axis_cause(where: str, seen: list[int], counter: collections.Counter[int], values: tuple[str, ...],
                counts: tuple[int, ...], weights: list[int] | None, kind: str = "",
                compile_s: float | None = None, output: str | None = None) -> Cause:
    """The cause of an axis that took several values, weighed by calls where they were counted."""
    if weights is not None:
        by_calls: collections.Counter[int] = collections.Counter()
        for d, w in zip(seen, weights):
            by_calls[d] += w
        lengths = sorted(by_calls)
        calls = [by_calls[d] for d in lengths]
        values, counts = _top(by_calls)  # with counted calls, the values are weighed by calls
        common = ", ".join(f"{v} ({counted(c, 'call')})" for v, c in zip(values[:3], counts[:3]) if c)
        advice = axis_fix(lengths, seen, kind, compile_s, calls=calls, calls_total=sum(calls), output=output)
        bars = ("bars: calls counted per length",) + histogram(lengths, weights=calls)
    else:
        common = ", ".join(f"{v} ({c}x)" for v, c in zip(values[:3], counts[:3]) if c > 1)
        distinct = sorted(counter)
        advice = axis_fix(distinct, seen, kind, compile_s, output=output)
        bars = ("bars: distinct lengths traced, each once (calls not counted)",) + histogram(distinct)
    return Cause("axis", where, len(seen) - 1, values, counts,
                 f"{where} took {len(counter)} values in [{min(counter)}, {max(counter)}]"
                 + (f" (most frequent: {common})" if common else ""),
                 advice or "fix this axis to one size", bars)


_CALLABLES = {"function", "partial", "method", "builtin_function_or_method", "custom_jvp", "custom_vjp", "PjitFunction"}


def _static_cause(path: str, counter: collections.Counter[tuple[str, int]],
                  identity: dict[tuple[str, int], tuple[str, str]] | None) -> Cause:
    texts = [text for text, _ in counter]
    if identity and all(code for _, code in identity.values()):
        functions = _functions_cause(path, counter, identity)
        if functions is not None:
            return functions
    if identity:
        n = len(counter)  # distinct objects (one compiled more than once counts once)
        kinds = collections.Counter(t for t, _ in identity.values())
        of = (f"of {next(iter(kinds))}" if len(kinds) == 1 else
              "(" + ", ".join(f"{c} of {t}" for t, c in kinds.most_common()) + ")")
        which = "it hashes" if len(kinds) == 1 else "they hash"
        types = " / ".join(t for t, _ in kinds.most_common())
        if set(kinds) <= _CALLABLES:
            fix = ("create it once, outside the loop, and pass the same object every call (a function "
                   "or functools.partial is compared by identity; to vary what a partial binds, bind "
                   "arrays with equinox.Partial or pass them as arguments)")
        else:
            fix = (f"make {types} hash by value (@dataclasses.dataclass(frozen=True), or define "
                   f"__hash__ and __eq__), or pass the same object every call")
        return Cause("static", path, sum(counter.values()) - 1, (texts[0],), (n,),
                     f"static argument {path} was {n} different objects {of}; {which} by identity "
                     "(equal-looking objects compile apart)", fix)
    values, counts = _top(collections.Counter({_shown(text, texts): c for (text, _), c in counter.items()}))
    numeric = all(_is_number(v) for v in values)
    fix = ("pass it as a traced argument (not static): a Python number that changes compiles every time"
           if numeric else "each static value compiles once; keep the number of values small, or make it traced")
    return Cause("static", path, sum(counts) - 1, values, counts,
                 f"static argument {path} took {len(counter)} values ({', '.join(values[:4])}"
                 f"{', ...' if len(values) > 4 else ''})", fix)


def _functions_cause(path: str, counter: collections.Counter[tuple[str, int]],
                      identity: dict[tuple[str, int], tuple[str, str]]) -> Cause | None:
    """The cause of functions passed as a static argument when each object is a function of its own
    (different code: each compiles once, as expected); None when one code came as several objects."""
    codes = collections.Counter(code for _, code in identity.values())
    if len(codes) < len(identity):
        return None  # a function re-created: the fix is to create it once
    named = [f"{text} ({os.path.basename(identity[key][1])})" for key in counter for text in (key[0],)]
    return Cause("static", path, sum(counter.values()) - 1, tuple(named), tuple(counter.values()),
                 f"static argument {path} took {len(named)} different functions: {_listed(named)}: "
                 "one executable per function, as expected",
                 "nothing to fix: a different function is a different program, compiled once each")


def _listed(items: Sequence[str], shown: int = 4) -> str:
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _shown(text: str, texts: list[str], limit: int = 80) -> str:
    """A static's repr, short: its end when long reprs differ only there."""
    if len(text) <= limit:
        return text
    if len({t[:limit - 3] for t in texts}) == len(set(texts)):
        return text[:limit - 3] + "..."
    return "..." + text[-(limit - 3):]


_CHANGE_CAUSES = {
    "structure": ("{path} changed tree structure {times}",
                  "keep the pytree structure fixed (same keys and lengths every call; fill absent "
                  "entries with zeros and a mask)"),
    "default": ("{path} was left to its default (a Python constant, compiled in) in some calls and passed "
                "(traced) in others: each way compiles apart; changed {times}",
                "pass {path} in every call or in none; or make it static (static_argnames='{path}') so "
                "that each value compiles once"),
    "static default": ("{path} was left to its default in some calls and passed (a static value) in "
                       "others: each way compiles apart; changed {times}",
                       "pass {path} in every call or in none"),
    "convention": ("{path} was passed positionally in some calls and by keyword in others (jit caches each "
                   "way apart); changed {times}",
                   "pass {path} the same way every call (always positionally or always by keyword)"),
    "identical": ("retraced {times} with an identical signature (a reason outside the arguments)",
                  "see each miss: a cleared cache (clear_cache, jax.clear_caches), another JAX "
                  "configuration context, or a re-created function"),
}


def _change_causes(misses: Sequence[Miss]) -> list[Cause]:
    """Causes counted from the misses' changes: structure, default, convention, identical."""
    counter: collections.Counter[tuple[str, str]] = collections.Counter()
    passed_static: set[str] = set()  # defaults passed as a static value (not traced)
    for m in misses:
        for ch in m.changes:
            if ch.field == "default" and "static" in f"{ch.old} {ch.new}":
                passed_static.add(ch.path)
        for c in {(c.field, c.path) for c in m.changes if c.field in _CHANGE_CAUSES}:
            # a re-created function has its own cause; a compile without a retrace retraced nothing
            if c[0] != "identical" or not (m.recreated or m.kind == "no_retrace"):
                counter[c] += 1
    found = []
    for (field, path), n in counter.items():
        text, fix = _CHANGE_CAUSES["static default" if path in passed_static and field == "default" else field]
        where = path or misses[0].function
        found.append(Cause(field, where, n, (), (), text.format(path=where, times=counted(n, "time")),
                           fix.format(path=where)))
    return found


def _compiled_after_inlined(misses: Sequence[Miss]) -> tuple[list[Cause], set[int]]:
    """Signatures traced inside another jit, then compiled for a call of their own: expected.

    Returns the causes and the ``seq`` of the compiles they explain.
    """
    inlined: dict[Any, Miss] = {}
    pairs: collections.Counter[tuple[str, str, str]] = collections.Counter()
    seqs: set[int] = set()
    for m in misses:
        if m.signature is None:
            continue
        if m.kind == "inlined" and m.inside is not None:
            inlined.setdefault(m.signature, m)
        elif m.kind == "no_retrace" and m.signature in inlined:
            first = inlined.pop(m.signature)
            pairs[(first.inside or "?", _short_site(first.call_site), _short_site(m.call_site))] += 1
            seqs.add(m.seq)
    found = [Cause("inside", inside, n, (), (),
                   f"traced first inside {inside} ({traced}), then compiled on its own at {called}, "
                   f"{'once' if n == 1 else counted(n, 'time')} (one executable for its own calls): expected",
                   "nothing to fix: a function traced inside another jit is part of that jit's executable; "
                   "called on its own, it compiles its own executable once per signature")
             for (inside, traced, called), n in pairs.items()]
    return found, seqs


def _short_site(site: str | None) -> str:
    """``file.py:12`` of a call site ``/path/to/file.py:12``."""
    return os.path.basename(site) if site else "?"


def _dim(leaves: dict[str, ArrayLeaf], path: str, axis: int) -> int:
    a = leaves.get(path)
    return a.shape[axis] if a is not None and axis < len(a.shape) else -1


def _varying_leaves(traced: Sequence[Miss]) -> list[list[ArrayLeaf]]:
    """Per miss, its array leaves whose shape, dtype or weak type is not the same in every miss.

    Only those can be a cause; they are found from the signatures' deltas against
    their layout's base (``_monitor/layout.py``), without reading the other leaves.
    """
    groups: dict[Any, list[Any]] = {}
    for m in traced:
        groups.setdefault(m.signature.layout, []).append(m.signature)
    varying: set[str] = set()
    for layout, sigs in groups.items():
        deltas = [s.delta for s in sigs]
        if not any(idx.size for idx, _ in deltas):
            continue
        touched = np.unique(np.concatenate([idx for idx, _ in deltas]))
        rows = np.tile(layout.base[touched], (len(sigs), 1))
        for r, (idx, val) in enumerate(deltas):
            rows[r, np.searchsorted(touched, idx)] = val
        varying.update(layout.paths[i] for i in touched[(rows != rows[0]).any(axis=0)].tolist())
    if len(groups) > 1:  # constant within each structure, but not across them
        seen: dict[str, int] = {}
        for layout, sigs in groups.items():
            for path, code in zip(layout.paths, sigs[0].codes.tolist()):
                if seen.setdefault(path, code) != code:
                    varying.add(path)
    out: dict[int, list[ArrayLeaf]] = {}
    for layout, sigs in groups.items():
        positions = sorted(i for i in map(layout.index, varying) if i is not None)
        paths = [layout.paths[i] for i in positions]
        for s in sigs:
            out[id(s)] = [ArrayLeaf(p, *leaf_value(c)) for p, c in zip(paths, s.codes[positions].tolist())]
    return [out[id(m.signature)] for m in traced]


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
