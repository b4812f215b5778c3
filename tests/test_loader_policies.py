"""The loaders' planning options as objects: ``plan=FixedPlan | LearnedPlan | AutoPlan`` and
``costs=Costs``. Each object checks its fields when made (a wrong type is a ``TypeError``, a wrong
value a ``ValueError``, both naming the value); either spelling (the objects or today's keywords)
gives the same batches and the same state; both spellings at once, and an option the plan would
ignore, are refused by name before anything is read.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
import re

import numpy as np
import pytest

from shapewatch.buckets import (
    AutoPlan,
    Buckets,
    Costs,
    FixedPlan,
    LearnedPlan,
    LengthObserver,
    bucketed,
    group_by_length,
)
from tests._sources import Source

SPAN = 10_000
OBS = {"lengths": [3, 30], "counts": [1, 1]}  # a saved LengthObserver, as prior=
COSTS = {"compile_seconds": 2.0, "steps": 10_000, "step_seconds": 0.05}
FLUSH = "ignore:.*buffer_size=.* is below one full"


def examples(n: int = 120, seed: int = 0) -> list[np.ndarray]:
    """Example ``i``: ``i * SPAN + 1 + arange(length)``, lengths lognormal up to 200."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(3.0, 0.9, n), 1, 200).astype(int)
    return [(i * SPAN + 1 + np.arange(k)).astype(np.int64) for i, k in enumerate(lengths)]


def ragged_batches(n: int = 24, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.full((2, int(k)), i, np.int64) for i, k in enumerate(rng.integers(1, 90, n))]


def linear(length: int) -> float:
    return 0.01 + 1e-3 * length


class Clock:
    """A clock the test moves: a batch of padded length ``L`` costs ``step(L)``, and a compile more
    the first time ``L`` is seen."""

    def __init__(self, compile_s: float = 0.5, step=linear) -> None:
        self.t, self.compile_s, self.step, self.seen = 0.0, compile_s, step, set()

    def __call__(self) -> float:
        return self.t

    def consume(self, batch) -> None:
        length = int(np.asarray(batch.data).shape[1])
        self.t += self.step(length) + (self.compile_s if length not in self.seen else 0.0)
        self.seen.add(length)


def plain(batch) -> tuple:
    """A batch as plain values (arrays as lists), for comparing two runs field by field."""
    return tuple(None if f is None else np.asarray(f).tolist() if hasattr(f, "shape") else f for f in batch)


def drain(loader, clock: Clock | None = None, limit: int | None = None) -> list[tuple]:
    out = []
    for batch in loader:
        if clock is not None:
            clock.consume(batch)
        out.append(plain(batch))
        if limit is not None and len(out) == limit:
            break
    return out


def assert_type_error(exc: BaseException, owner: str, name: str, value) -> None:
    assert isinstance(exc, TypeError), type(exc).__mro__
    msg = str(exc)
    assert msg.startswith(f"[shapewatch] {owner}: "), msg
    assert name in msg and type(value).__name__ in msg and repr(value) in msg, msg


def assert_value_error(exc: BaseException, owner: str, name: str, shown: str) -> None:
    assert isinstance(exc, ValueError) and not isinstance(exc, TypeError), type(exc).__mro__
    msg = str(exc)
    assert msg.startswith(f"[shapewatch] {owner}: ") and name in msg and shown in msg, msg


# ------------------------------------------------------------------------------ each object's fields


@pytest.mark.parametrize("value, shown", [(8, "8"), ("8", "'8'"), (8.0, "8.0"), (None, "None"), ({4: 1}, "{4: 1}"),
                                          ((4.5, 10), "4.5"), ((True, 10), "True"), ([4, "10"], "'10'")])
def test_fixed_plan_of_the_wrong_type_is_a_type_error_naming_it(value, shown):
    with pytest.raises(TypeError) as caught:
        FixedPlan(value)
    msg = str(caught.value)
    assert msg.startswith("[shapewatch] FixedPlan: buckets must be a Buckets or a sequence of ints; got "), msg
    assert shown in msg, msg
    assert isinstance(caught.value, ValueError)  # as every wrong type of the loaders (what it was in 0.1)


@pytest.mark.parametrize("value, shown", [((), "boundaries are empty"), ((10, 4), "(10, 4)"), ((0, 4), "got 0"),
                                          ((4, 2**41), "2,199,023,255,552")])
def test_fixed_plan_of_bad_boundaries_is_a_value_error_naming_them(value, shown):
    with pytest.raises(ValueError) as caught:
        FixedPlan(value)
    assert_value_error(caught.value, "FixedPlan", "boundar", shown)


@pytest.mark.parametrize("value", [2.0, True, None, "Auto", [3], np.float64(2.0)])
def test_learned_plan_of_the_wrong_type_is_a_type_error_naming_it(value):
    with pytest.raises(TypeError) as caught:
        LearnedPlan(value)
    assert_type_error(caught.value, "LearnedPlan", "max_buckets", value)


@pytest.mark.parametrize("value", [0, -3])
def test_learned_plan_of_too_few_buckets_is_a_value_error_naming_it(value):
    with pytest.raises(ValueError) as caught:
        LearnedPlan(value)
    assert_value_error(caught.value, "LearnedPlan", "max_buckets must be an integer >= 1", f"got {value}")


@pytest.mark.parametrize("owner", ["LearnedPlan", "AutoPlan"])
@pytest.mark.parametrize("value", [3, 2.5, [3, 4], len])
def test_a_prior_of_the_wrong_type_is_a_type_error_naming_it(owner, value):
    with pytest.raises(TypeError) as caught:
        LearnedPlan(2, prior=value) if owner == "LearnedPlan" else AutoPlan(prior=value)
    assert_type_error(caught.value, owner, "prior", value)


@pytest.mark.parametrize("name, value", [("max_shapes", 2.0), ("max_shapes", True), ("max_shapes", "4"),
                                         ("clock", 3), ("clock", 0), ("compile_records", "x"),
                                         ("compile_records", [])])
def test_auto_plan_fields_of_the_wrong_type_are_type_errors_naming_them(name, value):
    with pytest.raises(TypeError) as caught:
        AutoPlan(**{name: value})
    assert_type_error(caught.value, "AutoPlan", name, value)


@pytest.mark.parametrize("value", [0, -1])
def test_auto_plan_of_no_shape_is_a_value_error(value):
    with pytest.raises(ValueError) as caught:
        AutoPlan(max_shapes=value)
    assert_value_error(caught.value, "AutoPlan", "max_shapes must be an integer >= 1", f"got {value}")


@pytest.mark.parametrize("name", list(COSTS))
@pytest.mark.parametrize("value", ["1", True, [0.1], None])
def test_costs_of_the_wrong_type_are_type_errors_naming_them(name, value):
    with pytest.raises(TypeError) as caught:
        Costs(**{**COSTS, name: value})
    assert_type_error(caught.value, "Costs", name, value)


@pytest.mark.parametrize("name", list(COSTS))
@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_costs_out_of_range_are_value_errors_naming_them(name, value):
    with pytest.raises(ValueError) as caught:
        Costs(**{**COSTS, name: value})
    assert_value_error(caught.value, "Costs", f"{name} must be a finite number >= 0", repr(value))


def test_costs_need_all_three_numbers_by_name():
    with pytest.raises(TypeError, match="step_seconds"):
        Costs(compile_seconds=1.0, steps=10)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Costs(1.0, 10, 0.01)  # type: ignore[misc]  # keyword-only: no order to get wrong


def test_numpy_numbers_are_taken_and_ints_become_ints():
    assert LearnedPlan(np.int64(3)) == LearnedPlan(3) and type(LearnedPlan(np.int64(3)).max_buckets) is int
    assert LearnedPlan(np.str_("auto")).max_buckets == "auto"
    assert AutoPlan(max_shapes=np.int32(4)).max_shapes == 4 and type(AutoPlan(max_shapes=np.int32(4)).max_shapes) is int
    assert FixedPlan(np.array([4, 10])).buckets == (4, 10)
    assert Costs(compile_seconds=np.float64(1.0), steps=np.int64(10), step_seconds=np.float32(0.01))


def test_the_objects_are_frozen_compare_by_value_and_hash():
    plans = [FixedPlan([4, 10]), FixedPlan(Buckets((4, 10), overflow="truncate")), LearnedPlan(3, prior=OBS),
             AutoPlan(max_shapes=4, prior=OBS), Costs(**COSTS)]
    for obj in plans:
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.prior = None  # type: ignore[misc]
        hash(obj)  # a dict prior is left out of the hash
    assert FixedPlan([4, 10]) == FixedPlan((4, 10)) and LearnedPlan(3, prior=OBS) == LearnedPlan(3, prior=dict(OBS))
    assert len({FixedPlan((4, 10)), FixedPlan([4, 10]), AutoPlan(), AutoPlan()}) == 2
    assert pickle.loads(pickle.dumps(plans)) == plans


def test_reprs_show_what_was_given():
    assert repr(FixedPlan([4, 10])) == "FixedPlan((4, 10))"
    assert repr(LearnedPlan(4)) == "LearnedPlan(4)"
    assert repr(LearnedPlan("auto", prior="run.json")) == "LearnedPlan('auto', prior='run.json')"
    assert repr(AutoPlan()) == "AutoPlan()"
    assert repr(AutoPlan(max_shapes=8)) == "AutoPlan(max_shapes=8)"
    assert repr(Costs(**COSTS)) == "Costs(compile_seconds=2.0, steps=10000, step_seconds=0.05)"
    long = repr(AutoPlan(prior={"lengths": list(range(100)), "counts": [1] * 100}))
    assert long.startswith("AutoPlan(prior={'lengths': [0, 1, 2") and long.endswith("...)") and len(long) < 90


# ------------------------------------------------------------------------------ the same batches either way


def group(data, **kwargs):
    return group_by_length(Source(data), **{"batch_size": 4, "buffer_size": 64, "seed": 3, **kwargs})


SAME_GROUP = [
    ("fixed", {"buckets": (16, 48, 200)}, {"plan": FixedPlan((16, 48, 200))}),
    ("fixed, a Buckets", {"buckets": Buckets((16, 48), overflow="truncate")},
     {"plan": FixedPlan(Buckets((16, 48), overflow="truncate"))}),
    ("fixed, multiple_of", {"buckets": [16, 48, 200], "multiple_of": 8},
     {"plan": FixedPlan([16, 48, 200]), "multiple_of": 8}),
    ("learned", {"max_buckets": 3}, {"plan": LearnedPlan(3)}),
    ("learned, prior", {"max_buckets": 2, "prior": OBS, "multiple_of": 4},
     {"plan": LearnedPlan(2, prior=OBS), "multiple_of": 4}),
    ("learned from costs", COSTS, {"plan": LearnedPlan("auto"), "costs": Costs(**COSTS)}),
    ("costs alone", COSTS, {"costs": Costs(**COSTS)}),
    ("costs and prior", {**COSTS, "prior": OBS}, {"costs": Costs(**COSTS), "prior": OBS}),
    ("token budget", {"max_buckets": 3, "token_budget": 256, "batch_size": None},
     {"plan": LearnedPlan(3), "token_budget": 256, "batch_size": None}),
]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("name, keywords, objects", SAME_GROUP, ids=[c[0] for c in SAME_GROUP])
def test_group_by_length_yields_the_same_batches_either_way(name, keywords, objects, shuffle):
    data = examples()
    old, new = group(data, shuffle=shuffle, **keywords), group(data, shuffle=shuffle, **objects)
    want = drain(old)
    assert want and drain(new) == want
    assert new.plan == old.plan and new.shapes == old.shapes and new.truncated == old.truncated


@pytest.mark.parametrize("strategy", ["bucket", "auto"])
@pytest.mark.parametrize("compile_s", [0.5, 0.001])
def test_the_online_planner_yields_the_same_batches_and_decisions_either_way(strategy, compile_s):
    data = examples(200, seed=2)
    clocks = Clock(compile_s), Clock(compile_s)
    old = group(data, strategy=strategy, clock=clocks[0], max_shapes=6, prior=OBS)
    new = group(data, strategy=strategy, plan=AutoPlan(clock=clocks[1], max_shapes=6, prior=OBS))
    want = drain(old, clocks[0])
    assert want and drain(new, clocks[1]) == want
    assert [str(d) for d in new.decisions] == [str(d) for d in old.decisions] and old.decisions
    assert new.plan == old.plan and new.max_shapes == old.max_shapes == 6
    if strategy == "auto":
        assert new.strategy == old.strategy
        assert new.explain() == old.explain()


def test_strategy_auto_packs_and_buckets_the_same_either_way():
    """A step whose cost grows like its length packs; one that grows like its square, with long
    examples, buckets: both, the same through AutoPlan as through the keywords."""
    seen = set()
    for step in (linear, lambda length: 1e-4 * length * length):
        data = examples(300, seed=5)
        clocks = Clock(2.0, step), Clock(2.0, step)
        old = group(data, strategy="auto", clock=clocks[0], buffer_size=4096)
        new = group(data, strategy="auto", plan=AutoPlan(clock=clocks[1]), buffer_size=4096)
        want = drain(old, clocks[0])
        assert drain(new, clocks[1]) == want and new.strategy == old.strategy
        seen.add(old.strategy)
    assert seen == {"pack", "bucket"}, seen


def test_strategy_pack_takes_no_plan_and_runs_as_before_without_one():
    data = examples()
    want = drain(group(data, strategy="pack", row_length=200))
    assert drain(group(data, strategy="pack", row_length=200, plan=None, costs=None)) == want


SAME_BUCKETED = [
    ("fixed", {"buckets": (16, 48, 96)}, {"plan": FixedPlan((16, 48, 96))}),
    ("learned", {"max_buckets": 2, "warmup": 4}, {"plan": LearnedPlan(2), "warmup": 4}),
    ("learned, prior", {"max_buckets": 2, "prior": OBS, "multiple_of": 8},
     {"plan": LearnedPlan(2, prior=OBS), "multiple_of": 8}),
]


@pytest.mark.parametrize("name, keywords, objects", SAME_BUCKETED, ids=[c[0] for c in SAME_BUCKETED])
def test_bucketed_yields_the_same_batches_either_way(name, keywords, objects):
    data = ragged_batches()
    old, new = bucketed(Source(data), **keywords), bucketed(Source(data), **objects)
    want = drain(old)
    assert want and drain(new) == want and new.plan == old.plan and new.shapes == old.shapes


def test_bucketed_online_yields_the_same_batches_and_decisions_either_way():
    data = ragged_batches(60)
    clocks = Clock(0.05), Clock(0.05)
    old = bucketed(Source(data), clock=clocks[0], max_shapes=5)
    new = bucketed(Source(data), plan=AutoPlan(clock=clocks[1], max_shapes=5))
    want = drain(old, clocks[0])
    assert want and drain(new, clocks[1]) == want
    assert [str(d) for d in new.decisions] == [str(d) for d in old.decisions] and old.decisions


def test_grain_dataset_takes_the_objects_and_resumes_a_state_of_the_keywords():
    grain = pytest.importorskip("grain")
    from shapewatch.buckets.grain import GroupByLengthIterDataset

    data = examples(80)

    def dataset(**kwargs):
        parent = grain.MapDataset.source(data).to_iter_dataset()
        return GroupByLengthIterDataset(parent, batch_size=4, buffer_size=32, **kwargs)

    old, new = dataset(max_buckets=3), dataset(plan=LearnedPlan(3))
    assert "plan=LearnedPlan(3)" in str(new)
    whole = [plain(b) for b in old]
    assert [plain(b) for b in new] == whole
    it = iter(old)
    first = [plain(next(it)) for _ in range(5)]
    again = iter(new)
    again.set_state(it.get_state())
    assert first + [plain(b) for b in again] == whole
    with pytest.raises(ValueError, match=r"plan=LearnedPlan\(3\) and max_buckets=3 both say how to plan"):
        dataset(plan=LearnedPlan(3), max_buckets=3)
    with pytest.raises(ValueError, match=r"strategy='pack'\) plans no buckets: plan=FixedPlan\(\(8,\)\)"):
        dataset(plan=FixedPlan((8,)), strategy="pack")


# ------------------------------------------------------------------------------ refused when made

KEYWORD_OF = {"buckets": (4, 10), "max_buckets": 3, "prior": OBS, "max_shapes": 4, "compile_records": lambda: [],
              "clock": lambda: 0.0, "compile_seconds": 1.0, "steps": 10, "step_seconds": 0.01}


@pytest.mark.parametrize("keyword", list(KEYWORD_OF))
@pytest.mark.parametrize("plan", [FixedPlan((4, 10)), LearnedPlan(3), AutoPlan()], ids=repr)
def test_a_plan_object_with_a_keyword_it_covers_is_refused_naming_both(plan, keyword):
    src = Source(examples(10))
    value = KEYWORD_OF[keyword]
    with pytest.raises(ValueError) as caught:
        group_by_length(src, batch_size=2, plan=plan, **{keyword: value})
    msg = str(caught.value)
    assert msg.startswith(f"[shapewatch] group_by_length: plan={plan!r} and {keyword}=") and "both say how to plan" in msg
    assert "; fix: " in msg and not isinstance(caught.value, TypeError), msg
    assert src.taken == 0


@pytest.mark.parametrize("keyword", ["compile_seconds", "steps", "step_seconds"])
def test_costs_with_a_number_keyword_is_refused_naming_both(keyword):
    src = Source(examples(10))
    with pytest.raises(ValueError, match=rf"costs=Costs\(.*\) and {keyword}=.* both say how to plan \({keyword}= is "
                                         rf"Costs\({keyword}=\)\); fix: "):
        group_by_length(src, batch_size=2, costs=Costs(**COSTS), **{keyword: 1.0})
    assert src.taken == 0


@pytest.mark.parametrize("keyword", ["buckets", "max_buckets", "prior", "max_shapes", "clock"])
def test_bucketed_refuses_a_plan_object_with_a_keyword_it_covers(keyword):
    src = Source(ragged_batches())
    with pytest.raises(ValueError, match=rf"^\[shapewatch\] bucketed: plan=AutoPlan\(\) and {keyword}=.* both say"):
        bucketed(src, plan=AutoPlan(), **{keyword: KEYWORD_OF[keyword]})
    assert src.taken == 0


IGNORED = [
    ({"plan": FixedPlan((4, 10)), "costs": Costs(**COSTS)}, "plan=FixedPlan((4, 10)) is a fixed plan"),
    ({"plan": LearnedPlan(3), "costs": Costs(**COSTS)}, "plan=LearnedPlan(3) plans once with propose()"),
    ({"plan": AutoPlan(max_shapes=4), "costs": Costs(**COSTS)}, "plan=AutoPlan(max_shapes=4) plans online"),
    ({"buckets": (4, 10), "costs": Costs(**COSTS)}, "buckets=(4, 10) is a fixed plan"),
    ({"max_buckets": 3, "costs": Costs(**COSTS)}, "max_buckets=3 plans once with propose()"),
    ({"max_shapes": 4, "costs": Costs(**COSTS)}, "max_shapes=4 is an option of the online planner"),
    ({"plan": FixedPlan(Buckets((4, 10))), "multiple_of": 2}, "its Buckets' own multiple_of=1 applies"),
]


@pytest.mark.parametrize("kwargs, mode", IGNORED, ids=[m for _, m in IGNORED])
def test_an_object_the_plan_would_ignore_is_refused_when_made(kwargs, mode):
    src = Source(examples(10))
    with pytest.raises(ValueError) as caught:
        group_by_length(src, batch_size=2, **kwargs)
    msg = str(caught.value)
    named = f"costs={kwargs['costs']!r}" if "costs" in kwargs else "multiple_of=2"
    assert msg.startswith(f"[shapewatch] group_by_length: {named} would be ignored: ") and mode in msg, msg
    assert "; fix: " in msg and not isinstance(caught.value, TypeError)
    assert src.taken == 0


def test_a_plan_learned_from_costs_needs_them():
    src = Source(examples(10))
    with pytest.raises(ValueError, match=r"plan=LearnedPlan\('auto'\) chooses the number of buckets from costs given "
                                         r"by hand, and costs= is missing; fix: pass costs=Costs\("):
        group_by_length(src, batch_size=2, plan=LearnedPlan("auto"))
    with pytest.raises(ValueError, match=r"^\[shapewatch\] bucketed: plan=LearnedPlan\('auto'\) would choose the number "
                                         r"of buckets from costs given by hand, which bucketed does not take; fix: "):
        bucketed(src, plan=LearnedPlan("auto"))
    with pytest.raises(TypeError, match="costs"):
        bucketed(src, plan=LearnedPlan("auto"), costs=Costs(**COSTS))  # type: ignore[call-arg]
    assert src.taken == 0


@pytest.mark.parametrize("kwargs, named", [({"plan": FixedPlan((4, 10))}, "plan=FixedPlan((4, 10))"),
                                           ({"plan": AutoPlan()}, "plan=AutoPlan()"),
                                           ({"costs": Costs(**COSTS)}, "costs=Costs(")])
def test_strategy_pack_refuses_the_objects(kwargs, named):
    src = Source(examples(10))
    with pytest.raises(ValueError) as caught:
        group_by_length(src, batch_size=2, strategy="pack", **kwargs)
    msg = str(caught.value)
    assert msg.startswith(f"[shapewatch] group_by_length(strategy='pack') plans no buckets: {named}"), msg
    assert "strategy='bucket' only; fix: " in msg and src.taken == 0


@pytest.mark.parametrize("kwargs, named", [({"plan": FixedPlan((4, 10))}, "plan=FixedPlan((4, 10))"),
                                           ({"plan": LearnedPlan(3)}, "plan=LearnedPlan(3)"),
                                           ({"plan": AutoPlan(), "costs": Costs(**COSTS)}, "costs=Costs(")])
def test_strategy_auto_takes_an_auto_plan_only(kwargs, named):
    src = Source(examples(10))
    with pytest.raises(ValueError) as caught:
        group_by_length(src, batch_size=2, strategy="auto", **kwargs)
    msg = str(caught.value)
    assert msg.startswith("[shapewatch] group_by_length(strategy='auto') chooses the row length and the buckets "
                          f"from measured costs: {named}"), msg
    assert "would be ignored; fix: " in msg and src.taken == 0
    with pytest.raises(ValueError, match=r"plan=AutoPlan\(\) and buckets=\(4, 10\) both say how to plan"):
        group_by_length(src, batch_size=2, strategy="auto", plan=AutoPlan(), buckets=(4, 10))
    with pytest.raises(ValueError, match=r"row_length=16 would be ignored"):
        group_by_length(src, batch_size=2, strategy="auto", plan=AutoPlan(), row_length=16)


@pytest.mark.parametrize("loader", ["group", "bucketed"])
@pytest.mark.parametrize("value, hint", [(Buckets((4, 10)), "plan=FixedPlan(them)"), ((4, 10), "plan=FixedPlan(them)"),
                                         (4, "plan=LearnedPlan(it)"), ("auto", ""), ({"max_buckets": 3}, "")])
def test_a_plan_that_is_no_plan_object_is_a_type_error_naming_it(loader, value, hint):
    src = Source(examples(10))
    with pytest.raises(TypeError) as caught:
        if loader == "group":
            group_by_length(src, batch_size=2, plan=value)
        else:
            bucketed(src, plan=value)
    msg = str(caught.value)
    name = "group_by_length" if loader == "group" else "bucketed"
    assert msg.startswith(f"[shapewatch] {name}: plan must be None, a FixedPlan, a LearnedPlan or an AutoPlan; got "
                          f"{type(value).__name__} {repr(value)[:40]}"), msg
    assert isinstance(caught.value, ValueError) and hint in msg and src.taken == 0


@pytest.mark.parametrize("value", [COSTS, (2.0, 10, 0.05), 2.0])
def test_costs_that_are_no_costs_object_are_a_type_error_naming_them(value):
    with pytest.raises(TypeError) as caught:
        group_by_length(Source(examples(10)), batch_size=2, costs=value)
    msg = str(caught.value)
    assert msg.startswith(f"[shapewatch] group_by_length: costs must be None or a Costs; got {type(value).__name__} "
                          f"{repr(value)[:40]}"), msg
    assert isinstance(caught.value, ValueError)


TAKEN = [
    {"plan": FixedPlan((4, 10)), "multiple_of": 2},
    {"plan": FixedPlan(Buckets((4, 10), multiple_of=2)), "multiple_of": 2},
    {"plan": LearnedPlan(2), "max_buckets": "auto"},  # the keyword's default is no keyword
    {"plan": LearnedPlan(2, prior=LengthObserver([3, 30])), "multiple_of": 4},
    {"plan": AutoPlan(max_shapes=4, clock=lambda: 0.0, compile_records=lambda: [], prior=OBS)},
    {"plan": LearnedPlan("auto", prior=OBS), "costs": Costs(**COSTS)},
    {"costs": Costs(**COSTS), "multiple_of": 2},
]


@pytest.mark.parametrize("kwargs", TAKEN, ids=[re.sub(r" at 0x[0-9a-f]+", "", repr(k)) for k in TAKEN])
def test_combinations_each_plan_uses_are_taken(kwargs):
    data = [np.arange(n) for n in (3, 5, 9)]
    out = list(group_by_length(Source(data), batch_size=2, **kwargs))
    assert sum(int(np.sum(b.mask)) for b in out) == 3 + 5 + 9


def test_a_refusal_reads_nothing_and_leaves_the_keywords_messages_as_they_were():
    src = Source(examples(10))
    with pytest.raises(ValueError) as caught:
        group_by_length(src, batch_size=1, buckets=(4, 10), max_shapes=1)
    assert str(caught.value) == ("[shapewatch] group_by_length: max_shapes=1 would be ignored: buckets= is a fixed plan: "
                                 "nothing is planned; fix: leave it out, or buckets= out to plan")
    with pytest.raises(ValueError, match=r"max_buckets='auto' takes all three numbers .* missing steps, step_seconds"):
        group_by_length(src, batch_size=1, compile_seconds=1.0)
    assert src.taken == 0


# ------------------------------------------------------------------------------ state_dict either way

STATES = [
    ("fixed", {"buckets": (16, 48, 200)}, {"plan": FixedPlan((16, 48, 200))}),
    ("learned", {"max_buckets": 3, "prior": OBS}, {"plan": LearnedPlan(3, prior=OBS)}),
    ("learned from costs", COSTS, {"plan": LearnedPlan("auto"), "costs": Costs(**COSTS)}),
    ("online", {"max_shapes": 6}, {"plan": AutoPlan(max_shapes=6)}),
    ("strategy auto", {"strategy": "auto", "max_shapes": 6}, {"strategy": "auto", "plan": AutoPlan(max_shapes=6)}),
]


@pytest.mark.filterwarnings(FLUSH)
@pytest.mark.parametrize("name, keywords, objects", STATES, ids=[c[0] for c in STATES])
def test_a_loader_made_with_objects_resumes_a_state_saved_by_one_made_with_keywords(name, keywords, objects):
    data = examples(150, seed=4)
    online = "max_shapes" in keywords
    clocks = [Clock() for _ in range(4)]

    def make(options, clock):
        extra = {} if not online else {"clock": clock} if "plan" not in options else {}
        if online and "plan" in options:
            options = {**options, "plan": dataclasses.replace(options["plan"], clock=clock)}
        return group(data, buffer_size=32, **options, **extra)

    whole = drain(make(keywords, clocks[0]), clocks[0])
    first = make(keywords, clocks[1])
    taken = drain(first, clocks[1], limit=4)
    state = first.state_dict()
    assert make(objects, Clock()).state_dict()["arguments"] == make(keywords, Clock()).state_dict()["arguments"]
    by_objects, by_keywords = make(objects, clocks[2]), make(keywords, clocks[3])
    by_objects.load_state_dict(pickle.loads(pickle.dumps(state)))
    by_keywords.load_state_dict(pickle.loads(pickle.dumps(state)))
    rest = drain(by_objects, clocks[2])
    assert rest == drain(by_keywords, clocks[3])
    if not online:  # the same batches as the run never stopped (online, later decisions follow the timings)
        assert taken + rest == whole
    assert by_objects.state_dict()["arguments"] == by_keywords.state_dict()["arguments"]


@pytest.mark.parametrize("keywords, objects", [({"buckets": (16, 48, 96)}, {"plan": FixedPlan((16, 48, 96))}),
                                               ({"max_buckets": 2}, {"plan": LearnedPlan(2)})])
def test_bucketed_made_with_objects_resumes_a_state_saved_with_keywords(keywords, objects):
    data = ragged_batches()
    whole = drain(bucketed(Source(data), warmup=4, **keywords))
    first = bucketed(Source(data), warmup=4, **keywords)
    taken = drain(first, limit=6)
    state = first.state_dict()
    second = bucketed(Source(data), warmup=4, **objects)
    second.load_state_dict(state)
    assert taken + drain(second) == whole


def test_a_state_of_other_arguments_is_still_refused_through_the_objects():
    data = examples(60)
    first = group(data, max_buckets=3)
    drain(first, limit=2)
    state = first.state_dict()
    with pytest.raises(ValueError, match=r"state\['arguments'\]\['max_buckets'\]"):
        group(data, plan=LearnedPlan(2)).load_state_dict(state)
