"""The module paths of ``shapewatch.buckets`` before its files moved into subpackages still import,
as the modules they moved to, and what was pickled by them loads (for a release).

A loader's ``state_dict()`` pickles its objects by their class's module path: a state saved
before the move names ``shapewatch.buckets._buckets.Buckets`` and the like. The old paths are
written out here, apart from ``shapewatch.buckets._moved``, so that a path it loses fails here.
"""

from __future__ import annotations

import importlib
import inspect
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shapewatch.buckets
from shapewatch.buckets import Buckets, bucketed, group_by_length

ROOT = Path(__file__).resolve().parents[1]

#: every module of shapewatch/buckets/ before the move -> where it is now (under shapewatch.buckets)
OLD = {
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
#: the classes a loader's state pickles (every loader kind, after some batches; the saved fixtures)
IN_STATES = {("_buckets", "Buckets"), ("_length_observer", "LengthObserver"), ("_auto_planner", "Decision"),
             ("_bucketed_batches", "Held"), ("_group_by_length_examples", "Spec"), ("_choose", "Choice")}
PACKAGE = "shapewatch.buckets"


def test_the_old_paths_are_those_the_package_maps():
    from shapewatch.buckets._moved import MOVED

    assert MOVED == OLD
    assert not any(os.path.exists(ROOT / "shapewatch" / "buckets" / f"{old}.py") for old in OLD)


@pytest.mark.parametrize("old", OLD)
def test_an_old_module_path_imports_as_the_module_it_moved_to(old):
    new = importlib.import_module(f"{PACKAGE}.{OLD[old]}")
    assert importlib.import_module(f"{PACKAGE}.{old}") is new
    assert sys.modules[f"{PACKAGE}.{old}"] is new
    assert new.__name__ == new.__spec__.name == f"{PACKAGE}.{OLD[old]}"  # its own name and spec kept
    namespace: dict = {}
    exec(f"from {PACKAGE} import {old} as via_from", namespace)  # the other spelling of the import
    assert namespace["via_from"] is new


def test_a_name_that_was_never_a_module_is_not_found():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{PACKAGE}._no_such_module")


def _by_path(module: str, name: str) -> bytes:
    """A pickle (protocol 0's GLOBAL) of the object ``module.name``, by reference."""
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n."


def _globals(blob: bytes) -> list[tuple[str, str]]:
    found = []

    class Reader(pickle.Unpickler):
        def find_class(self, module, name):
            found.append((module, name))
            return super().find_class(module, name)

    Reader(io.BytesIO(blob)).load()
    return found


@pytest.mark.parametrize("old", OLD)
def test_a_pickle_naming_a_class_or_function_by_its_old_module_path_loads(old):
    new = importlib.import_module(f"{PACKAGE}.{OLD[old]}")
    defined = {name: obj for name, obj in vars(new).items()
               if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == new.__name__}
    assert defined
    for name, obj in defined.items():
        blob = _by_path(f"{PACKAGE}.{old}", name)
        assert _globals(blob) == [(f"{PACKAGE}.{old}", name)]
        assert pickle.loads(blob) is obj


def _with_old_paths(blob: bytes) -> bytes:
    """A protocol-2 pickle with every moved module path written as it was before the move."""
    for old, new in OLD.items():
        blob = blob.replace(b"c" + f"{PACKAGE}.{new}\n".encode(), b"c" + f"{PACKAGE}.{old}\n".encode())
    return blob


def _ticking():
    ticks = iter(range(10**9))
    return lambda: float(next(ticks))


_LENGTHS = np.clip(np.random.default_rng(3).lognormal(2.5, 0.8, 96), 2, 80).astype(int)
_EX = [(np.arange(n) + 1000 * i).astype(np.int32) for i, n in enumerate(_LENGTHS)]
LOADERS = {
    "group_by_length fixed": lambda: group_by_length(_EX, batch_size=4, buffer_size=32,
                                                     buckets=Buckets((8, 16, 80), overflow="extend")),
    "group_by_length learned": lambda: group_by_length(_EX, batch_size=4, buffer_size=32, max_buckets=2),
    "group_by_length online": lambda: group_by_length(_EX, batch_size=4, buffer_size=64, clock=_ticking()),
    "group_by_length pack": lambda: group_by_length(_EX, batch_size=4, strategy="pack", row_length=80,
                                                    buffer_size=32),
    "group_by_length auto": lambda: group_by_length(_EX, batch_size=4, strategy="auto", buffer_size=64,
                                                    clock=_ticking()),
    "bucketed online": lambda: bucketed([_EX[i:i + 4] for i in range(0, 96, 4)], clock=_ticking()),
}


def _ids(batches):
    """The examples in ``batches`` (each example's values start at 1000 times its index)."""
    return [int(x) // 1000 for b in batches for x in np.asarray(b.data)[(np.asarray(b.positions) == 0) & b.mask]]


def test_loader_states_pickled_with_the_old_module_paths_load_and_go_on():
    named = set()
    for name, make in LOADERS.items():
        first = make()
        taken = [next(first) for _ in range(3)]
        blob = _with_old_paths(pickle.dumps(first.state_dict(), protocol=2))
        paths = [(m.removeprefix(f"{PACKAGE}."), n) for m, n in _globals(blob) if m.startswith(PACKAGE)]
        assert paths and all(m in OLD for m, _ in paths), (name, paths)  # only old paths in the pickle
        named |= set(paths)
        second = make()
        second.load_state_dict(pickle.loads(blob))
        assert sorted(_ids(taken) + _ids(second)) == list(range(len(_EX))), name  # every example once
    assert IN_STATES <= named  # each class a state holds was read by its old path


def test_a_fresh_process_loads_a_pickle_by_an_old_path_before_it_imports_shapewatch():
    loader = LOADERS["group_by_length learned"]()
    next(loader)
    blob = _with_old_paths(pickle.dumps(loader.state_dict(), protocol=2))
    code = ("import pickle, sys; state = pickle.loads(sys.stdin.buffer.read()); "
            "print(type(state['spec']).__module__, type(state['observed']).__module__)")
    done = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == [f"{PACKAGE}._loaders.group_by_length_examples",
                                            f"{PACKAGE}._plan.length_observer"]


def test_the_public_names_did_not_move():
    assert shapewatch.buckets.__all__ == [
        "AutoPlan", "Batch", "Buckets", "Costs", "FixedPlan", "LearnedPlan", "LengthObserver",
        "LoaderProcessError", "STRATEGIES", "bucketed", "group_by_length", "pad_batch", "pad_to", "propose"]
    public = sorted(n for n in dir(shapewatch.buckets) if not n.startswith(("_", "@")))  # @: pytest's rewriting
    assert public == sorted(
        [*shapewatch.buckets.__all__, "annotations"] + (["grain"] if "shapewatch.buckets.grain" in sys.modules else []))
    from shapewatch.buckets.grain import GroupByLengthIterDataset  # the public module, where it was

    assert GroupByLengthIterDataset.__module__ == "shapewatch.buckets.grain"
