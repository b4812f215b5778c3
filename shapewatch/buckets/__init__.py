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

# Files (docs/architecture.md has one line per file), in private subpackages by concept (their
# __init__ imports nothing; a module is imported by its own path):
# _plan/: the plan and how it is chosen offline: length_observer (LengthObserver), buckets
#   (Buckets), propose (propose) with strategies and the DP dp_at_most_k, explain, prior (prior=).
# _loaders/: group_by_length / bucketed (with group_by_length_examples / bucketed_batches, and reading:
#   the source read so that an interrupt loses no item), batch,
#   loader_checks, policies (the plan policy and costs objects, FixedPlan, LearnedPlan, AutoPlan,
#   Costs, either spelling resolved to them), pack (the packing batcher of
#   group_by_length(strategy="pack")), choose_by_length (strategy="auto"), extended; their
#   state_dict: loader_state, bucket_state, loader_state_v1, choose_state.
# _online/: automatic re-planning from measured costs: auto_planner with the DP dp_within_cap,
#   cost_model, step_meter (the step through asynchronous dispatch); choose (strategy="auto": pack
#   or bucket from measured costs).
# _distributed/: the scheduler each loader owns: schedulers (LocalScheduler: the planner's call
#   sequence; Lockstep: in step across processes) with group_by_length_lockstep /
#   bucketed_lockstep / pack_lockstep, over lockstep (jax.distributed's key-value store).
# Here: _pad (pad_to, pad_batch), _checks (shared checks), _cli, _moved (the module paths before
# the subpackages, so that states pickled then load; installed below), and grain (the grain
# transformation, the only module that imports grain; not imported here).
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
