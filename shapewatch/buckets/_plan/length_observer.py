"""``LengthObserver``: a streaming, mergeable histogram of sequence lengths, and the
vectorised ``histogram`` it (and ``propose``) count lengths with."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import as_lengths, fail

__all__ = ["LengthObserver", "histogram"]


def histogram(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values and counts of a non-empty int64 array, without a Python loop."""
    low, high = int(arr.min()), int(arr.max())
    span = high - low + 1
    if span <= 4 * arr.size + (1 << 16):  # dense enough: bincount is ~10x faster than a sort
        counts = np.bincount(arr - low if low else arr)
        nonzero = np.flatnonzero(counts)
        return (nonzero + low).astype(np.int64), counts[nonzero].astype(np.int64)
    values, counts = np.unique(arr, return_counts=True)
    return values.astype(np.int64), counts.astype(np.int64)


class LengthObserver:
    """Streaming histogram of lengths: memory grows with the distinct lengths only.

    Feed it every batch's lengths, merge observers from several workers, save it
    with :meth:`to_dict`, and hand it to :func:`shapewatch.buckets.propose`.

    Example:
        >>> obs = LengthObserver()
        >>> obs.update([3, 5, 5, 9])
        >>> obs.update(5)
        >>> obs.lengths.tolist(), obs.counts.tolist(), obs.total, obs.max
        ([3, 5, 9], [1, 3, 1], 5, 9)
    """

    __slots__ = ("_lengths", "_counts")

    def __init__(self, lengths: Any = None) -> None:
        self._lengths = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        if lengths is not None:
            self.update(lengths)

    def update(self, lengths: Any) -> None:
        """Add lengths: an int, a sequence or an array of any shape (flattened).

        An empty sequence is a no-op. Invalid input (negative, NaN, non-integer)
        raises ``ValueError`` and leaves the observer unchanged.
        """
        arr = as_lengths(lengths, allow_empty=True)
        if arr.size:
            self._add(*histogram(arr))

    def _add(self, values: np.ndarray, counts: np.ndarray) -> None:
        if not self._lengths.size:
            self._lengths, self._counts = values, counts
            return
        merged = np.union1d(self._lengths, values)
        total = np.zeros(merged.size, dtype=np.int64)
        total[np.searchsorted(merged, self._lengths)] += self._counts
        total[np.searchsorted(merged, values)] += counts
        self._lengths, self._counts = merged, total

    def merge(self, other: LengthObserver) -> LengthObserver:
        """Add ``other``'s counts into this observer and return ``self``."""
        if not isinstance(other, LengthObserver):
            raise fail(f"can only merge a LengthObserver; got {type(other).__name__}")
        if other._lengths.size:
            self._add(other._lengths.copy(), other._counts.copy())
        return self

    def copy(self) -> LengthObserver:
        """An independent copy."""
        new = LengthObserver()
        new._lengths, new._counts = self._lengths.copy(), self._counts.copy()
        return new

    @property
    def lengths(self) -> np.ndarray:
        """Distinct lengths seen, ascending (a copy)."""
        return self._lengths.copy()

    @property
    def counts(self) -> np.ndarray:
        """How many times each of :attr:`lengths` was seen (a copy)."""
        return self._counts.copy()

    @property
    def total(self) -> int:
        """Number of lengths seen."""
        return int(self._counts.sum())

    @property
    def distinct(self) -> int:
        """Number of distinct lengths seen."""
        return int(self._lengths.size)

    @property
    def sum(self) -> int:
        """Sum of all lengths seen (the unpadded element count), exact at any size."""
        if float(np.dot(self._lengths.astype(np.float64), self._counts)) < 2.0**62:
            return int(np.dot(self._lengths, self._counts))
        return sum(int(v) * int(c) for v, c in zip(self._lengths, self._counts))

    @property
    def min(self) -> int | None:
        """Smallest length seen, or None before any update."""
        return int(self._lengths[0]) if self._lengths.size else None

    @property
    def max(self) -> int | None:
        """Largest length seen, or None before any update."""
        return int(self._lengths[-1]) if self._lengths.size else None

    @property
    def mean(self) -> float | None:
        """Mean length, or None before any update."""
        return self.sum / self.total if self._lengths.size else None

    def quantile(self, q: float) -> int:
        """Smallest seen length ``l`` with at least a fraction ``q`` of lengths ``<= l``."""
        if not self._lengths.size:
            raise fail("quantile of an empty LengthObserver; call update() first")
        if not 0.0 <= float(q) <= 1.0:
            raise fail(f"quantile q must be in [0, 1]; got {q!r}")
        cum = np.cumsum(self._counts)
        idx = int(np.searchsorted(cum, q * cum[-1], side="left"))
        return int(self._lengths[min(idx, self._lengths.size - 1)])

    def __len__(self) -> int:
        return self.total

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LengthObserver):
            return NotImplemented
        return np.array_equal(self._lengths, other._lengths) and np.array_equal(
            self._counts, other._counts
        )

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        if not self._lengths.size:
            return "LengthObserver(total=0)"
        return (
            f"LengthObserver(total={self.total}, distinct={self.distinct}, "
            f"min={self.min}, max={self.max})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``{"lengths": [...], "counts": [...]}``."""
        return {"lengths": self._lengths.tolist(), "counts": self._counts.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LengthObserver:
        """Inverse of :meth:`to_dict` (validates the data)."""
        try:
            values, counts = data["lengths"], data["counts"]
        except (TypeError, KeyError):
            raise fail("LengthObserver.from_dict expects keys 'lengths' and 'counts'") from None
        values = as_lengths(values, allow_empty=True)
        counts = as_lengths(counts, allow_empty=True, limit=None)
        if values.size != counts.size:
            raise fail(f"{values.size} lengths but {counts.size} counts in LengthObserver data")
        obs = cls()
        keep = counts > 0
        if keep.any():
            uniq, inv = np.unique(values[keep], return_inverse=True)
            summed = np.zeros(uniq.size, dtype=np.int64)
            np.add.at(summed, inv.reshape(-1), counts[keep])
            obs._lengths, obs._counts = uniq.astype(np.int64), summed
        return obs
