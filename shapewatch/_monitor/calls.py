"""Calls counted per signature, for a function watched with ``count_calls=True``.

A cached call never reaches Python, so how often each traced length came is
unknown unless calls are counted. ``count_calls=True`` puts a thin counter in
front of the jitted function; that counter starts to tell signatures apart only
once the function has recompiled on a shape (a miss whose cause is a shape
change), so that a function that keeps one shape pays one increment per call
and nothing more. From then on each call is keyed by the shapes and dtypes of
its array leaves; a key seen for the first time is matched to the signature
that its call traced, or, when it traced nothing, to the signature compiled
before counting began whose arrays have those shapes and dtypes (several such
signatures, of two static values say, have the same lengths: the first takes
the calls). Calls before that point were all of the signatures compiled so far;
with one such signature they are its calls, with several they are not told apart.

What is counted feeds the report's padding figures (``analysis.py``): the
padding a bucket plan adds is then weighed by calls, not by distinct lengths.
"""

from __future__ import annotations

import collections
from typing import Any

import jax

from shapewatch._monitor.signature import Signature

_MAX_KEYS = 4096  # distinct shapes counted per function; beyond that, calls are not told apart


class CallTally:
    """Calls of one hook per signature, from the miss that first changed a shape on.

    Attributes:
      calls: signature -> calls; ``None`` holds the calls that could not be matched
        to a signature (several signatures compiled before counting began).
    """

    __slots__ = ("hook", "calls", "_signature_of", "_before", "_earlier", "_current")

    def __init__(self, hook: Any, earlier: list[Signature], current: Signature) -> None:
        self.hook = hook
        self.calls: collections.Counter[Signature | None] = collections.Counter()
        self._signature_of: dict[Any, Signature | None] = {}
        self._earlier = earlier
        # The calls before: of the one earlier signature, or of one of several whose arrays are alike
        # (compiled for two static values, say: their calls count toward the same lengths).
        self._before = earlier[0] if len(earlier) == 1 or len(set(map(_arrays_of, earlier))) == 1 else None
        self._current = current
        prior = max(0, (hook.calls or 0) - 1)  # the calls before this one, all of the earlier signatures
        if prior:
            self.calls[self._before] += prior
        self.calls[current] += 1  # this call, whose trace started the count

    def started(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Notes the arguments of the call whose trace started the count (already counted)."""
        self._signature_of[_key(args, kwargs)] = self._current

    def call(self, jitted: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Calls ``jitted`` and counts the call against its signature."""
        key = _key(args, kwargs)
        if key in self._signature_of:
            self.calls[self._signature_of[key]] += 1
            return jitted(*args, **kwargs)
        before = self.hook.last_signature
        out = jitted(*args, **kwargs)
        traced = self.hook.last_signature
        signature = traced if traced is not before else self._compiled_before(key)
        if len(self._signature_of) < _MAX_KEYS:
            self._signature_of[key] = signature
        self.calls[signature] += 1
        return out


    def _compiled_before(self, key: tuple[Any, ...]) -> Signature | None:
        """The signature compiled before counting began whose arrays match ``key`` (a call that traced nothing)."""
        if len(self._earlier) <= 1:
            return self._before
        wanted = tuple(sorted((tuple(shape), str(dtype)) for shape, dtype in key if shape is not None))
        for signature in self._earlier:
            if wanted in (_arrays_of(signature), _arrays_of(signature, typed=True)):
                return signature
        return None


def _arrays_of(signature: Signature, typed: bool = False) -> tuple[Any, ...] | None:
    """The (shape, dtype) of a signature's arrays, sorted; ``typed``: without weak-typed scalars.

    A Python scalar argument has no shape in a call's key; its signature holds it as a weak-typed scalar.
    """
    try:
        arrays = signature.arrays
    except Exception:  # a signature that cannot be read back
        return None
    return tuple(sorted((a.shape, a.dtype) for a in arrays if not typed or a.shape or not a.weak_type))


def _key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    return tuple((getattr(x, "shape", None), getattr(x, "dtype", None)) for x in leaves)


def starts(changes: Any) -> bool:
    """Whether a miss of these changes starts the count per signature (a shape changed)."""
    return any(c.field in ("shape", "rank") for c in changes)


def start(hook: Any, earlier: list[Signature], current: Signature | None, changes: Any) -> None:
    """Starts counting ``hook``'s calls per signature at a miss whose cause is a shape change."""
    if hook.calls is None or hook.tally is not None or current is None:
        return
    if starts(changes):
        hook.tally = CallTally(hook, earlier, current)


def calls_by_signature(hooks: list[Any]) -> dict[Signature | None, int] | None:
    """The calls of these hooks per signature; None when none of them counted per signature."""
    tallies = [h.tally for h in hooks if getattr(h, "tally", None) is not None]
    if not tallies:
        return None
    total: collections.Counter[Signature | None] = collections.Counter()
    for t in tallies:
        total.update(t.calls)
    return dict(total)
