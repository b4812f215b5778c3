"""Reading a loader's source so that a ``KeyboardInterrupt`` never loses an item (private).

``group_by_length`` reads examples and ``bucketed`` takes ready-made batches; both hold the item
just read as a :class:`_Raw` until it is parsed: :func:`hold_next` reads and holds it in one C
call, :func:`counted` counts it as read, :func:`parse_last` parses it in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

__all__ = ["_Raw", "counted", "hold_next", "parse_last"]


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
