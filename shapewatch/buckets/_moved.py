"""The module paths ``shapewatch.buckets`` had before its files moved into subpackages (private).

They are here so that loader states pickled before the move load, for a release: a
``state_dict()`` pickles its objects by their class's module path
(``shapewatch.buckets._buckets.Buckets``, ``._length_observer.LengthObserver``,
``._auto_planner.Decision``, ``._bucketed_batches.Held``, ``._group_by_length_examples.Spec``,
``._choose.Choice``), and code may import an old path. :class:`OldPaths`, a finder on
``sys.meta_path`` that ``shapewatch.buckets`` installs, imports each old name as the module it
moved to: the same module object, registered in ``sys.modules`` under both names (a class keeps
its new ``__module__``, so a state pickled now names the new path). Every old module name is
here, not only those a state holds. Remove this file, and ``MOVED``, a release after the move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: the package the old names were under
PACKAGE = __name__.rpartition(".")[0]  # shapewatch.buckets

#: old module (under shapewatch.buckets) -> the module it moved to (under shapewatch.buckets)
MOVED = {
    "_auto_planner": "_online.auto_planner",
    "_batch": "_loaders.batch",
    "_bucket_state": "_loaders.bucket_state",
    "_bucketed": "_loaders.bucketed",
    "_bucketed_batches": "_loaders.bucketed_batches",
    "_bucketed_lockstep": "_distributed.bucketed_lockstep",
    "_buckets": "_plan.buckets",
    "_choose": "_online.choose",
    "_choose_by_length": "_loaders.choose_by_length",
    "_choose_state": "_loaders.choose_state",
    "_cost_model": "_online.cost_model",
    "_dp_at_most_k": "_plan.dp_at_most_k",
    "_dp_exactly_k": "_online.dp_within_cap",
    "_explain": "_plan.explain",
    "_extended": "_loaders.extended",
    "_group_by_length": "_loaders.group_by_length",
    "_group_by_length_examples": "_loaders.group_by_length_examples",
    "_group_by_length_lockstep": "_distributed.group_by_length_lockstep",
    "_length_observer": "_plan.length_observer",
    "_loader_checks": "_loaders.loader_checks",
    "_loader_state": "_loaders.loader_state",
    "_loader_state_v1": "_loaders.loader_state_v1",
    "_lockstep": "_distributed.lockstep",
    "_pack": "_loaders.pack",
    "_pack_lockstep": "_distributed.pack_lockstep",
    "_policies": "_loaders.policies",
    "_prior": "_plan.prior",
    "_propose": "_plan.propose",
    "_schedulers": "_distributed.schedulers",
    "_step_meter": "_online.step_meter",
    "_strategies": "_plan.strategies",
}


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name of ``MOVED`` and loads it as the module it moved to."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != PACKAGE or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(f"{PACKAGE}.{MOVED[spec.name.rpartition('.')[2]]}")
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the old name's
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state  # its own spec back: nothing runs again


def install() -> None:
    """Put :class:`OldPaths` first on ``sys.meta_path`` (once, however often this runs)."""
    if not any(type(finder).__name__ == "OldPaths" and type(finder).__module__ == __name__
               for finder in sys.meta_path):
        sys.meta_path.insert(0, OldPaths())
