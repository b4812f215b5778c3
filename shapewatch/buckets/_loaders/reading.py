"""Reading a loader's source so that a ``KeyboardInterrupt`` never loses an item (private).

``group_by_length`` reads examples and ``bucketed`` takes ready-made batches; both hold the item
just read as a :class:`_Raw` until it is parsed: :func:`hold_next` reads and holds it in one C
call, :func:`counted` counts it as read, :func:`parse_last` parses it in place. A
``load_state_dict`` reads again, and skips, the items the saved loader had read: :class:`Skipping`
counts them the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from .._checks import fail, fail_type

__all__ = ["Skipping", "_Raw", "counted", "hold_next", "parse_last", "source_iter"]


class _Raw(tuple):
    """``_Raw((item, seq))``: an item (an example, or a batch) read from the source (the ``seq``-th,
    from 0) and not parsed yet, held like the parsed ones. A tuple, made in C by :func:`hold_next`.
    Its name is what a saved state's checks recognise (``type(x).__name__ == "_Raw"``), and
    ``group_by_length``'s and ``bucketed``'s modules still name it, for the states pickled when
    each had its own."""

    __slots__ = ()

    @property
    def item(self) -> Any:
        return self[0]

    @property
    def seq(self) -> int:
        return self[1]


def hold_next(held: list, it: Iterator[Any], seq: int) -> bool:
    """Read the source's next item into ``held`` as ``_Raw((item, seq))``; False at its end.

    The read and the hold are one C call (``list.extend`` over ``islice``): Python checks for a
    signal after a call returns, so ``held.append(_Raw((next(it), seq)))`` lets a
    ``KeyboardInterrupt`` come between ``next`` returning the item and the hold, losing it.
    """
    before = len(held)
    held.extend(map(_Raw, zip(islice(it, 1), (seq,))))
    return len(held) > before


def counted(held: list, consumed: int) -> int:
    """Items read from the source: ``consumed``, or one more when the item held last is still raw
    (the read's next line counts it; an interrupt may come before that line)."""
    if held and isinstance(held[-1], _Raw):
        return max(consumed, held[-1].seq + 1)
    return consumed


def parse_last(held: list, parse: Callable[[Any], Any]) -> None:
    """Replace the item held last, if still raw, by ``parse(item)`` in one assignment; a bad one
    (``parse`` raises) is left out and the error raised; an interrupt (``BaseException``) keeps it
    raw, to be parsed by the next call."""
    if held and isinstance(held[-1], _Raw):
        try:
            held[-1] = parse(held[-1].item)
        except Exception:
            held.pop()
            raise


class Skipping:
    """The items of a loader's source that ``load_state_dict`` read to skip them (the saved loader
    had read them), counted so that an interrupt midway loses no count.

    A ``load_state_dict`` interrupted (or refused: the source ended) after it began reading leaves
    the loader ``unfinished``: it yields nothing and saves no state (either would lose the items
    read), and a ``load_state_dict`` called again goes on reading from where this one stopped (so
    does one called again after a whole one, before the first ``next()``: it reads nothing more).
    The loader drops it at its first ``next()``.

    Attributes:
        count: items read and skipped so far (the one held, not yet counted, apart).
        held: the item read last, until it is counted (see :func:`hold_next`).
        unfinished: a ``load_state_dict`` began reading and did not finish.
        made: ``(plan,)``, the plan the loader was made with, kept at its first ``load_state_dict``
            (see :meth:`as_made`); None before it.
        ended: the source ended before the count a state asked for (no load of that state can
            finish: the loader is to be made again).
    """

    __slots__ = ("count", "ended", "held", "made", "unfinished")

    def __init__(self) -> None:
        self.count = 0
        self.held: list[Any] = []  # the item read last, until counted (see hold_next)
        self.unfinished = False
        self.ended = False
        self.made: tuple[Any] | None = None  # (the loader's plan as made,), from its first load

    def as_made(self, plan: Any) -> Any:
        """The plan the loader was made with (None: to be planned): ``plan``, the loader's now, at its
        first ``load_state_dict``; a later one finds the plan a load set, not the one it was made with."""
        if self.made is None:
            self.made = (plan,)
        return self.made[0]

    @property
    def read(self) -> int:
        """Items read of the source so far."""
        return counted(self.held, self.count)

    def to(self, it: Iterator[Any], count: int) -> bool:
        """Read and skip items of ``it`` until ``count`` are read; False if it ends first."""
        self.unfinished = True
        self.count = self.read
        self.held.clear()
        while self.count < count:
            if not hold_next(self.held, it, self.count):
                self.ended = True
                return False
            self.count += 1
            self.held.clear()
        return True

    def finished(self) -> None:
        """``load_state_dict``'s last line: the loader is whole again."""
        self.unfinished = False

    def check(self, doing: str) -> None:
        """Refuse ``doing`` (what the user called) while ``unfinished``."""
        if self.unfinished and self.ended:
            raise fail(f"{doing}: this loader's load_state_dict was refused after it read its source to the "
                       f"end ({self.read} items, fewer than the state's loader had read), so it holds none of "
                       "them; fix: make a new loader over the source the saved loader read, from its start")
        if self.unfinished:
            raise fail(f"{doing}: this loader's load_state_dict did not finish (interrupted, or refused after "
                       f"it began reading: it had read {self.read} items of its source to skip them), so it "
                       "holds none of them; fix: call load_state_dict again with the same state (it goes on "
                       "reading from there), or make a new loader over the source from its start")


def source_iter(source: Any, name: str, what: str) -> Iterator[Any]:
    """``iter(source)``; a source that is not iterable is refused, naming it (``name``: the argument,
    ``what``: what it holds)."""
    try:
        return iter(source)
    except TypeError:
        raise fail_type(f"{name} must be an iterable of {what} (a list, a generator, a dataset); got "
                        f"{type(source).__name__} {source!r:.80}") from None
