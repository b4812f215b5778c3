"""``ExtendedTally``: the extended lengths a loader yielded under its plan (private).

A :class:`~shapewatch.buckets.Buckets` is immutable: a plan records nothing, so two loaders
given one plan count apart. With ``overflow="extend"`` a length above the plan's largest
boundary pads to itself rounded up to ``multiple_of``, one more shape: the loader that yields
such a batch counts it here. The count is the plan's in use: a new plan (a re-plan, a switch
of strategy) starts a new count, as the count kept on the plan itself did before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

__all__ = ["ExtendedTally"]


class ExtendedTally:
    """Extended length -> batches yielded at it, under one plan (the loader's own)."""

    __slots__ = ("_counts", "_plan")

    def __init__(self) -> None:
        self._plan: Any = None
        self._counts: Counter = Counter()

    def note(self, plan: Any, length: int, before: dict[str, Any] | None = None) -> None:
        """One batch of ``length`` yielded under ``plan`` (counted if above its largest boundary).
        ``before``: the step's journal (``_distributed.schedulers.Taking.before``): counted once, in one line
        that records what it replaced; :meth:`unnote` takes it back."""
        before = {} if before is None else before
        if "extended" in before:
            return
        counts = self._counts if plan is self._plan else Counter()  # a new plan: a count of its own
        if length > plan.max_length:
            counts = counts + Counter({int(length): 1})
        old = (self._plan, self._counts)
        self._plan, self._counts = plan, counts; before["extended"] = old  # noqa: E702

    def unnote(self, before: dict[str, Any]) -> None:
        """Take back what :meth:`note` committed to ``before``."""
        old = before.get("extended")
        if old is not None:
            self._plan, self._counts = old; del before["extended"]  # noqa: E702

    def of(self, plan: Any) -> Counter:
        """The count under ``plan`` (a copy: empty for a plan it counted nothing under)."""
        return Counter(self._counts) if plan is not None and plan is self._plan else Counter()

    def restore(self, plan: Any, counts: Mapping[int, int]) -> None:
        """The count of a restored loader: ``counts`` under ``plan``."""
        self._plan, self._counts = plan, Counter({int(k): int(v) for k, v in counts.items()})
