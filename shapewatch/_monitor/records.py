"""The records of shapewatch, as plain typed data with ``to_dict()``.

The keys of ``to_dict()`` are the JSON schema documented in the README.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shapewatch._monitor.signature import Change, Signature

_INLINE: Any = object()
_ALIKE = 4  # leaves changed alike in one miss, from this many on, are one part of its explanation
_PARTS = 12  # parts of an explanation written before "and N more changes"
RECREATED = "function re-created: a new function object with the same code (jit caches by function identity)"

#: The kinds of cache miss.
KINDS = {
    "compile": "traced, lowered and compiled at the top level",
    "persistent_cache_hit": "traced and lowered; the executable came from the persistent compilation cache",
    "inlined": "traced inside an enclosing trace (jit, scan, checkpoint, ...); its cost belongs to the outer function",
    "transform": "traced and compiled under a transformation applied outside jit (grad, vmap, ...)",
    "no_retrace": "compiled without a retrace: an argument's sharding, device or committedness changed",
    "ahead_of_time": "traced through .lower(), .trace(), .eval_shape() or jax.eval_shape",
    "unknown": "traced, but this JAX version does not tell shapewatch how (not counted as a compile)",
}
#: Kinds that produce an executable: each one is a compile.
COMPILING_KINDS = ("compile", "persistent_cache_hit", "transform", "no_retrace")


def explained(changes: Any) -> str:
    """Changes in one line, bounded: leaves changed alike (a params tree cast to bfloat16) are one part.

    >>> explained([Change(f"p[{i}]", "dtype", None, "float32", "bfloat16") for i in range(5)])
    'dtype of 5 leaves: float32 -> bfloat16 (p[0], p[1], p[2] and 2 more)'
    """
    alike: dict[tuple[Any, ...], list[str]] = {}
    for c in changes:
        alike.setdefault((c.field, c.axis, c.old, c.new), []).append(c.path)
    parts: list[str] = []
    for c in changes:
        paths = alike[(c.field, c.axis, c.old, c.new)]
        if len(paths) < _ALIKE:
            parts.append(c.text)
        elif paths[0] == c.path:  # the first of its group: the group's part, in its place
            what = f"shape[{c.axis}]" if c.field == "shape" else c.field.replace("_", " ")
            parts.append(f"{what} of {len(paths)} leaves: {c.old} -> {c.new} "
                         f"({', '.join(paths[:3])} and {len(paths) - 3} more)")
    if len(parts) > _PARTS:
        parts = parts[:_PARTS] + [f"and {len(parts) - _PARTS} more changes"]
    return "; ".join(parts)


def recompiled(compiles: int) -> bool:
    """Whether a function with this many compiles recompiled: the one place this rule is decided."""
    return compiles > 1


@dataclasses.dataclass
class Miss:
    """One cache miss of one watched function.

    Attributes:
      seq: process-wide sequence number, in the order the misses happened.
      function: the function's qualified name.
      module: its module.
      location: ``file:line`` of its definition (in a notebook cell: ``In [2]:1``).
      call_site: ``file:line`` of the user code that made the call (in a notebook cell:
        ``In [3]:2``, the cell's execution count then and the line in it), or None.
      thread: the name of the thread that traced.
      timestamp: wall-clock time of the miss (seconds since the epoch).
      kind: one of :data:`KINDS`.
      signature: the abstract signature, with each array leaf's placement where it was read
        (for a ``no_retrace`` compile, read from the call's arguments; None where they were not found).
      changes: the diff against the nearest earlier signature.
      trace_s, lower_s, compile_s: the cost, from ``jax.monitoring`` events.
      recreated: the function object is new but its code was seen before.
      spans: ``(phase, start, end)`` wall-clock spans, for the timeline.
      pid, host: the process that recorded it.
      process_index, process_count: its place in a ``jax.distributed`` job (0 and 1 without one).
      reason: why it happened, where the signature's diff cannot tell (a compile
        without a retrace, an identical signature traced again), else None.
      cache: what JAX's persistent compilation cache did for this compile (None for a miss
        that compiled nothing): ``status`` (``hit``, ``written``, ``not_written``, ``not_used``,
        ``unknown``), ``reason`` (``below_min_compile_time``, ``not_process_0``,
        ``not_configured``, ``disabled``, ``decided_off``, ``unknown``, or None), ``text``,
        and where known ``saved_s``, ``retrieval_s``, ``threshold_s``, ``key`` and the lowered
        ``program`` (``fingerprint``, ``lines``, ``text``) while a run manifest is kept.
    """

    seq: int
    function: str
    module: str
    location: str
    call_site: str | None
    thread: str
    timestamp: float
    kind: str
    signature: Signature | None
    changes: tuple[Change, ...] = ()
    trace_s: float = 0.0
    lower_s: float = 0.0
    compile_s: float = 0.0
    recreated: bool = False
    spans: list[tuple[str, float, float]] = dataclasses.field(default_factory=list)
    pid: int = 0
    host: str = ""
    process_index: int = 0
    process_count: int = 1
    reason: str | None = None
    cache: dict[str, Any] | None = None
    hook_id: int | None = dataclasses.field(default=None, repr=False, compare=False)
    #: the arguments the function returned whole (its carried state), read when it was traced.
    returns: tuple[str, ...] = dataclasses.field(default=(), repr=False, compare=False)
    #: the shapes of the output's leaves, ``(("out[0]", (8, 3)), ...)``, read when it was traced;
    #: None for an output of more than a few leaves or of a node that is not a tuple, list or dict.
    outputs: tuple[tuple[str, tuple[int, ...]], ...] | None = dataclasses.field(default=None, repr=False,
                                                                                 compare=False)
    context: int | None = dataclasses.field(default=None, repr=False, compare=False)
    # False: seen only once the executable was built (a backend compile that nothing traced or lowered
    # just before), so a guard cannot stop it.
    stoppable: bool = dataclasses.field(default=True, repr=False, compare=False)
    #: for an inlined trace: the function whose code made the call, hence the trace it was inlined into.
    inside: str | None = dataclasses.field(default=None, repr=False, compare=False)
    #: calls of this signature, counted (``count_calls=True``, once the function recompiled on a shape);
    #: held by the first miss of each signature; None where calls were not counted per signature.
    calls: int | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def total_s(self) -> float:
        return self.trace_s + self.lower_s + self.compile_s

    def copy(self) -> Miss:
        """A copy with its own ``spans`` list (the rest is immutable or shared)."""
        new = object.__new__(Miss)
        new.__dict__.update(self.__dict__)
        new.spans = list(self.spans)
        return new

    @property
    def explanation(self) -> str:
        """The cause in one line, e.g. ``x.shape[1]: 128 -> 131``."""
        if self.reason is not None and not self.changes:
            return self.reason
        if self.kind == "no_retrace" and not self.changes:
            return "compiled without a retrace: same abstract signature; an argument's sharding, device or committedness changed"
        if self.recreated and not self.changes:
            return RECREATED
        if not self.changes:
            return "first compile"
        return explained(self.changes)

    def to_dict(self, signature: Any = _INLINE) -> dict[str, Any]:
        """The miss as JSON data; ``signature``, when given, stands for the signature (an index, say)."""
        if signature is _INLINE:
            signature = None if self.signature is None else self.signature.to_dict()
        return {
            "seq": self.seq,
            "function": self.function,
            "module": self.module,
            "location": self.location,
            "call_site": self.call_site,
            "thread": self.thread,
            "timestamp": self.timestamp,
            "kind": self.kind,
            "signature": signature,
            "changes": [c.to_dict() for c in self.changes],
            "explanation": self.explanation,
            "recreated": self.recreated,
            "trace_s": self.trace_s,
            "lower_s": self.lower_s,
            "compile_s": self.compile_s,
            "total_s": self.total_s,
            "spans": [list(s) for s in self.spans],
            "pid": self.pid,
            "host": self.host,
            "process_index": self.process_index,
            "process_count": self.process_count,
            "calls": self.calls,
            "cache": None if self.cache is None else {k: v for k, v in self.cache.items() if k != "program"},
        }


@dataclasses.dataclass(frozen=True)
class FunctionRecord:
    """A snapshot of one watched function's records.

    Attributes:
      key: ``module:qualname@file:line``, stable across re-created function objects.
      function, module, location: as in :class:`Miss`.
      compiles: misses that produced an executable (kinds in ``COMPILING_KINDS``).
      kinds: the number of misses of each kind.
      signatures: the number of distinct signatures traced (a signature evicted by
        ``max_records`` and traced again counts again).
      trace_s, lower_s, compile_s: totals over all misses, dropped ones included.
      calls: calls counted (``count_calls=True``), else None.
      dropped: misses not kept because of ``max_records``.
      misses: the kept misses, oldest first.
    """

    key: str
    function: str
    module: str
    location: str
    compiles: int
    kinds: dict[str, int]
    signatures: int
    trace_s: float
    lower_s: float
    compile_s: float
    calls: int | None
    dropped: int
    misses: tuple[Miss, ...]

    @property
    def total_s(self) -> float:
        return self.trace_s + self.lower_s + self.compile_s

    def to_dict(self, misses: list[Any] | None = None) -> dict[str, Any]:
        """The record as JSON data; ``misses``, when given, stand for the misses' own ``to_dict()``."""
        return {
            "key": self.key,
            "function": self.function,
            "module": self.module,
            "location": self.location,
            "compiles": self.compiles,
            "kinds": dict(self.kinds),
            "signatures": self.signatures,
            "calls": self.calls,
            "trace_s": self.trace_s,
            "lower_s": self.lower_s,
            "compile_s": self.compile_s,
            "total_s": self.total_s,
            "dropped": self.dropped,
            "misses": [m.to_dict() for m in self.misses] if misses is None else misses,
        }
