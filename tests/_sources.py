"""Sources the loader tests feed loaders with, and a reader that reads a loader ahead."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any


class Source:
    """An iterator that counts what was taken from it."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items, self.taken = list(items), 0

    def __iter__(self) -> Source:
        return self

    def __next__(self) -> Any:
        if self.taken >= len(self.items):
            raise StopIteration
        self.taken += 1
        return self.items[self.taken - 1]


def prefetched(it: Iterable[Any], depth: int = 2) -> Iterator[Any]:
    """Batches of ``it`` read ahead by another thread through a queue."""
    q: queue.Queue = queue.Queue(maxsize=depth)

    def produce() -> None:
        for b in it:
            q.put(b)
        q.put(None)

    t = threading.Thread(target=produce)
    t.start()
    while (b := q.get()) is not None:
        yield b
    t.join()
