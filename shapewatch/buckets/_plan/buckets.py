"""``Buckets``: a bucket plan, its boundaries plus how to apply them (bucket of a length,
pad an array or pytree, overflow policy, JSON form). Immutable: what a loader did with a plan
(the extended lengths it yielded) is counted by the loader (``_loaders.extended``)."""

from __future__ import annotations

import warnings
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._checks import (
    MAX_LENGTH,
    as_lengths,
    check_choice,
    check_multiple_of,
    fail,
    is_int,
    round_up,
)
from .._pad import pad_to_bucket, pad_tree_to_bucket
from .length_observer import LengthObserver

__all__ = ["Buckets", "OVERFLOWS", "COSTS"]

OVERFLOWS = ("error", "truncate", "extend")
_EMPTY: Mapping[int, int] = MappingProxyType({})
COSTS = ("linear", "quadratic")


@dataclass(frozen=True)
class Buckets:
    """An immutable bucketing plan.

    Attributes:
        boundaries: ascending bucket lengths; a length pads to the smallest
            boundary ``>=`` it.
        strategy: how the plan was made (``"optimal"``, ``"pow2"``, ... or ``"custom"``).
        cost: the cost it was optimised for: ``"linear"``, ``"quadratic"``, a
            callable, or ``"callable:<name>"`` after a :meth:`to_dict` round trip.
        multiple_of: every boundary (and every extended length) is a multiple of it.
        overflow: what a length above the largest boundary does: ``"error"``,
            ``"truncate"`` (cut to the largest boundary) or ``"extend"`` (round up
            to ``multiple_of``: one more shape, hence one more compile).
        extended: deprecated, always empty: a plan records nothing (two loaders given one
            plan count apart). The extended lengths a loader yielded are its own
            ``loader.extended``; :meth:`bucket_of` returns the extended length itself.
        stats: what :func:`propose` measured on the observed lengths (``n``,
            ``distinct``, ``cost``, ``waste`` and, for ``"auto"``, the per-count
            table); None for hand-made plans. Not part of equality.

    Example:
        >>> plan = Buckets((8, 16, 32))
        >>> plan.bucket_of(9), plan.bucket_of([1, 8, 30]).tolist()
        (16, [8, 8, 32])
        >>> round(plan.waste([4, 8, 12]), 3)
        0.25
    """

    boundaries: tuple[int, ...]
    strategy: str = "custom"
    cost: str | Callable[[int], float] = "linear"
    multiple_of: int = 1
    overflow: str = "error"
    stats: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_multiple_of(self.multiple_of)
        check_choice("overflow", self.overflow, OVERFLOWS)
        cost_ok = callable(self.cost) or (
            isinstance(self.cost, str) and (self.cost in COSTS or self.cost.startswith("callable:"))
        )
        if not cost_ok:
            raise fail(
                f"unknown cost {self.cost!r}; expected one of 'linear', 'quadratic' or a callable"
            )
        try:
            bounds = tuple(self.boundaries)
        except TypeError:
            raise fail(f"boundaries must be a sequence of ints; got {self.boundaries!r}") from None
        if not bounds:
            raise fail("boundaries are empty; expected at least one positive int")
        for b in bounds:
            if not is_int(b) or b < 1:
                raise fail(f"boundaries must be positive ints; got {b!r} in {bounds}")
            if b > MAX_LENGTH:
                raise fail(f"boundaries must be at most 2**40 = {MAX_LENGTH:,}; got {b:,}")
            if b % self.multiple_of:
                raise fail(f"boundary {b} is not a multiple of multiple_of={self.multiple_of}")
        bounds = tuple(int(b) for b in bounds)
        if any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise fail(f"boundaries must be strictly ascending; got {bounds}")
        object.__setattr__(self, "boundaries", bounds)
        object.__setattr__(self, "multiple_of", int(self.multiple_of))

    @property
    def max_length(self) -> int:
        """The largest boundary."""
        return self.boundaries[-1]

    def __len__(self) -> int:
        return len(self.boundaries)

    @property
    def extended(self) -> Mapping[int, int]:
        """Deprecated: always an empty read-only mapping (a plan is immutable and records
        nothing). A loader's own ``extended`` counts the extended lengths it yielded."""
        warnings.warn(
            "Buckets.extended is deprecated and always empty: a plan is immutable and records nothing; "
            "read the loader's own count, loader.extended (group_by_length, bucketed), or bucket_of() "
            "for the length a value pads to", DeprecationWarning, stacklevel=2)
        return _EMPTY

    def _buckets(self, arr: np.ndarray) -> np.ndarray:
        """Vectorised bucket lookup (validates every length)."""
        bounds = np.asarray(self.boundaries, dtype=np.int64)
        top = self.boundaries[-1]
        over = arr > top
        if over.any():
            if self.overflow == "error":
                raise fail(
                    f"length {int(arr[over].max())} is above the largest boundary {top} "
                    "(overflow='error'; use overflow='truncate' or 'extend', or re-plan)"
                )
            if self.overflow == "truncate":
                arr = np.minimum(arr, top)
        idx = np.searchsorted(bounds, np.minimum(arr, top), side="left")
        out = bounds[idx]
        if self.overflow == "extend" and over.any():
            out[over] = round_up(arr[over], self.multiple_of)
        return out

    def bucket_of(self, length: Any) -> Any:
        """Smallest boundary ``>=`` length (int in, int out; sequence/array in, array out).

        Lengths above the largest boundary follow :attr:`overflow`.
        """
        if type(length) is int and 0 <= length <= self.boundaries[-1]:  # one length, within: no array
            return self.boundaries[bisect_left(self.boundaries, length)]
        arr = as_lengths(length, allow_empty=True)
        out = self._buckets(arr)
        if is_int(length):
            return int(out[0])
        return out.reshape(np.shape(length))

    def waste(self, lengths: Any) -> float:
        """Padding fraction in elements, ``1 - sum(l) / sum(bucket_of(l))``.

        ``lengths`` may be a :class:`LengthObserver`. Truncated lengths count as the
        largest boundary.
        """
        if isinstance(lengths, LengthObserver):
            values, counts = lengths.lengths, lengths.counts
        else:
            values = as_lengths(lengths)
            counts = np.ones(values.size, dtype=np.int64)
        if not values.size:
            raise fail("lengths are empty; expected at least one non-negative integer length")
        padded = self._buckets(values)
        kept = np.minimum(values, padded)
        total = float(np.dot(padded, counts))
        return 1.0 - float(np.dot(kept, counts)) / total if total else 0.0

    def explain(self) -> str:
        """A readable summary of the plan and, for ``max_buckets="auto"``, why this many buckets."""
        from .explain import explain

        return explain(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict. A callable cost is stored as ``"callable:<qualname>"``."""
        cost = self.cost
        if callable(cost):
            cost = "callable:" + getattr(cost, "__qualname__", type(cost).__name__)
        return {
            "boundaries": list(self.boundaries),
            "strategy": self.strategy,
            "cost": cost,
            "multiple_of": self.multiple_of,
            "overflow": self.overflow,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Buckets:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, dict) or "boundaries" not in data:
            raise fail(f"Buckets.from_dict expects a dict with 'boundaries'; got {data!r}")
        known = {"boundaries", "strategy", "cost", "multiple_of", "overflow"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise fail(f"unknown Buckets keys {unknown}; expected some of {sorted(known)}")
        return cls(**{**data, "boundaries": tuple(data["boundaries"])})

    def pad(
        self,
        x: Any,
        axis: int = -1,
        value: Any = 0,
        return_mask: bool = False,
        *,
        out: np.ndarray | None = None,
    ) -> Any:
        """Pad ``x`` along ``axis`` to its bucket (numpy in, numpy out; JAX in, JAX out).

        With ``return_mask=True`` returns ``(padded, mask)``; ``mask`` has shape
        ``padded.shape[:axis + 1]`` and is True at valid (unpadded) positions.
        ``out`` (numpy only) is a preallocated array of the padded shape to write
        into. See :func:`shapewatch.buckets.pad_to`.

        Example:
            >>> import numpy as np
            >>> out, mask = Buckets((4, 8)).pad(np.ones((2, 3)), return_mask=True)
            >>> out.shape, mask.sum(axis=-1).tolist()
            ((2, 4), [3, 3])
        """
        return pad_to_bucket(self, x, axis, value, return_mask, out)

    def pad_tree(self, tree: Any, axis: int = -1, value: Any = 0, return_mask: bool = False) -> Any:
        """Pad every array leaf that has ``axis`` to one shared bucket.

        Leaves without that axis (scalars, strings, arrays with too few dims) are
        left as they are. Leaves that disagree on the length raise ``ValueError``
        naming both paths. With ``return_mask=True`` returns ``(tree, mask)``, the
        mask shaped like the first padded leaf's ``shape[:axis + 1]``.

        Example:
            >>> import numpy as np
            >>> batch = {"ids": np.ones((2, 5), int), "emb": np.ones((2, 5, 3)), "y": np.ones(2)}
            >>> out = Buckets((8, 16)).pad_tree(batch, axis=1)
            >>> out["ids"].shape, out["emb"].shape, out["y"].shape
            ((2, 8), (2, 8, 3), (2,))
        """
        return pad_tree_to_bucket(self, tree, axis, value, return_mask)
