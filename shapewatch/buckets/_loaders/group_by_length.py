"""``group_by_length`` and its iterator ``GroupByLength``: group single examples into
length-homogeneous padded batches.

``group_by_length`` wraps an iterable of single examples and yields
length-homogeneous padded batches from a bounded buffer, as
:class:`~shapewatch.buckets.Batch` tuples carrying the padded data, the validity
mask, the valid lengths and the bucket used. Reading one example and stacking examples
into a batch is ``_loaders.group_by_length_examples``.
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .._checks import (
    check_batch,
    check_callable,
    check_cells,
    check_choice,
    check_int,
    check_multiple_of,
    fail,
    fail_type,
    is_int,
    round_up,
)
from .._distributed.group_by_length_lockstep import GroupByLengthLockstep
from .._distributed.lockstep import join
from .._distributed.schedulers import LocalScheduler, TakesSteps, Taking, last
from .._online.auto_planner import AutoPlanner, ShapesUsedUp, report_of, rows_rule
from .._online.step_meter import _user_stacklevel
from .._plan.buckets import Buckets
from .._plan.length_observer import LengthObserver
from .._plan.prior import load_prior
from .._plan.propose import propose
from .batch import Batch
from .bucket_state import Resumable
from .extended import ExtendedTally
from .group_by_length_examples import Item, Spec, build_batch, parse_example
from .loader_checks import (
    check_auto,
    check_buckets,
    check_flag,
    check_max_buckets,
    check_max_shapes,
    check_types,
)
from .loader_state import load_pack_state, save_pack_state
from .pack import Entry, build_packed, packed, row_of
from .policies import (
    AutoPlan,
    Costs,
    FixedPlan,
    LearnedPlan,
    check_policy_types,
    planning_keywords,
    resolve_plan,
)
from .reading import Skipping, _Raw, counted, hold_next, parse_last, source_iter  # noqa: F401 - _Raw: states pickled before name it here

__all__ = ["GroupByLength", "PackByLength", "group_by_length"]

REMAINDERS = ("pad", "drop", "keep")
STRATEGY_CHOICES = ("bucket", "pack", "auto")
#: strategy -> the maker of its loader, for a loader that lives in a module of its own and builds on
#: GroupByLength (so that module imports this one): the package's ``__init__`` fills it in
#: (``"auto"``: ``_loaders.choose_by_length.choose_by_length``).
LOADERS: dict[str, Callable[..., Any]] = {}


def group_by_length(
    examples: Iterable[Any],
    *,
    batch_size: int | None = None,
    token_budget: int | None = None,
    strategy: str = "bucket",
    row_length: int | Buckets | None = None,
    plan: FixedPlan | LearnedPlan | AutoPlan | None = None,
    costs: Costs | None = None,
    buckets: Buckets | Iterable[int] | None = None,
    max_buckets: int | str = "auto",
    length_of: Callable[[Any], Any] = len,
    shuffle: bool = True,
    seed: int = 0,
    buffer_size: int = 4096,
    remainder: str = "pad",
    pad_value: Any = 0,
    multiple_of: int = 1,
    compile_seconds: float | None = None,
    steps: int | None = None,
    step_seconds: float | None = None,
    max_shapes: int | None = None,
    compile_records: Callable[[], Any] | None = None,
    clock: Callable[[], float] | None = None,
    prior: Any = None,
    across_processes: bool = True,
) -> GroupByLength:
    """Group single examples into length-homogeneous padded batches.

    Args:
        examples: any iterable of examples: a 1-D array or list of numbers, or a
            dict/tuple/pytree of arrays (or lists of numbers, as tokenizers return them)
            sharing their leading (length) axis. Scalar leaves (and, with a custom
            ``length_of``, leaves whose leading axis is not the length) are stacked as
            they are. Until the first batch, a leaf's dtype stays while an example's
            values fit it exactly (a float of an ml_dtypes format: while its format does,
            infinities and NaN included), else widens to numpy's common dtype, float32 or
            float64, the first that holds every value read so far (float16 and bfloat16
            meet in float32); after it, an example whose values the batch dtype cannot
            hold exactly raises.
        batch_size: rows per batch (with ``token_budget``: the most rows).
        token_budget: rows per batch = ``max(1, token_budget // bucket)``.
        strategy: ``"bucket"`` (the default): each row holds one example, padded to its
            bucket. ``"pack"``: whole examples first-fit into rows of one length (see "Pack
            or bucket" in the how-to), each its own segment of the row (``Batch.segment_ids``,
            ``Batch.positions``): for a step that honours ``segment_ids`` (attention masked
            by segment equality). Every example once and whole; ``batch_size`` rows per batch
            (or ``token_budget // row_length``); the examples of each buffer (those held and
            those read, in the shuffled order) packed by first-fit or first-fit-decreasing,
            whichever uses fewer rows; full batches of the fullest rows go, the other rows'
            examples are packed again with the next buffer. Every leaf of an example must be
            a sequence; an example of length 0 raises (left out). Not with the options that
            plan buckets (``plan``, ``costs``, ``buckets``, ``max_buckets``, ``compile_seconds``, ``steps``,
            ``step_seconds``, ``max_shapes``, ``compile_records``, ``clock``, ``prior``). In a
            job of several processes, in step as bucketing is (``across_processes``): the row
            length agreed (when not given, the most of each process's choice), every step of one
            row length and shape everywhere (``remainder="keep"`` pads as ``"pad"`` does).
            ``"auto"``: the step honours ``segment_ids``, and the loader packs or buckets,
            whichever the measured step and compile costs say is cheaper over the examples to
            come, re-decided online (``decisions``, ``explain()``; see "Pack or bucket" in the
            how-to). Every batch carries ``segment_ids``; every leaf must be a sequence and an
            example of length 0 raises, as with ``"pack"``. Takes the online planner's options
            (``max_shapes``, ``compile_records``, ``clock``, ``prior``), not ``row_length``,
            ``buckets``, an int ``max_buckets`` nor the three cost numbers; not yet in step
            across processes (``across_processes=False`` chooses on each process's shard).
        row_length: ``strategy="pack"``: the row length, an int (a longer example gets rows
            of its own length, rounded up to ``multiple_of``: ``overflow="extend"``) or a
            one-boundary :class:`Buckets` (its ``overflow`` says what a longer example does:
            ``"error"``, ``"truncate"``, ``"extend"``, as for ``buckets``). None: the longest
            length of the first buffer (``buffer_size`` examples) rounded up to
            ``multiple_of``; a longer example later gets rows of that length doubled until they
            hold it (longer examples share those row lengths: however the lengths grow, as in a
            source sorted by length, the shapes stay ``log2(longest / row length) + 1``; not
            above ``token_budget``, but for an example longer than it: a row of its own, doubled
            as well).
        plan: how the buckets are planned, as one object (the keywords below, kept for a release,
            say the same): :class:`FixedPlan` (``buckets=``), :class:`LearnedPlan` (an int
            ``max_buckets=``, or ``"auto"`` with ``costs=``), :class:`AutoPlan` (the online planner:
            ``max_shapes``, ``prior``, ``compile_records``, ``clock``); None: the keywords (by default
            the online planner). Not with any of those keywords, nor with ``strategy="pack"``;
            ``strategy="auto"`` takes an :class:`AutoPlan` only.
        costs: a :class:`Costs`, the costs given by hand that ``LearnedPlan("auto")`` weighs (the
            three numbers below); with no ``plan=``, the plan they make once. Refused with any other
            plan, which would ignore it.
        buckets: a :class:`Buckets` plan (``overflow="truncate"`` cuts longer examples,
            counted in ``.truncated``) or boundaries (``overflow="extend"``); None:
            learned with :func:`propose` from the first ``buffer_size`` examples.
        max_buckets: most buckets, or ``"auto"`` (the default): with no numbers, plan
            online from measured costs (see README "Auto-bucketing"); with
            ``compile_seconds``, ``steps`` and ``step_seconds``, once with :func:`propose`.
        max_shapes: online: the most distinct batch shapes ever yielded (default: the
            linked step's budget, else 16). With ``strategy="auto"``, while it packs, rows doubled
            for a longer example keep every example even beyond it (a bucket plan that would
            need more is not chosen), and on one process bucketing that meets a longer example
            with every shape used packs from there (a ``switch`` decision says so).
        compile_records: online: a callable returning the linked step's compile records
            (objects with ``total_s``), e.g. ``shapewatch.compile_records(step)``.
        clock: online: the clock that times the consumer (default ``time.perf_counter``, with
            a new shape's compile timed by JAX's compile events; a clock given times the
            compiles too).
        prior: a saved :meth:`GroupByLength.report`, a ``LengthObserver`` (or either's
            dict, or a JSON file's path): start from its lengths (and measured costs).
        length_of: the example's length; the default ``len`` means the shared leading
            length of every array leaf (leaves that disagree raise ``ValueError``). With
            a custom one, a leaf is a sequence while its leading axis equals the length;
            one that keeps its shape while the length changes (before the first batch)
            is fixed-size.
        shuffle, seed: shuffle within the buffer and the order of batches, with
            ``numpy.random.default_rng(seed)``; the same seed gives the same batches.
        buffer_size: the most examples held at once (``max_buffered`` reports the peak).
            When the buffer fills up with partial batches, the fullest is flushed early
            (padded to the batch size, or short with ``"keep"``; never dropped). A
            ``UserWarning`` says so when ``buffer_size`` is below one full batch per bucket.
        remainder: the partial batches at the end of the data: ``"pad"`` pads the rows
            to the batch size (padded rows have length 0 and an all-False mask), ``"drop"``
            drops them (counted in ``.dropped``), ``"keep"`` yields them short.
        pad_value: fill value.
        multiple_of: every boundary learned is a multiple of it.
        across_processes: in a ``jax.distributed`` job of several processes (initialised
            before the loader is made), keep every process in step: the same plan, the same
            bucket and batch shape at every step, the same number of steps; a process whose
            shard ran out yields batches of padding only (``rows == 0``, an all-False mask).
            ``False``: each process on its own (see README "Many processes").

    Returns:
        An iterator of :class:`Batch` (``rows`` real rows first); see :class:`GroupByLength`.

    Raises:
        ValueError: (``[shapewatch] ...``) for bad arguments at once, among them an option
            the planning mode would ignore (with ``buckets=``: ``max_buckets``, ``prior``, the
            cost options and a ``multiple_of`` other than a given ``Buckets``' own; with an int
            ``max_buckets``: the cost numbers, ``max_shapes``, ``compile_records``, ``clock``; with
            the three cost numbers: the last three), named with the fix; for a bad example
            (no length, mixed ranks or structure, a dtype that cannot hold it, longer
            than a plan with ``overflow="error"``) from ``next()``, which leaves it out and
            keeps every example held: call ``next()`` again to go on. An exception from
            ``examples`` itself propagates the same way. With ``strategy="pack"``: for an
            option that plans buckets, and from ``next()`` for an example of length 0 or with
            a leaf that is no sequence. With ``strategy="auto"``: for an option it would
            ignore, and from ``next()`` as with ``"pack"``. ``plan=`` or ``costs=`` with a keyword
            they cover (``max_shapes=``, ``steps=``, ...): both are named.
        TypeError: an argument of the wrong type (``batch_size=2.0``, ``seed="0"``,
            ``length_of=3``, ``clock=3``, ``buckets="8"``, ``shuffle="no"``, ``prior=3``,
            ``strategy`` not a str, ``row_length`` neither an int nor a ``Buckets``, ``plan=4``), naming its
            type and value; also a ``ValueError``, as in 0.1.
        LoaderProcessError: in a job of several processes, another process's source or
            example raised (that process raises its own error).

    Example:
        >>> import numpy as np
        >>> data = [np.arange(n) for n in (3, 9, 4, 10, 2)]
        >>> it = group_by_length(data, batch_size=2, buckets=(4, 10), shuffle=False)
        >>> [(b.data.shape, b.lengths.tolist()) for b in it]
        [((2, 4), [3, 4]), ((2, 10), [9, 10]), ((2, 4), [2, 0])]
        >>> it = group_by_length(data, batch_size=2, plan=FixedPlan((4, 10)), shuffle=False)
        >>> [b.data.shape for b in it]
        [(2, 4), (2, 10), (2, 4)]
    """
    if not isinstance(strategy, str):
        raise fail_type(f"group_by_length: strategy must be a str, 'bucket', 'pack' or 'auto'; got "
                        f"{type(strategy).__name__} {strategy!r}")
    check_choice("strategy", strategy, STRATEGY_CHOICES)
    check_flag("shuffle", shuffle)
    check_flag("across_processes", across_processes)
    planning = {"buckets": buckets, "max_buckets": max_buckets, "prior": prior, "max_shapes": max_shapes,
                "compile_records": compile_records, "clock": clock, "compile_seconds": compile_seconds,
                "steps": steps, "step_seconds": step_seconds}
    if strategy in LOADERS:
        if plan is not None or costs is not None:  # the objects: the online planner's, as its keywords
            check_policy_types("group_by_length", plan, costs)
            ignored = [f"{k}={v!r}" for k, v in (("plan", plan), ("costs", costs))
                       if v is not None and not isinstance(v, AutoPlan)]
            if ignored:
                raise fail(f"group_by_length(strategy='auto') chooses the row length and the buckets from measured "
                           f"costs: {', '.join(ignored)} would be ignored; fix: leave "
                           f"{'it' if len(ignored) == 1 else 'them'} out (plan=AutoPlan(...) takes the online "
                           "planner's options), or pass strategy='bucket'")
            policy, _ = resolve_plan("group_by_length", plan=plan, costs=None, keywords=planning,
                                     multiple_of=multiple_of)
            planning = planning_keywords(policy, None)
        return LOADERS[strategy](
            examples, batch_size=batch_size, token_budget=token_budget, row_length=row_length,
            length_of=length_of, shuffle=shuffle, seed=seed, buffer_size=buffer_size, remainder=remainder,
            pad_value=pad_value, multiple_of=multiple_of, across_processes=across_processes, **planning)
    if strategy == "pack":
        bucket_only = {"plan": (plan, None), "costs": (costs, None),
                       "buckets": (buckets, None), "max_buckets": (max_buckets, "auto"),
                       "compile_seconds": (compile_seconds, None), "steps": (steps, None),
                       "step_seconds": (step_seconds, None), "max_shapes": (max_shapes, None),
                       "compile_records": (compile_records, None), "clock": (clock, None),
                       "prior": (prior, None)}
        given = [f"{name}={value!r}" for name, (value, default) in bucket_only.items()
                 if not (value is default or (isinstance(value, str) and value == default))]
        if given:
            raise fail(f"group_by_length(strategy='pack') plans no buckets: {', '.join(given)} "
                       f"appl{'ies' if len(given) == 1 else 'y'} to strategy='bucket' only; fix: leave "
                       f"{'it' if len(given) == 1 else 'them'} out (the row length is row_length=)")
        return PackByLength(
            examples, batch_size=batch_size, token_budget=token_budget, row_length=row_length,
            length_of=length_of, shuffle=shuffle, seed=seed, buffer_size=buffer_size,
            remainder=remainder, pad_value=pad_value, multiple_of=multiple_of,
            across_processes=across_processes)
    if row_length is not None:
        raise fail(f"group_by_length: row_length={row_length!r} is the row length of strategy='pack'; "
                   "with strategy='bucket' (the default) it would be ignored; fix: pass strategy='pack', "
                   "or buckets= for bucketing")
    numbers = {"compile_seconds": compile_seconds, "steps": steps, "step_seconds": step_seconds}
    check_types(buckets=buckets, max_buckets=max_buckets, multiple_of=multiple_of, numbers=numbers,
                clock=clock, prior=prior, flags={})
    # either spelling becomes the objects (what a mode would ignore refused), then the loader's arguments
    policy, given_costs = resolve_plan("group_by_length", plan=plan, costs=costs, keywords=planning,
                                       multiple_of=multiple_of)
    return GroupByLength(
        examples,
        batch_size=batch_size,
        token_budget=token_budget,
        length_of=length_of,
        shuffle=shuffle,
        seed=seed,
        buffer_size=buffer_size,
        remainder=remainder,
        pad_value=pad_value,
        multiple_of=multiple_of,
        across_processes=across_processes,
        **planning_keywords(policy, given_costs),
    )


class GroupByLength(Resumable, TakesSteps):
    """The iterator returned by :func:`group_by_length`.

    An error (from the source, or a bad example) propagates once and loses nothing
    already read: call ``next()`` again to go on with everything held.

    Attributes:
        plan: the :class:`Buckets` in use (None until the first buffer was read).
        dropped: examples dropped by ``remainder="drop"`` (only at the end of the data).
        truncated: examples cut to the largest bucket by a plan with ``overflow="truncate"``.
        max_buffered: the most examples held at once (never above ``buffer_size``).
        shapes: ``Counter`` of ``(batch rows, bucket)`` yielded -> times.
        batches: batches yielded so far.
        extended: ``Counter`` of extended lengths (above the plan's largest boundary,
            ``overflow="extend"``) -> batches yielded at them, under the plan in use (a new
            plan starts a new count); the plan itself records nothing.
    """

    def __init__(self, examples: Iterable[Any], *, batch_size: int | None,
                 token_budget: int | None, buckets: Any, max_buckets: int | str,
                 length_of: Callable[[Any], Any], shuffle: bool, seed: int, buffer_size: int,
                 remainder: str, pad_value: Any, multiple_of: int, max_shapes: int | None = None,
                 compile_records: Callable[[], Any] | None = None,
                 clock: Callable[[], float] | None = None, prior: Any = None,
                 across_processes: bool = True, **auto: Any) -> None:
        self._check_sizes(batch_size, token_budget, multiple_of)
        check_max_buckets(max_buckets, allow_auto=True)
        online = check_auto(max_buckets, buckets, auto)
        cap = check_max_shapes(max_shapes, compile_records)
        self._check_reading(length_of, buffer_size, remainder, seed)
        self.plan: Buckets | None = check_buckets(buckets, self._multiple_of)
        check_cells(self.plan, self._batch_size, self._budget)
        self._max_buckets = max_buckets
        self._auto = auto
        self._start_reading(examples, length_of, shuffle, seed, pad_value)
        self._queues: dict[int, list[Item]] = {}
        if online:
            self._online = AutoPlanner(
                name="group_by_length", multiple_of=self._multiple_of, rows_for=self._rows_for,
                sizing={"batch_size": self._batch_size, "token_budget": self._budget},
                max_shapes=cap, horizon=_len(examples), unit_size=self._buffer_size,
                clock=clock, records=compile_records,
                prior=None if prior is None else load_prior(prior))
            self.decisions = self._online.decisions
        elif prior is not None and self.plan is None:
            self._prior = load_prior(prior)[0]
        if self.plan is not None:
            self._check_buffer()
        session, self._history = join("group_by_length", across_processes)
        #: the across-processes layer, chosen once: the planner's call sequence alone, or in step
        self._scheduler: LocalScheduler = LocalScheduler(self._online)
        if session is not None:
            self._scheduler = GroupByLengthLockstep(session, self._online, seed=seed, size=_len(examples),
                                                    shuffle=self._shuffle, rows_for=self._rows_for)
            if self._remainder == "keep":  # a short batch would be a shape of this process alone
                self._remainder = "pad"

    def _check_sizes(self, batch_size: Any, token_budget: Any, multiple_of: Any) -> None:
        """A batch's size (rows, or tokens) and the rounding of lengths, checked (both strategies)."""
        if batch_size is None and token_budget is None:
            raise fail("group_by_length needs batch_size or token_budget; got neither")
        self._batch_size = None if batch_size is None else check_batch("batch_size", batch_size)
        self._budget = None if token_budget is None else check_batch("token_budget", token_budget)
        self._multiple_of = check_multiple_of(multiple_of)

    def _check_reading(self, length_of: Any, buffer_size: Any, remainder: Any, seed: Any) -> None:
        """How the source is read, checked (both strategies)."""
        check_callable("length_of", length_of)
        self._buffer_size = check_int("buffer_size", buffer_size, 1)
        self._remainder = check_choice("remainder", remainder, REMAINDERS)
        if not is_int(seed):
            raise fail_type(f"seed must be an int; got {type(seed).__name__} {seed!r}")
        if seed < 0:
            raise fail(f"seed must be an int >= 0 (numpy's generators take no negative seed); got {seed!r}")

    def _start_reading(self, examples: Iterable[Any], length_of: Callable[[Any], Any], shuffle: bool,
                       seed: int, pad_value: Any) -> None:
        """The state before the first read, once every option was checked (both strategies; each
        adds where it holds what it read: bucketing's queues, packing's open rows)."""
        self._length_of = length_of
        self._shuffle = bool(shuffle)
        self._rng = np.random.default_rng(seed)
        self._pad_value = pad_value
        self._it = source_iter(examples, "examples", "examples")
        self._spec: Spec | None = None
        self._staged: list[Any] = []  # read, not yet queued (an Item, or the _Raw read last)
        self._refused: BaseException | None = None  # a refusal at the cap not raised yet (see _observe)
        self._noted = 0  # staged examples whose lengths the observer (or planner) has
        self._ready: list[Any] = []  # (bucket or row length, items or rows, full|flush|end), pop() from the end
        self._done = False
        self.dropped = 0
        self.truncated = 0
        self.max_buffered = 0
        self.batches = 0
        self.shapes: Counter = Counter()
        self._extended = ExtendedTally()  # the extended lengths yielded under the plan in use
        #: the online planner's decisions (``max_buckets="auto"`` with no numbers), oldest first.
        self.decisions: list = []
        self._warned = False
        self._online: AutoPlanner | None = None
        self._observed = LengthObserver()  # every length read (the online planner keeps its own)
        self._consumed = 0  # examples taken from the source (for load_state_dict)
        self._skipping = Skipping()  # what a load_state_dict read to skip it
        self._taking: Taking | None = None  # a batch built and not let go of (see __next__)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def _rows_for(self, bucket: int) -> int:
        return rows_rule(self._batch_size, self._budget)(bucket)

    def _check_buffer(self) -> None:
        """Warn when the buffer cannot hold a full batch of every bucket at once."""
        plan = self.plan
        assert plan is not None
        need = sum(self._rows_for(b) for b in plan.boundaries)
        if self._buffer_size < need:
            self._warned = True
            warnings.warn(
                f"[shapewatch] buffer_size={self._buffer_size} is below one full batch per "
                f"bucket ({need} examples for {len(plan)} buckets); partial batches will "
                f"be flushed early{'' if self._remainder == 'keep' else ' and padded'}: "
                f"expected buffer_size >= {need}",
                stacklevel=_user_stacklevel(),
            )

    # -- buffering
    # Every example read stays in loader state (``_staged``, ``_queues``, ``_ready``) until the
    # batch holding it is returned, and each move between them is one assignment of lists built
    # aside: an exception of any kind (a KeyboardInterrupt too) at any line leaves every example
    # held exactly once, and the next ``next()`` goes on. An example just read sits in
    # ``_staged`` as a ``_Raw`` until it is parsed.
    @property
    def _held(self) -> int:
        """Examples held: staged, queued and ready."""
        return (len(self._staged) + sum(len(q) for q in self._queues.values())
                + sum(len(items) for _, items, _ in self._ready))

    def _take(self, example: Any) -> Item:
        """Parse one example and check it against a given plan; raise (and skip it) if bad."""
        item, self._spec = parse_example(example, self._length_of, self._spec, self._pad_value)
        if self.plan is not None and self.plan.overflow == "error":
            top = self.plan.max_length
            if item[1] > top:
                raise fail(
                    f"an example has length {item[1]}, above the largest bucket {top} "
                    "(overflow='error'); it was left out and the others are kept (call next() "
                    "to go on, or use a plan with overflow='truncate' or 'extend')"
                )
        return item

    def _count_raw(self) -> None:
        """Count the example read last if it is still raw (see ``reading.counted``)."""
        self._consumed = counted(self._staged, self._consumed)

    def _parse_last(self) -> None:
        """Parse the example read last if it is still raw; a bad one is left out (and raised)."""
        self._count_raw()
        parse_last(self._staged, self._take)

    def _read(self) -> None:
        """Read into ``_staged`` up to the buffer's free room (or the end of the source).

        An exception from the source or a bad example propagates with everything read
        so far kept.
        """
        try:
            self._parse_last()
            stop = len(self._staged) + self._buffer_size - self._held
            while len(self._staged) < stop and not self._done:
                if not hold_next(self._staged, self._it, self._consumed):
                    self._done = True
                    break
                self._consumed += 1
                self._parse_last()
        finally:
            self.max_buffered = max(self.max_buffered, self._held)

    def _plan_from(self, items: list[Item]) -> None:
        lengths = [n for _, n in items] or [1]
        online = self._online
        if online is not None:
            if not online.observer.total:  # an empty input: any plan will do
                online.seen([1])
            # made once (a call again after an interrupt takes it, or plans again from where it began)
            self.plan = self._scheduler.once("first plan", lambda: online.plan(None), online.mark, online.rewind)
            self._scheduler.done("first plan")
            self._check_buffer()  # a warning made an error keeps them staged
            return
        if getattr(self, "_prior", None) is not None:
            lengths = self._prior.copy()
            lengths.update([n for _, n in items])
        auto = self._auto if self._max_buckets == "auto" else {}
        mb = self._max_buckets if self._max_buckets == "auto" else int(self._max_buckets)
        self.plan = propose(lengths, mb, multiple_of=self._multiple_of, overflow="extend", **auto)
        self._check_buffer()  # a warning made an error keeps them staged

    def _observe(self) -> None:
        """Give the lengths of the staged examples not yet seen to the observer (online: the
        planner, which re-plans for a longer one; at its cap the longer ones are left out)."""
        self._raise_refused()
        new = [n for _, n in self._staged[self._noted:]]
        if self._online is None:
            if new:
                self._observed.update(new)
                self._noted = len(self._staged)
            return
        if new:
            self._seen(new)
        # checked whether or not anything is new: an interrupt here before leaves it to the next call
        if self.plan is not None and any(n > self.plan.max_length for _, n in self._staged):
            try:
                self._replan(force=True)
            except ValueError as exc:  # at the cap: the longer examples are left out, raised once
                if isinstance(exc, ShapesUsedUp) and self._at_cap():
                    return
                top = self.plan.max_length
                gone = [n for _, n in self._staged if n > top]
                kept = [it for it in self._staged if it[1] <= top]
                if len(gone) > 1:
                    refusal: BaseException = fail(
                        f"group_by_length: {len(gone)} examples (lengths "
                        f"{', '.join(map(str, sorted(gone)))}) are longer than every bucket and "
                        f"all max_shapes={self._online.max_shapes} shapes are used; they were "
                        "left out and the others are kept (raise max_shapes or cut them)")
                    refusal.__cause__ = exc
                else:
                    refusal = exc
                observer = self._online.forgotten(gone)
                # one line: the examples left out, their lengths taken back from the planner and
                # the refusal kept until raised (an interrupt after it: raised at the next call)
                self._staged, self._noted, self._online.observer, self._refused = kept, len(kept), observer, refusal
                self._raise_refused()

    def _raise_refused(self) -> None:
        """A refusal at the cap that an interrupt kept from being raised (see :meth:`_observe`):
        raised now, once."""
        refused = self._refused
        if refused is not None:  # one line: an interrupt lands before both (it stays kept) or after
            self._refused = None; raise refused  # noqa: E702

    def _at_cap(self) -> bool:
        """A longer example than the plan holds, with every shape ``max_shapes`` allows used:
        whether this loader took it otherwise (bucketing: no, it is left out)."""
        return False

    def _fill(self) -> None:
        """Read up to the buffer's free room, queue by bucket, move full batches to ready.

        Called only when nothing is ready. An exception from the source or from a bad
        example propagates from the read loop with everything read so far kept.
        """
        self._read()
        self._observe()
        self._queue_staged()

    def _queue_staged(self) -> None:
        """Queue what was read (planned first, if nothing is) by bucket; full batches to ready."""
        if self.plan is None:
            self._plan_from(self._staged)
        assert self.plan is not None
        rng = self._draws()
        queues, ready = self._queued(self._shuffled(self._staged, rng), True, self.plan, self._queues, self._ready, rng)
        self._staged, self._noted, self._queues, self._ready, self._rng = [], 0, queues, ready, rng  # one move

    def _draws(self) -> np.random.Generator:
        """A copy of the loader's random generator for a move to draw from, committed with the move
        (``self._rng = rng`` in its one assignment): a move cut short by an interrupt leaves the
        loader's generator as it was, so the move made again draws the same."""
        return copy.deepcopy(self._rng)

    def _shuffled(self, fresh: list[Item], rng: np.random.Generator) -> list[Item]:
        """``fresh`` (a new list) in the order it is queued: shuffled with ``rng`` (when the loader
        shuffles; see :meth:`_draws`), and while the online planner learns, its longest examples
        first: the first batches, at the longest length, measure the compile and the step on
        examples that need the top bucket anyway (in a job as on one process: the same on every
        process's shard)."""
        if not self._shuffle or len(fresh) < 2:
            return fresh
        fresh = [fresh[i] for i in rng.permutation(len(fresh))]
        if self._learning():
            assert self.plan is not None
            first = 2 * self._rows_for(self.plan.max_length)
            longest = sorted(range(len(fresh)), key=lambda i: -fresh[i][1])[:first]
            chosen = set(longest)
            fresh = [fresh[i] for i in longest] + [x for i, x in enumerate(fresh) if i not in chosen]
        return fresh

    def _learning(self) -> bool:
        """Online, before any step was measured (and with no saved model): the first batches,
        at the longest length, measure the compile and the step."""
        return self._online is not None and not self._online.batches and (
            self._online.costs.step_model() is None)

    def _queued(self, fresh: list[Item], flush: bool, plan: Buckets, queues: dict[int, list[Item]],
                ready: list[tuple[int, list[Item], str]], rng: np.random.Generator) -> tuple[dict, list]:
        """``(queues, ready)`` with ``fresh`` queued by bucket of ``plan`` on new lists (the loader's
        own are left as they are): full batches (and, at the end, the rest) become ready, shuffled
        with ``rng`` (a copy the caller commits with its move: :meth:`_draws`)."""
        queues = {b: q[:] for b, q in queues.items()}
        made: list[tuple[int, list[Item], str]] = []
        for item in fresh:
            bucket = plan.bucket_of(item[1])
            queue = queues.setdefault(bucket, [])
            queue.append(item)
            if len(queue) >= self._rows_for(bucket):
                made.append((bucket, queue[:], "full"))
                queue.clear()
        if self._done:  # the remainders, bucket by bucket
            made += [(b, q[:], "end") for b, q in sorted(queues.items()) if q]
            queues = {}
        elif not made and flush and any(queues.values()):  # full of partial batches: flush the fullest
            bucket = max(
                (b for b, q in queues.items() if q),
                key=lambda b: (len(queues[b]) / self._rows_for(b), b),
            )
            made.append((bucket, queues.pop(bucket), "flush"))
        if self._shuffle and len(made) > 1:
            made = [made[i] for i in rng.permutation(len(made))]
            if self._learning():  # the batches of the longest examples first: by their lengths, longest
                # first (not by the longest alone: where many examples share the top length, truncated
                # to a maximum, every batch holds one and the first batches would be a mix)
                made.sort(key=lambda r: sorted((n for _, n in r[1]), reverse=True), reverse=True)
        return queues, made[::-1] + ready  # pop() from the end: those already ready first

    def _enqueue(self, fresh: list[Item], rng: np.random.Generator) -> None:
        """Queue ``fresh`` (the staged examples, shuffled with ``rng``, a copy from :meth:`_draws`)
        under the plan, in one move (``rng`` committed with it, and in step none held is left
        whose length went out: an interrupt before leaves them staged and sent, after queued)."""
        assert self.plan is not None
        queues, ready = self._queued(fresh, False, self.plan, self._queues, self._ready, rng)
        steps = self._scheduler
        self._staged, self._noted, self._queues, self._ready, self._rng, steps.sent = [], 0, queues, ready, rng, 0

    def _seen(self, new: list[int]) -> None:
        """The online planner takes the lengths of the staged examples not noted yet (``new``), once:
        ``next()`` called again after an interrupt between the planner's count and the loader's
        note only notes them (the same reads: the buffer was full, or the source ended)."""
        online, steps, what = self._online, self._scheduler, f"seen {self._consumed}"
        assert online is not None
        steps.once(what, lambda: online.seen(new))
        self._noted = len(self._staged)
        steps.done(what)

    def _replan(self, force: bool = False) -> None:
        """Ask the online planner; on a new plan, queue every held example again under it. Each plan
        is made once (``LocalScheduler.once``): ``next()`` called again after an interrupt inside the
        planner plans again from where it began (its decision recorded once), and after it takes
        the plan made (the planner no longer has a re-plan due). The re-plan ``next()`` begins
        with is made once a batch (``acted``: called again, the reads since, which the run not
        interrupted weighs at the next batch, do not re-plan it); one forced by a longer example
        read may come again within the same ``next()``."""
        online, steps = self._online, self._scheduler
        assert online is not None
        what = "forced replan" if force else "replan"
        plan = steps.once(what, lambda: online.plan(self.plan, force=force), online.mark, online.rewind)
        if plan is not None:
            self._requeue(plan)
        if force:
            steps.done(what)
        else:
            steps.acted(what)

    def _requeue(self, plan: Buckets) -> None:
        """Take ``plan`` and queue every queued or ready example again under it, in one move (a plan
        taken already, as a job's round called again after an interrupt returns it, is not)."""
        if plan == self.plan:
            return
        held = [it for _, items, _ in self._ready[::-1] for it in items]
        held += [it for _, q in sorted(self._queues.items()) for it in q]
        rng = self._draws()
        queues, ready = self._queued(held, False, plan, {}, [], rng)
        self.plan, self._queues, self._ready, self._rng = plan, queues, ready, rng
        if not self._warned:
            self._check_buffer()

    def _next_alone(self) -> None:
        """One process: the next batch, built and made ``self._taking``."""
        self._raise_refused()
        steps = self._scheduler
        if self._online is not None and self.plan is not None:
            self._replan()
        while True:
            while not self._ready:
                if self._done and not self._held:
                    raise StopIteration
                self._fill()
            # one assignment: an interrupt lands before or after a batch's move ahead of a compile
            self._ready, measure = steps.cover(self._ready)
            bucket, items, kind = self._ready[-1]
            rows = self._rows_for(bucket)
            if kind == "end" and self._remainder == "drop" and len(items) < rows:
                # one line, no call after the count: an interrupt lands before or after both
                self.dropped += len(self._ready[-1][1]); del self._ready[-1]  # noqa: E702
                continue
            if kind != "full" and self._remainder == "keep":
                rows = len(items)
            rows = max(rows, len(items))
            out, truncated = steps.emit(bucket, self._build, bucket, items, rows, measure=measure)
            self._taking = Taking(out, bucket, len(items), measure=measure, rows=rows, truncated=truncated,
                                  held=last(self._ready))
            return

    # -- in step across the processes of a job (the agreement: ``_distributed.group_by_length_lockstep``)
    def _next_in_step(self) -> None:
        """The next step agreed with the other processes, built and made ``self._taking``: this
        process's batch of its bucket (a full one, else a partial one, else padding only)."""
        steps = self._scheduler
        assert isinstance(steps, GroupByLengthLockstep)
        while not steps.schedule:
            self._round_in_step()
        bucket = steps.schedule[0]
        items, held = self._in_step_items(bucket)
        if not items:
            steps.check_padding(self._spec is not None, "group_by_length", "example", "examples")
        n_rows = max(self._rows_for(bucket), len(items))
        out, truncated = steps.emit(bucket, self._build, bucket, items, n_rows)
        self._taking = Taking(out, bucket, len(items), rows=n_rows, truncated=truncated, held=held)

    def _in_step_items(self, bucket: int) -> tuple[list[Item], tuple[list[Any], slice] | None]:
        """This process's examples for a step of ``bucket`` (a full batch ready, else a partial one,
        else a batch's worth queued, else none: padding only) and where they are held."""
        rows = self._rows_for(bucket)
        at = [i for i, (b, _, _) in enumerate(self._ready) if b == bucket]
        i = ([j for j in at if self._ready[j][2] == "full"] or at or [None])[-1]  # pop() order: last first
        if i is not None:
            return self._ready[i][1], (self._ready, slice(i, i + 1))
        if self._queues.get(bucket):
            return self._queues[bucket][:rows], (self._queues[bucket], slice(0, rows))
        return [], None

    def _steps(self) -> Any:
        """What commits a step besides the loader: its scheduler."""
        return self._scheduler

    def _commit(self) -> None:
        """Commit the step of the batch built (``self._taking``) in every part that counts it,
        each once (see ``_distributed.schedulers.Taking``); ``__next__`` then lets go of the batch."""
        taking, steps = self._taking, self._steps()
        assert taking is not None
        if steps is not None:
            steps.take(taking)
        self._count(taking)

    def _take_back(self) -> None:
        """A batch half taken (an interrupt held it back) is taken back by every part that committed
        it: ``state_dict()`` saves the loader as it was before that step, whose batch comes next."""
        taking, steps = self._taking, self._steps()
        if taking is not None:
            self._uncount(taking)
            if steps is not None:
                steps.untake(taking)
            self._taking = None

    def _round_in_step(self) -> None:
        """Read this shard's next buffer, agree the plan on every process's lengths, queue what was
        read under it, then agree the steps on the batches each process holds."""
        steps = self._scheduler
        assert isinstance(steps, GroupByLengthLockstep)
        lengths, records = self._read_and_publish()
        if self._online is None:
            if self.plan is None:
                self._plan_from([(None, n) for n in steps.lengths(records)])
        else:
            first = self.plan is None
            try:
                plan = steps.plan(records, self.plan, lengths)
            except ValueError:  # at the cap, on every process: the longer examples are left out
                top = self.plan.max_length  # type: ignore[union-attr]
                self._staged = [it for it in self._staged if it[1] <= top]
                raise
            if first:
                self.plan = plan
                self._check_buffer()
            elif plan is not None:
                self._requeue(plan)
        rng = self._draws()
        self._enqueue(self._shuffled(self._staged, rng), rng)
        if self._done and self._remainder == "drop":
            self._drop_short()
        full, partial = self._holding()
        self._spec = steps.agree_steps(records, full, partial, self._done, self._done and not self._held, self._spec)

    def _read_and_publish(self) -> tuple[list[int], list[dict[str, Any]]]:
        """A round's start: read this shard's next buffer (a source that raises is told to the
        other processes; the example that raised is left out, as on one process) and publish its
        lengths. Returns the lengths staged and every process's record."""
        steps = self._scheduler
        assert isinstance(steps, GroupByLengthLockstep)
        try:
            self._read()
        except Exception as exc:
            steps.fail(exc)
            raise
        lengths = [n for _, n in self._staged]
        return lengths, steps.publish(lengths, {"done": self._done, "spec": self._spec is not None})

    def _drop_short(self) -> None:
        """``remainder="drop"``: the partial batches at the end of this shard, dropped and counted."""
        short = [r for r in self._ready if r[2] != "full" and len(r[1]) < self._rows_for(r[0])]
        if short:
            kept = [r for r in self._ready if not any(r is x for x in short)]
            self.dropped, self._ready = self.dropped + sum(self._examples_in(r) for r in short), kept  # one move

    def _examples_in(self, entry: tuple[int, list[Any], str]) -> int:
        """Examples in a batch made ready (bucketing's: one a row)."""
        return len(entry[1])

    def _holding(self) -> tuple[dict[str, int], dict[str, int]]:
        """Full batches ready and what partial ones hold, per length (JSON keys): examples, or for
        strategy="auto" packing, rows (a ready entry then holds rows; nothing is queued)."""
        full: dict[str, int] = {}
        partial: dict[str, int] = {}
        for bucket, items, kind in self._ready:
            if kind == "full":
                full[str(bucket)] = full.get(str(bucket), 0) + 1
            else:
                partial[str(bucket)] = partial.get(str(bucket), 0) + len(items)
        for bucket, q in self._queues.items():
            if q:
                partial[str(bucket)] = partial.get(str(bucket), 0) + len(q)
        return full, partial

    def _build(self, bucket: int, items: list[Item], rows: int) -> tuple[Batch, int]:
        """The padded batch of ``items`` (nothing counted yet) and how many were cut to ``bucket``."""
        assert self._spec is not None and self.plan is not None
        data, lengths, truncated = build_batch(self._spec, items, rows, bucket, self._pad_value)
        mask = np.arange(bucket) < lengths[:, None]
        return Batch(data, mask, lengths, int(bucket), len(items)), truncated

    def _count(self, taking: Taking) -> None:
        """Count the batch of ``taking``, about to be yielded (once: in one line that records what
        it replaced in ``taking.before``)."""
        assert self.plan is not None
        before = taking.before
        self._extended.note(self.plan, taking.bucket, before)
        if "count" in before:
            return
        key = (taking.rows, int(taking.bucket))
        n, history = self.shapes[key], self._history
        old = (self.truncated, self.batches, n, None if history is None else len(history))
        if history is None:
            self.truncated += taking.truncated; self.batches += 1; self.shapes[key] = n + 1; before["count"] = old  # noqa: E501, E702
        else:
            self.truncated += taking.truncated; self.batches += 1; self.shapes[key] = n + 1; history[old[3]:] = [key]; before["count"] = old  # noqa: E501, E702

    def _uncount(self, taking: Taking) -> None:
        """Take back what :meth:`_count` committed of ``taking``."""
        before = taking.before
        old = before.get("count")
        if old is not None:
            key = (taking.rows, int(taking.bucket))
            if old[3] is None:
                self.truncated, self.batches = old[:2]; self.shapes[key] = old[2]; del before["count"]  # noqa: E702
            else:
                self.truncated, self.batches = old[:2]; self.shapes[key] = old[2]; del self._history[old[3]:]; del before["count"]  # noqa: E501, E702
            if not self.shapes[key]:
                del self.shapes[key]
        self._extended.unnote(before)

    @property
    def max_shapes(self) -> int | None:
        """Distinct batch shapes promised with ``remainder`` "pad" or "drop": one per bucket used,
        counting extended lengths (None before the plan exists). With "keep", distinct lengths:
        each short batch it keeps is one more ``(rows, length)`` shape."""
        if self._online is not None:
            return self._online.max_shapes
        if self.plan is None:
            return None
        return len(self.plan.boundaries) + len(self.extended)

    @property
    def extended(self) -> Counter:
        """Extended length -> batches yielded at it under the plan in use (a copy; see the
        class's attributes)."""
        return self._extended.of(self.plan)

    def report(self) -> dict[str, Any]:
        """What this run measured (lengths, compile seconds, step model, plan, decisions), JSON-ready:
        save it and pass it as ``prior=`` to start a later run on the right plan."""
        return report_of(self._online, self._observed, self.plan, self.batches)


class PackByLength(GroupByLength):
    """The iterator returned by ``group_by_length(..., strategy="pack")``: whole examples packed
    into rows of one length (:attr:`plan` is that length as a one-boundary :class:`Buckets`;
    a longer example with ``overflow="extend"`` adds rows of its own length, one more shape).

    As :class:`GroupByLength`: an error (from the source, or a bad example) propagates once
    and loses nothing already read, and a ``KeyboardInterrupt`` anywhere in ``next()`` loses
    nothing either: every example read stays in the loader (read, then packed and waiting for a
    batch, then in a batch made ready), moved between them in one assignment, until the line
    that returns its batch. ``state_dict()`` is its own, versioned (``"shapewatch.pack-state/3"``).

    In a job of several processes it keeps in step with the others (``_distributed.pack_lockstep``: the
    :class:`PackLockstep` it owns agrees the row length and every step's row length, where a
    process with no batch of it yields padding only); each process packs its own shard as alone.

    Attributes:
        plan, dropped, truncated, max_buffered, shapes, batches, extended: as
            :class:`GroupByLength`'s (``shapes`` counts ``(rows, row length)``, ``extended`` the
            rows of extended lengths).
    """

    def __init__(self, examples: Iterable[Any], *, batch_size: int | None, token_budget: int | None,
                 row_length: Any, length_of: Callable[[Any], Any], shuffle: bool, seed: int,
                 buffer_size: int, remainder: str, pad_value: Any, multiple_of: int,
                 across_processes: bool = True) -> None:
        self._check_sizes(batch_size, token_budget, multiple_of)
        self._check_reading(length_of, buffer_size, remainder, seed)
        self.plan: Buckets | None = _row_plan(row_length, self._multiple_of)
        check_cells(self.plan, self._batch_size, self._budget)
        self._row_length = None if row_length is None else self.plan.to_dict()  # type: ignore[union-attr]
        self._start_reading(examples, length_of, shuffle, seed, pad_value)  # decisions: none, nothing is planned online
        self._open: dict[int, list[Item]] = {}  # row length -> examples packed, in no ready batch yet
        session, self._history = join("group_by_length", across_processes)
        self._lockstep = None
        if session is not None:
            # only a job of several processes needs it
            from .._distributed.pack_lockstep import PackLockstep

            self._lockstep = PackLockstep(session, seed, self._shuffle)

    def _steps(self) -> Any:
        """What commits a step besides the loader: the lockstep in a job, else nothing."""
        return self._lockstep

    @property
    def _held(self) -> int:
        """Examples held: staged, open and ready."""
        return (len(self._staged) + sum(len(q) for q in self._open.values())
                + sum(len(row) for _, rows, _ in self._ready for row in rows))

    def _take(self, example: Any) -> Item:
        """Parse one example and check that it packs; raise (and skip it) if not."""
        item, spec = parse_example(example, self._length_of, self._spec, self._pad_value)
        fixed = [path for path, seq in zip(spec.paths, spec.seq) if not seq]
        if fixed:
            raise fail(
                f"strategy='pack' packs sequences: leaf {fixed[0]} of an example has no leading axis of "
                f"the example's length {item[1]}, so it cannot share a row with other examples; the "
                "example was left out and the others are kept (call next() to go on; give every leaf "
                "the length axis, or use strategy='bucket')")
        if item[1] == 0:
            raise fail(
                "an example has length 0: packed, it would hold no position of a row (no segment "
                "shows it); it was left out and the others are kept (call next() to go on, or leave "
                "empty examples out)")
        plan = self.plan
        if plan is not None and plan.overflow == "error" and item[1] > plan.max_length:
            raise fail(
                f"an example has length {item[1]}, above the row length {plan.max_length} "
                "(overflow='error'); it was left out and the others are kept (call next() to go on, "
                "or use a row_length plan with overflow='truncate' or 'extend')")
        self._spec = spec
        return item

    def _row_choice(self) -> int | None:
        """The row length of the first buffer: its longest length rounded up to ``multiple_of``
        (None when it holds no example)."""
        longest = max((n for _, n in self._staged), default=0)
        return int(round_up(longest, self._multiple_of)) if longest else None

    def _set_row_length(self, length: int) -> None:
        self.plan = Buckets((length,), multiple_of=self._multiple_of, overflow="extend")

    def _pool_of(self, length: int) -> int:
        plan = self.plan
        assert plan is not None
        return row_of(length, plan.max_length, plan.overflow, plan.multiple_of, doubling=self._row_length is None,
                      budget=self._budget)

    def _fill(self) -> None:
        """Read up to the buffer's free room, pack with the open examples, move full batches to
        ready (one assignment). Called only when nothing is ready."""
        self._read()
        self._observe()
        if self.plan is None:
            self._set_row_length(self._row_choice() or self._multiple_of)
        self._pack(flush=True)

    def _pack(self, flush: bool) -> None:
        """Pack the staged examples with the open ones; full batches (with ``flush``, when none is
        full, the fullest partial one) to ready, in one move."""
        rng = self._draws()
        held, ready = packed(self._open, self._ready, self._staged, pool_of=self._pool_of,
                             rows_for=self._rows_for, done=self._done, rng=rng if self._shuffle else None, flush=flush)
        self._staged, self._noted, self._open, self._ready, self._rng = [], 0, held, ready, rng  # one move
        if not self._warned and any(kind == "flush" for _, _, kind in ready):
            self._warned = True
            self._warn_flush(ready)

    def _warn_flush(self, ready: list[Entry]) -> None:
        from .._online.step_meter import _user_stacklevel

        length, rows, _ = next(entry for entry in ready if entry[2] == "flush")
        per = self._rows_for(length)
        items = [n for row in rows for _, n in row]
        need = -(-per * length * len(items) // max(sum(min(n, length) for n in items), 1))
        flushed = f"partial batches will be flushed early{'' if self._remainder == 'keep' else ' and padded'}"
        pools = sorted({length} | {n for n, pool in self._open.items() if pool})  # the flushed one's too
        if need <= self._buffer_size and len(pools) > 1:  # the buffer would fill a batch of one row length
            warnings.warn(
                f"[shapewatch] buffer_size={self._buffer_size} is below one full packed batch of any of the "
                f"{len(pools)} row lengths it holds ({', '.join(map(str, pools[:8]))}"
                f"{', ...' if len(pools) > 8 else ''}: an example longer than the row gets longer rows); "
                f"{flushed}: expected a row_length that holds the longer examples, or buffer_size >= "
                f"{need * len(pools)}",
                stacklevel=_user_stacklevel())
            return
        warnings.warn(
            f"[shapewatch] buffer_size={self._buffer_size} is below one full packed batch ({per} rows "
            f"of length {length}: about {need} examples of these lengths); {flushed}: expected "
            f"buffer_size >= {need}", stacklevel=_user_stacklevel())

    def _next_batch(self) -> None:
        """The next batch, built and made ``self._taking`` (StopIteration at the end); the
        bucketing loader's ``__next__`` commits it and lets go of it."""
        if self._lockstep is not None:
            self._next_in_step()
        else:
            self._next_alone()

    def _next_alone(self) -> None:
        """One process: the next batch, built and made ``self._taking``."""
        while True:
            while not self._ready:
                if self._done and not self._held:
                    raise StopIteration
                self._fill()
            length, rows, kind = self._ready[-1]
            per = self._rows_for(length)
            if kind == "end" and self._remainder == "drop" and len(rows) < per:
                # one line, no call after the count: an interrupt lands before or after both
                self.dropped += sum(map(len, self._ready[-1][1])); del self._ready[-1]  # noqa: E702
                continue
            n_rows = len(rows) if kind != "full" and self._remainder == "keep" else max(per, len(rows))
            out, truncated = self._build_packed(length, rows, n_rows)
            self._taking = Taking(out, length, sum(map(len, rows)), rows=n_rows, truncated=truncated,
                                  held=last(self._ready))
            return

    # -- in step across the processes of a job (the agreement: ``_distributed.pack_lockstep``)
    def _next_in_step(self) -> None:
        """The next step agreed with the other processes, built and made ``self._taking``: this
        process's batch of its row length, or one of padding only (``remainder="keep"`` pads too:
        one shape on every process)."""
        steps = self._lockstep
        assert steps is not None
        while not steps.schedule:
            if steps.ended:
                raise StopIteration
            self._round_in_step()
        length = steps.schedule[0]
        at = max((i for i, entry in enumerate(self._ready) if entry[0] == length), default=None)
        rows = [] if at is None else self._ready[at][1]
        if at is None:
            steps.check_padding(self._spec, length)
        n_rows = max(self._rows_for(length), len(rows))
        out, truncated = self._build_packed(length, rows, n_rows)
        self._taking = Taking(out, length, sum(map(len, rows)), rows=n_rows, truncated=truncated,
                              held=None if at is None else (self._ready, slice(at, at + 1)))

    def _round_in_step(self) -> None:
        """Read and pack this shard as alone (the row length agreed first; a partial batch made
        ready only when none is), then agree the steps on what each process holds ready."""
        steps = self._lockstep
        assert steps is not None
        reading = not self._done and (not self._ready or self._held < self._buffer_size)
        if reading:
            try:
                self._read()
            except Exception as exc:  # the example that raised is left out, as on one process
                steps.fail(exc)
                raise
        self._observe()
        if self.plan is None:
            self._set_row_length(steps.row_length(self._row_choice(), self._multiple_of))
        if reading or self._staged or (self._done and any(self._open.values())):
            self._pack(flush=not self._ready)
        if self._done and self._remainder == "drop":
            self._drop_short()
        settled = self._done and not self._staged and not any(self._open.values())
        self._spec = steps.agree([(n, len(rows)) for n, rows, _ in self._ready[::-1]], settled, self._spec)

    def _drop_short(self) -> None:
        """``remainder="drop"``: the short batches at the end of this shard, dropped and counted."""
        short = [entry for entry in self._ready if entry[2] == "end" and len(entry[1]) < self._rows_for(entry[0])]
        if short:
            kept = [entry for entry in self._ready if not any(entry is s for s in short)]
            gone = sum(len(row) for _, rows, _ in short for row in rows)
            self.dropped, self._ready = self.dropped + gone, kept  # one move

    def _build_packed(self, length: int, rows: list, n_rows: int) -> tuple[Batch, int]:
        assert self._spec is not None
        data, segment_ids, positions, lengths, truncated = build_packed(
            self._spec, rows, n_rows, length, self._pad_value)
        return Batch(data, segment_ids > 0, lengths, int(length), len(rows), segment_ids, positions), truncated

    @property
    def max_shapes(self) -> int | None:
        """Distinct batch shapes promised with ``remainder`` "pad" or "drop": one per row length
        used (the row length and any extended one; None before the row length is known)."""
        if self.plan is None:
            return None
        return 1 + len(self.extended)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands (picklable, ``"shapewatch.pack-state/3"``): pass it to
        :meth:`load_state_dict` of a new loader made with the same arguments over the same
        source from its start to go on with exactly the batches that were left (in a job of
        several processes: on every process, each with the state it saved at the same step)."""
        self._take_back()
        return save_pack_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (see :meth:`state_dict`); call it before the first batch. The
        whole state is checked before anything changes (``TypeError`` for a field of the wrong
        type, ``ValueError`` for another format, version, loader or arguments)."""
        load_pack_state(self, state)
        self._taking = None


def _row_plan(row_length: Any, multiple_of: int) -> Buckets | None:
    """``row_length=`` as a one-boundary plan (an int: ``overflow="extend"``), or None."""
    if row_length is None:
        return None
    if isinstance(row_length, Buckets):
        if len(row_length.boundaries) != 1:
            raise fail(f"row_length must be one length; got a Buckets of {len(row_length.boundaries)} "
                       f"boundaries {row_length.boundaries}; fix: Buckets((length,), overflow=...)")
        if multiple_of not in (1, row_length.multiple_of):  # as buckets= with a Buckets refuses it
            raise fail(f"group_by_length(strategy='pack'): multiple_of={multiple_of!r} would be ignored: "
                       f"row_length={row_length!r} is a Buckets, whose own multiple_of={row_length.multiple_of} "
                       f"applies; fix: leave it out, or make the Buckets with multiple_of={multiple_of!r}")
        return row_length
    if not is_int(row_length):
        raise fail_type(f"group_by_length: row_length must be an int or a one-boundary "
                        f"Buckets; got {type(row_length).__name__} {row_length!r}")
    length = check_int("row_length", row_length, 1)
    if length % multiple_of:
        raise fail(f"row_length={length} is not a multiple of multiple_of={multiple_of}; fix: "
                   f"row_length={round_up(length, multiple_of)}")
    return Buckets((length,), multiple_of=multiple_of, overflow="extend")


def _len(examples: Any) -> int | None:
    try:
        return len(examples)
    except TypeError:
        return None
