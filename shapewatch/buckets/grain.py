"""shapewatch's bucketing and packing inside a grain pipeline (``pip install shapewatch[grain]``).

:class:`GroupByLengthIterDataset` is a grain ``IterDataset`` transformation: it groups
the single examples of its parent into length-homogeneous padded batches with
:func:`~shapewatch.buckets.group_by_length` (every keyword of it is accepted, ``strategy="pack"``
too) and yields :class:`~shapewatch.buckets.Batch` tuples. Its iterator checkpoints with grain's
own ``get_state`` / ``set_state`` (the parent's state, and the loader's ``state_dict()`` as a
string), and in a ``jax.distributed`` job it keeps the processes in step as ``group_by_length``
does: shard the parent by JAX process first (``grain.sharding.ShardByJaxProcess``), as grain's
pipelines do.

This is the only module of shapewatch that imports grain.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

import grain

from ._checks import fail
from ._loaders.group_by_length import GroupByLength, group_by_length

__all__ = ["GroupByLengthIterDataset"]


class _Pull:
    """The parent iterator as ``group_by_length``'s source (it advances only when read).

    While ``restoring``, a read returns None without touching the parent: ``load_state_dict``
    reads again the items the saved loader had read, and grain's ``set_state`` has already put
    the parent past them.
    """

    def __init__(self, parent: Any) -> None:
        self.parent = parent
        self.restoring = False

    def __iter__(self) -> _Pull:
        return self

    def __next__(self) -> Any:
        if self.restoring:
            return None
        return next(self.parent)


class _GroupByLengthIterator(grain.DatasetIterator):
    def __init__(self, parent: Any, kwargs: dict[str, Any]) -> None:
        super().__init__(parent)
        self._kwargs = kwargs
        self._loader: GroupByLength = group_by_length(_Pull(parent), **kwargs)
        self._restored: str | None = None  # the loader's state as set_state got it, until next()
        self._setting = False  # a set_state moved (or was moving) the parent and did not finish

    def _check_set(self, doing: str) -> None:
        if self._setting:
            raise fail(f"{doing}: this iterator's set_state did not finish (interrupted after it began moving "
                       "the parent), so its parent and its loader stand at different points; fix: call "
                       "set_state again with the same state, or make a new iterator")

    def __next__(self) -> Any:
        if self._setting:
            self._check_set("next()")
        self._restored = None
        return next(self._loader)

    def get_state(self) -> dict[str, Any]:
        """The parent's state and the loader's ``state_dict()`` (pickled, as base64 text: grain
        keeps iterator states as JSON). Right after ``set_state``, the loader's text as it was
        given: a pickle of the same state need not be the same bytes, and grain expects the state
        it set."""
        self._check_set("get_state()")
        loader = self._restored
        if loader is None:
            loader = base64.b64encode(pickle.dumps(self._loader.state_dict())).decode("ascii")
        return {"parent": self._parent.get_state(), "loader": loader}

    def set_state(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (see :meth:`get_state`): the parent where it stood, and a new loader
        holding what the saved one held."""
        saved = pickle.loads(base64.b64decode(state["loader"]))
        pull = _Pull(self._parent)
        loader = group_by_length(pull, **self._kwargs)
        pull.restoring = True
        try:
            loader.load_state_dict(saved)  # checked whole first: a state refused changes nothing
        finally:
            pull.restoring = False
        before = self._parent.get_state()
        self._setting = True  # from here until the new loader is kept, next() and get_state() refuse
        try:
            self._parent.set_state(state["parent"])
        except Exception:
            # the parent refused the state (grain checks it as it sets it): put it back where it
            # stood, so the iterator goes on as before; if that fails too, it stays refused
            self._parent.set_state(before)
            self._setting = False
            raise
        self._loader, self._restored, self._setting = loader, state["loader"], False


class GroupByLengthIterDataset(grain.IterDataset):
    """Group the parent's examples into padded batches of few shapes (a grain transformation).

    Args:
        parent: a grain ``IterDataset`` (or ``MapDataset``) of single examples, already
            sharded by JAX process in a job of several processes.
        **kwargs: keywords of :func:`~shapewatch.buckets.group_by_length` (``batch_size`` or
            ``token_budget`` is required; the plan policy as ``plan=``, e.g.
            ``plan=FixedPlan((4, 10))``, and ``costs=``, or as today's keywords). With ``strategy="pack"`` whole examples are packed into
            rows of one length (each batch's ``segment_ids`` and ``positions`` say where), across
            the processes of a job as ``group_by_length(..., strategy="pack")`` runs there.

    Raises:
        ValueError, TypeError: bad keywords, as :func:`~shapewatch.buckets.group_by_length`
            raises them, when the dataset is made.

    Example:
        >>> import grain, numpy as np
        >>> ds = grain.MapDataset.source([np.arange(n) for n in (3, 9, 4, 10)]).to_iter_dataset()
        >>> batches = GroupByLengthIterDataset(ds, batch_size=2, buckets=(4, 10), shuffle=False)
        >>> [b.data.shape for b in batches]
        [(2, 4), (2, 10)]
        >>> packed = GroupByLengthIterDataset(ds, batch_size=2, strategy="pack", row_length=13, shuffle=False)
        >>> [b.segment_ids.max(axis=1).tolist() for b in packed]
        [[2, 2]]
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
