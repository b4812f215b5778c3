"""Bucketing (the fixer): observe lengths, propose a few bucket shapes, pad to them.

Every distinct input shape is a compile under ``jax.jit``. Bucketing pads
variable lengths to a handful of boundaries, trading padding for compiles:

>>> from shapewatch.buckets import LengthObserver, propose
>>> obs = LengthObserver([3, 5, 8, 9, 30, 31])
>>> plan = propose(obs, max_buckets=2, multiple_of=8)
>>> plan.boundaries
(8, 32)
>>> plan.bucket_of(12)
32
"""

# Files (docs/architecture.md has one line per file): _length_observer (LengthObserver),
# _buckets (Buckets), _propose (propose) with _strategies and the DPs _dp_at_most_k /
# _dp_exactly_k, _pad (pad_to, pad_batch), the loaders _bucketed / _group_by_length (with
# _bucketed_batches / _group_by_length_examples, _batch, _loader_checks, _policies: the plan policy and
# costs objects, FixedPlan, LearnedPlan, AutoPlan, Costs, either spelling resolved to them; _pack: the packing
# batcher of group_by_length(strategy="pack"); _choose, _choose_by_length, _choose_state: strategy="auto",
# pack or bucket from measured costs), their automatic
# re-planning _auto_planner with _cost_model, _step_meter (the step through asynchronous
# dispatch) and _prior, _explain, the _cli, and _checks
# (shared checks). The scheduler each loader owns: _schedulers (LocalScheduler: the planner's call
# sequence; Lockstep: in step across processes) with _group_by_length_lockstep / _bucketed_lockstep /
# _pack_lockstep, over _lockstep (jax.distributed's key-value store); _loader_state (state_dict);
# grain (the grain transformation, the only module that imports grain; not imported here).
# May import: nothing of shapewatch outside this folder (the loaders take any callable as
# compile_records). This docstring heads the API page: it names no private file.

from __future__ import annotations

from ._distributed.lockstep import LoaderProcessError
from ._loaders.batch import Batch
from ._loaders.bucketed import bucketed
from ._loaders.choose_by_length import choose_by_length
from ._loaders.group_by_length import LOADERS, group_by_length
from ._loaders.policies import AutoPlan, Costs, FixedPlan, LearnedPlan
from ._moved import install
from ._pad import pad_batch, pad_to
from ._plan.buckets import Buckets
from ._plan.length_observer import LengthObserver
from ._plan.propose import propose
from ._plan.strategies import STRATEGIES

LOADERS["auto"] = choose_by_length  # group_by_length(strategy="auto"): its loader builds on GroupByLength
# the module paths before the files moved into subpackages import as the modules they moved to,
# so that states pickled then load (for a release: _moved says more)
install()
del LOADERS, choose_by_length, install

__all__ = [
    "AutoPlan",
    "Batch",
    "Buckets",
    "Costs",
    "FixedPlan",
    "LearnedPlan",
    "LengthObserver",
    "LoaderProcessError",
    "STRATEGIES",
    "bucketed",
    "group_by_length",
    "pad_batch",
    "pad_to",
    "propose",
]
