"""shapewatch's bucketing inside a grain pipeline (``pip install shapewatch[grain]``).

:class:`GroupByLengthIterDataset` is a grain ``IterDataset`` transformation: it groups
the single examples of its parent into length-homogeneous padded batches with
:func:`~shapewatch.buckets.group_by_length` (every keyword of it is accepted) and yields
:class:`~shapewatch.buckets.Batch` tuples. Its iterator checkpoints with grain's own
``get_state`` / ``set_state`` (the parent's state, and the loader's, as a string), and in a
``jax.distributed`` job it keeps the processes in step as ``group_by_length`` does: shard the
parent by JAX process first (``grain.sharding.ShardByJaxProcess``), as grain's pipelines do.

This is the only module of shapewatch that imports grain.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

import grain

from ._group_by_length import GroupByLength, group_by_length
from ._loader_state import load_state, save_state

__all__ = ["GroupByLengthIterDataset"]


class _Pull:
    """The parent iterator as ``group_by_length``'s source (it advances only when read)."""

    def __init__(self, parent: Any) -> None:
        self.parent = parent

    def __iter__(self) -> _Pull:
        return self

    def __next__(self) -> Any:
        return next(self.parent)


class _GroupByLengthIterator(grain.DatasetIterator):
    def __init__(self, parent: Any, kwargs: dict[str, Any]) -> None:
        super().__init__(parent)
        self._kwargs = kwargs
        self._loader: GroupByLength = group_by_length(_Pull(parent), **kwargs)

    def __next__(self) -> Any:
        return next(self._loader)

    def get_state(self) -> dict[str, Any]:
        """The parent's state and the loader's (pickled, as base64 text: grain keeps it as JSON)."""
        loader = base64.b64encode(pickle.dumps(save_state(self._loader))).decode("ascii")
        return {"parent": self._parent.get_state(), "loader": loader}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._loader = group_by_length(_Pull(self._parent), **self._kwargs)
        load_state(self._loader, pickle.loads(base64.b64decode(state["loader"])), skip=False)


class GroupByLengthIterDataset(grain.IterDataset):
    """Group the parent's examples into padded batches of few shapes (a grain transformation).

    Args:
        parent: a grain ``IterDataset`` (or ``MapDataset``) of single examples, already
            sharded by JAX process in a job of several processes.
        **kwargs: keywords of :func:`~shapewatch.buckets.group_by_length` (``batch_size`` or
            ``token_budget`` is required).

    Example:
        >>> import grain, numpy as np
        >>> ds = grain.MapDataset.source([np.arange(n) for n in (3, 9, 4, 10)]).to_iter_dataset()
        >>> batches = GroupByLengthIterDataset(ds, batch_size=2, buckets=(4, 10), shuffle=False)
        >>> [b.data.shape for b in batches]
        [(2, 4), (2, 10)]
    """

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        if isinstance(parent, grain.MapDataset):
            parent = parent.to_iter_dataset()
        super().__init__(parent)
        group_by_length([], **{**kwargs, "across_processes": False})  # bad keywords raise here
        self._kwargs = kwargs

    def __iter__(self) -> _GroupByLengthIterator:
        return _GroupByLengthIterator(self._parent.__iter__(), self._kwargs)

    def __str__(self) -> str:
        return f"GroupByLengthIterDataset({', '.join(f'{k}={v!r}' for k, v in self._kwargs.items())})"
