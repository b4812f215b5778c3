"""The distinct signatures of one watched function, kept with what a miss asks of them.

A miss asks three things of the signatures traced before it: was this one traced
before, placements aside; which earlier one is nearest (the base of its diff);
and, for a compile without a retrace, was it first traced inside another jit.
Each is answered from tables kept as signatures are added, so that what a miss
costs does not grow with the misses before it:

* the *unplaced key* of a signature (what JAX traces on: its layout, the codes of
  its leaves without their placements, its statics and call convention) is made
  once per signature from its compact form (``layout.py``: the positions where it
  differs from its layout's first signature), in time of that difference, not of
  its leaves; a dict of those keys answers "traced before" and holds the trace
  contexts and inlined misses of each;
* the signatures of one layout are kept as flat arrays of their deltas and of
  their statics' ids, so the number of leaves and statics by which each differs
  from a new signature (a lower bound on its changes) is a few vectorised
  operations; the diff then reads the leaves of the one or two candidates that
  can be nearest, never of the others;
* a miss of a new tree structure compares structures, one per distinct one.

Not thread-safe by itself: the registry's lock guards it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import numpy as np

from shapewatch._monitor import layout as _layout
from shapewatch._monitor.signature_types import Signature, StaticLeaf

_FAR = np.iinfo(np.int64).max // 4  # the bound of a removed slot: never a candidate


class _Column:
    """A growable numpy array (rows of ``width`` when given), appended in amortised O(1)."""

    __slots__ = ("data", "n")

    def __init__(self, dtype: Any, width: int | None = None) -> None:
        self.data = np.zeros((16,) if width is None else (16, width), dtype)
        self.n = 0

    def append(self, values: Any) -> None:
        values = np.asarray(values, self.data.dtype)
        count = 1 if values.ndim == self.data.ndim - 1 else len(values)
        if self.n + count > len(self.data):
            grown = np.zeros((max(2 * len(self.data), self.n + count),) + self.data.shape[1:], self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n: self.n + count] = values
        self.n += count

    def view(self) -> np.ndarray:
        return self.data[: self.n]


class _Group:
    """The signatures of one layout and number of statics, as arrays over their slots."""

    __slots__ = ("layout", "width", "sigs", "slot", "idx", "val", "owner", "statics", "seq", "alive", "dead")

    # ``val`` holds the delta's codes without their placements: a leaf whose placement alone differs
    # may be no change (read on one side only, or both uncommitted), so only a value that differs
    # placements aside is sure to be one, and the bound counts those.

    def __init__(self, layout: _layout.Layout, width: int) -> None:
        self.layout, self.width = layout, width
        self.sigs: list[Signature | None] = []
        self.slot: dict[Signature, int] = {}
        self.idx, self.val, self.owner = _Column(_layout.CODE), _Column(_layout.CODE), _Column(np.int64)
        self.statics = _Column(np.int64, width)
        self.seq, self.alive = _Column(np.int64), _Column(bool)
        self.dead = 0

    def add(self, sig: Signature, static_ids: list[int], seq: int) -> None:
        slot = len(self.sigs)
        idx, val = sig.delta
        self.sigs.append(sig)
        self.slot[sig] = slot
        self.idx.append(idx)
        self.val.append(_layout.unplaced(val))
        self.owner.append(np.full(len(idx), slot, np.int64))
        self.statics.append(static_ids)
        self.seq.append(seq)
        self.alive.append(True)

    def remove(self, sig: Signature) -> None:
        slot = self.slot.pop(sig)
        self.sigs[slot] = None
        self.alive.data[slot] = False
        self.dead += 1

    def live(self) -> int:
        return len(self.slot)

    def bounds(self, codes: np.ndarray | None, new_idx: np.ndarray | None, static_ids: np.ndarray) -> np.ndarray:
        """Per slot, the leaves (given the new signature's ``codes`` without placements and its delta
        positions; of this layout only) whose values differ placements aside, and the statics that
        differ: each is at least one change, so the sum is a lower bound on the slot's changes."""
        k = len(self.sigs)
        bound = np.zeros(k, np.int64)
        if codes is not None and new_idx is not None:
            idx, val, owner = self.idx.view(), self.val.view(), self.owner.view()
            # The new signature's delta positions whose value differs from the base's, placements aside.
            mine = np.zeros(len(codes), bool)
            if new_idx.size:
                mine[new_idx] = codes[new_idx] != self.layout.plain_base()[new_idx]
            if idx.size:
                bound += np.bincount(owner, weights=codes[idx] != val, minlength=k).astype(np.int64)
                bound -= np.bincount(owner, weights=mine[idx], minlength=k).astype(np.int64)
            bound += int(mine.sum())
        if self.width:
            bound += (self.statics.view() != static_ids).sum(axis=1)
        bound[~self.alive.view()] = _FAR
        return bound


class _Structures:
    """The distinct (structure, defaults) of a function's signatures, for the nearest of a new
    structure: the number of arguments whose tree (or default) differs from each is counted
    from postings lists of their (name, tree) pairs, in a few vectorised operations."""

    __slots__ = ("slot", "count", "latest", "seq", "alive", "size", "ids", "postings", "dead")

    def __init__(self) -> None:
        self.slot: dict[tuple[Any, ...], int] = {}
        self.count: list[int] = []
        self.latest: list[Any] = []
        self.seq, self.alive, self.size = _Column(np.int64), _Column(bool), _Column(np.int64)
        self.ids: dict[Any, int] = {}  # ("tree", name, tree) or ("default", name) -> its id
        self.postings: dict[int, _Column] = {}  # id -> the slots that hold it
        self.dead = 0  # slots whose structure no live signature has

    @staticmethod
    def _parts(sig: Signature) -> list[Any]:
        return [("tree", n, t) for n, t in sig.structure] + [("default", n) for n in set(sig.defaults)]

    def add(self, sig: Signature, seq: int) -> None:
        key = _structure_key(sig)
        slot = self.slot.get(key)
        if slot is None:
            slot = self.slot[key] = len(self.count)
            parts = self._parts(sig)
            self.count.append(0)
            self.latest.append(None)
            self.seq.append(seq)
            self.alive.append(True)
            self.size.append(len(set(parts)))
            for part in set(parts):
                i = self.ids.setdefault(part, len(self.ids))
                self.postings.setdefault(i, _Column(np.int64)).append(slot)
        self.count[slot] += 1
        self.latest[slot] = sig
        self.seq.data[slot] = seq

    def remove(self, sig: Signature, seq: int, held: dict[Signature, int]) -> None:
        key = _structure_key(sig)
        slot = self.slot[key]
        self.count[slot] -= 1
        if not self.count[slot]:
            del self.slot[key]
            self.alive.data[slot] = False
            self.latest[slot] = None
            self.dead += 1
        elif self.seq.data[slot] == seq:  # the latest of its structure went (a guard took it back)
            self.latest[slot], self.seq.data[slot] = max(
                ((s, q) for s, q in held.items() if _structure_key(s) == key), key=lambda sq: sq[1])

    def nearest(self, new: Signature) -> Signature | None:
        """The latest signature among those whose structure differs from ``new``'s in the fewest arguments."""
        k = len(self.count)
        if not self.slot:
            return None
        parts = set(self._parts(new))
        shared = np.zeros(k, np.int64)
        for part in parts:
            i = self.ids.get(part)
            if i is not None:
                shared += np.bincount(self.postings[i].view(), minlength=k)
        score = len(parts) + self.size.view() - 2 * shared
        score[~self.alive.view()] = _FAR
        best = np.lexsort((-self.seq.view(), score))[0]
        return self.latest[int(best)]


class _Entry:
    """What the misses of one unplaced key have shown: live signatures of it, trace contexts,
    the first miss traced inside another jit, and whether one was not (it compiled on its own)."""

    __slots__ = ("count", "contexts", "inlined", "own")

    def __init__(self) -> None:
        self.count = 0
        self.contexts: collections.Counter[Any] = collections.Counter()  # context -> misses noted under it
        self.inlined: Any = None
        self.own = 0  # misses noted that compiled on their own (a guard's stopped one taken back)


class SignatureIndex:
    """The distinct signatures of one function (ordered by first trace, capped by the registry).

    A mapping-like view for the rest of the package: ``sig in index``, ``iter(index)``
    (oldest first), ``len(index)``, ``del index[sig]``.
    """

    def __init__(self) -> None:
        self._seq: dict[Signature, int] = {}  # the signatures, oldest first, with their order of arrival
        self._next = 0
        self._keys: dict[Any, _Entry] = {}
        self._groups: dict[tuple[_layout.Layout, int], _Group] = {}
        #: (structure, paths count, statics count) -> its groups (one unless two layouts share a structure text)
        self._by_text: dict[tuple[Any, ...], list[_Group]] = {}
        self._structures = _Structures()  # the candidates of a new structure
        self._static_ids: dict[StaticLeaf, int] = {}
        self._static_next = 0
        self._held = 0  # statics held by the live signatures
        self.static_names: collections.Counter[str] = collections.Counter()

    def __contains__(self, sig: object) -> bool:
        return sig in self._seq

    def __iter__(self) -> Iterator[Signature]:
        return iter(list(self._seq))

    def __len__(self) -> int:
        return len(self._seq)

    def __delitem__(self, sig: Signature) -> None:
        self.remove(sig)

    def oldest(self) -> Signature:
        return next(iter(self._seq))

    # -- adding and removing ---------------------------------------------------------------------

    def add(self, sig: Signature) -> None:
        """Adds a signature not held yet."""
        seq = self._next
        self._next += 1
        self._seq[sig] = seq
        self._entry(unplaced_key(sig), create=True).count += 1
        ids = [self._static_id(s) for s in sig.statics]
        group = self._groups.get((sig.layout, len(ids)))
        if group is None:
            group = self._groups[(sig.layout, len(ids))] = _Group(sig.layout, len(ids))
            self._by_text.setdefault(_text_key(sig), []).append(group)
        group.add(sig, ids, seq)
        self._structures.add(sig, seq)
        self.static_names.update(n for n, tree in sig.structure if tree == "static")
        self._held += len(sig.statics)

    def remove(self, sig: Signature) -> None:
        seq = self._seq.pop(sig)
        key = unplaced_key(sig)
        entry = self._keys.get(key)
        if entry is not None:
            entry.count -= 1
            if entry.count <= 0:
                del self._keys[key]
        group = self._groups[(sig.layout, len(sig.statics))]
        group.remove(sig)
        if not group.live():
            del self._groups[(sig.layout, group.width)]
            self._by_text[_text_key(sig)].remove(group)
            if not self._by_text[_text_key(sig)]:
                del self._by_text[_text_key(sig)]
        elif group.dead > 32 and group.dead > group.live():
            self._rebuild(group)
        self._structures.remove(sig, seq, self._seq)
        if self._structures.dead > 32 and self._structures.dead > len(self._structures.slot):
            self._structures = _Structures()  # a storm of structures, evicted: slots of the live ones only
            for s, q in self._seq.items():
                self._structures.add(s, q)
        self.static_names.subtract(n for n, tree in sig.structure if tree == "static")
        self.static_names = +self.static_names
        self._held -= len(sig.statics)

    def _rebuild(self, group: _Group) -> None:
        fresh = _Group(group.layout, group.width)
        for sig in group.sigs:
            if sig is not None:
                fresh.add(sig, [self._static_id(s) for s in sig.statics], self._seq[sig])
        self._groups[(group.layout, group.width)] = fresh
        text = self._by_text[_text_key(fresh.sigs[0])]  # type: ignore[arg-type]
        text[text.index(group)] = fresh

    def _static_id(self, leaf: StaticLeaf) -> int:
        found = self._static_ids.get(leaf)
        if found is None:
            if len(self._static_ids) > 4 * (self._held + 64):
                held = {s for sig in self._seq for s in sig.statics}  # a storm over a static value: forget
                self._static_ids = {s: i for s, i in self._static_ids.items() if s in held}  # ids kept
            found = self._static_ids[leaf] = self._static_next
            self._static_next += 1
        return found

    def _entry(self, key: Any, create: bool = False) -> _Entry | None:
        entry = self._keys.get(key)
        if entry is None and create:
            entry = self._keys[key] = _Entry()
        return entry

    def note(self, miss: Any) -> None:
        """Notes a committed miss of a held signature: its trace context, inlined or compiled on its own."""
        entry = self._entry(unplaced_key(miss.signature))
        if entry is None:
            return
        if miss.context is not None and (len(entry.contexts) < 64 or miss.context in entry.contexts):
            entry.contexts[miss.context] += 1
        if miss.kind == "inlined" and miss.inside is not None:
            entry.inlined = entry.inlined or miss
        else:
            entry.own += 1

    def unnote(self, miss: Any) -> None:
        """Takes back what :meth:`note` noted of a miss taken out of the records (a guard stopped it)."""
        entry = self._entry(unplaced_key(miss.signature))
        if entry is None:
            return
        if miss.context in entry.contexts:
            entry.contexts[miss.context] -= 1
            if entry.contexts[miss.context] <= 0:
                del entry.contexts[miss.context]
        if miss.kind == "inlined" and miss.inside is not None:
            if entry.inlined is miss:
                entry.inlined = None
        else:
            entry.own = max(0, entry.own - 1)

    # -- what a miss asks --------------------------------------------------------------------------

    def traced_before(self, sig: Signature) -> bool:
        """Whether ``sig`` was traced before, placements aside."""
        return sig in self._seq or unplaced_key(sig) in self._keys

    def other_contexts(self, sig: Signature, context: Any) -> bool:
        """Whether a miss of ``sig`` (placements aside) was traced under another trace context."""
        entry = self._keys.get(unplaced_key(sig))
        return entry is not None and any(c != context for c in entry.contexts)

    def inlined_before(self, sig: Signature) -> Any:
        """The first miss of ``sig`` (placements aside) traced inside another jit, if none of its
        misses compiled on its own; else None."""
        entry = self._keys.get(unplaced_key(sig))
        return None if entry is None or entry.own else entry.inlined

    def candidates(self, new: Signature) -> tuple[list[Signature], np.ndarray, np.ndarray, bool]:
        """The signatures of ``new``'s structure (same paths and statics counts) with a lower bound
        on the changes of each (leaves of its layout that differ, statics that differ) and the
        order each arrived in; and whether every candidate is of ``new``'s layout."""
        groups = self._by_text.get(_text_key(new), ())
        if not groups:
            return [], np.zeros(0, np.int64), np.zeros(0, np.int64), True
        ids = np.array([self._static_ids.get(s, -1) for s in new.statics], np.int64)
        codes = _layout.unplaced(new.codes) if any(g.layout is new.layout for g in groups) else None
        sigs: list[Any] = []
        bounds, seqs = [], []
        for g in groups:
            same = g.layout is new.layout
            bounds.append(g.bounds(codes if same else None, new.delta[0] if same else None, ids))
            seqs.append(g.seq.view())
            sigs += g.sigs
        one = len(groups) == 1 and groups[0].layout is new.layout
        return sigs, np.concatenate(bounds), np.concatenate(seqs), one

    def nearest_structure(self, new: Signature) -> Signature | None:
        """The latest of the signatures whose structure differs from ``new``'s in the fewest arguments."""
        return self._structures.nearest(new)


def _text_key(sig: Signature) -> tuple[Any, ...]:
    return (sig.layout.structure, len(sig.layout.paths), len(sig.statics))


def _structure_key(sig: Signature) -> tuple[Any, ...]:
    return (sig.layout.structure, sig.defaults)


def unplaced_key(sig: Signature) -> tuple[Any, ...]:
    """What JAX traces ``sig`` on, placements aside, as a hashable key (made once per signature,
    from its delta: in time of the leaves where it differs from its layout's first signature)."""
    key = sig._ukey
    if key is None:
        idx, val = sig.delta
        plain = _layout.unplaced(val)
        keep = plain != sig.layout.plain_base()[idx] if idx.size else np.zeros(0, bool)
        key = (sig.layout, idx[keep].tobytes(), plain[keep].tobytes(), sig.statics, sig.keywords, sig.defaults)
        object.__setattr__(sig, "_ukey", key)
    return key
