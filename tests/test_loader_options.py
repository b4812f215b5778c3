"""Loader options: wrong-type arguments and options a planning mode would ignore, for
``group_by_length`` and ``bucketed``.

Plain tests pin what holds, and the defects found (each fixed with its test).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from shapewatch.buckets import Buckets, bucketed, group_by_length
from tests._sources import Source

DOC = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "bucket-a-loader.md"
OBS = {"lengths": [3], "counts": [1]}  # a saved LengthObserver, as prior=
NUMBERS = {"compile_seconds": 1.0, "steps": 10, "step_seconds": 0.01}


def tokens(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


def examples() -> Source:
    return Source(tokens(n) for n in (3, 5, 9))


def batches() -> Source:
    return Source(np.ones((2, n)) for n in (3, 5, 9))


def make(loader: str, src: Source, **kwargs):
    if loader == "group":
        return group_by_length(src, **{"batch_size": 2, **kwargs})
    return bucketed(src, **kwargs)


def assert_type_error(exc: BaseException, name: str, value) -> None:
    assert isinstance(exc, TypeError) and isinstance(exc, ValueError), type(exc).__mro__
    msg = str(exc)
    assert msg.startswith("[shapewatch] "), msg
    assert name in msg and type(value).__name__ in msg and repr(value) in msg, msg


# ------------------------------------------------------------------------------ what holds

WRONG = {
    "float": 2.0, "bool": True, "np.float64": np.float64(2.0), "np.bool_": np.bool_(True),
    "str": "2", "None": None, "list": [2], "tuple": (2,), "array": np.array([2]), "callable": len,
}
GROUP_INTS = ["batch_size", "token_budget", "buffer_size", "multiple_of", "seed", "max_buckets", "max_shapes"]
BUCKETED_INTS = ["axis", "multiple_of", "warmup", "max_buckets", "max_shapes"]
OPTIONAL = {"max_shapes"}  # None is its default
NEEDS_ONE = {"batch_size", "token_budget"}  # None of both is a different (ValueError) message


@pytest.mark.parametrize("label", list(WRONG))
@pytest.mark.parametrize("loader, name", [("group", n) for n in GROUP_INTS] + [("bucketed", n) for n in BUCKETED_INTS])
def test_wrong_type_for_an_int_is_a_type_error_and_a_value_error(loader, name, label):
    value = WRONG[label]
    if value is None and (name in OPTIONAL or name in NEEDS_ONE):
        pytest.skip("None is accepted (default) or a different error")
    src = examples() if loader == "group" else batches()
    kwargs = {name: value}
    if loader == "group" and name == "token_budget":
        kwargs["batch_size"] = None
    with pytest.raises(TypeError) as caught:
        make(loader, src, **kwargs)
    assert_type_error(caught.value, name, value)
    assert src.taken == 0


@pytest.mark.parametrize("value", [np.int64(2), np.int32(2), np.uint8(2)])
@pytest.mark.parametrize("loader, name", [("group", n) for n in GROUP_INTS] + [("bucketed", n) for n in BUCKETED_INTS])
def test_numpy_ints_work_where_an_int_is_expected(loader, name, value):
    src = examples() if loader == "group" else batches()
    kwargs = {name: value}
    if name == "axis":
        kwargs = {"axis": type(value)(1)}
    if name == "buffer_size":
        kwargs = {"buffer_size": type(value)(8)}  # one full batch per bucket fits: no warning
    out = list(make(loader, src, **kwargs))
    assert out and src.taken == 3


@pytest.mark.parametrize(
    "loader, name, value",
    [("group", "length_of", 3), ("group", "length_of", None), ("group", "length_of", "len"),
     ("bucketed", "length_of", 3), ("group", "remainder", 1), ("group", "remainder", None),
     ("group", "compile_records", 3), ("group", "compile_records", []), ("bucketed", "compile_records", "x"),
     ("group", "buckets", 8), ("group", "buckets", 8.0), ("group", "buckets", True), ("bucketed", "buckets", 8)],
)
def test_wrong_type_choices_callables_and_plans_are_type_errors(loader, name, value):
    src = examples() if loader == "group" else batches()
    with pytest.raises(TypeError) as caught:
        make(loader, src, **{name: value})
    assert_type_error(caught.value, name, value)
    assert src.taken == 0


def test_a_wrong_value_of_the_right_type_stays_a_plain_value_error():
    with pytest.raises(ValueError, match=r"unknown remainder 'PAD'") as caught:
        group_by_length(examples(), batch_size=2, remainder="PAD")
    assert not isinstance(caught.value, TypeError)
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1; got 0") as caught:
        group_by_length(examples(), batch_size=0)
    assert not isinstance(caught.value, TypeError)


IGNORED = [
    ("group", {"buckets": (4, 10), "max_buckets": 3}, "max_buckets=3", "buckets= is a fixed plan"),
    ("group", {"buckets": (4, 10), "max_buckets": np.int64(3)}, "max_buckets=np.int64(3)", "buckets= is a fixed plan"),
    ("group", {"buckets": (4, 10), "prior": OBS}, "prior=", "buckets= is a fixed plan"),
    ("group", {"buckets": (4, 10), **NUMBERS}, "compile_seconds=1.0, steps=10, step_seconds=0.01", "buckets= is a fixed plan"),
    ("group", {"buckets": (4, 10), "steps": 10}, "steps=10", "buckets= is a fixed plan"),
    ("group", {"buckets": (4, 10), "clock": lambda: 0.0}, "clock=", "buckets= is a fixed plan"),
    ("group", {"buckets": (4, 10), "compile_records": lambda: []}, "compile_records=", "buckets= is a fixed plan"),
    ("group", {"buckets": Buckets((4, 10)), "multiple_of": 2}, "multiple_of=2", "buckets= is a fixed plan"),
    ("group", {"max_buckets": 2, **NUMBERS}, "compile_seconds=1.0", "max_buckets=2 plans once"),
    ("group", {"max_buckets": 2, "compile_seconds": 1.0}, "compile_seconds=1.0", "max_buckets=2 plans once"),
    ("group", {"max_buckets": 2, "max_shapes": 3}, "max_shapes=3", "max_buckets=2 plans once"),
    ("group", {**NUMBERS, "clock": lambda: 0.0}, "clock=", "compile_seconds, steps and step_seconds plan once"),
    ("group", {**NUMBERS, "compile_records": lambda: []}, "compile_records=", "compile_seconds, steps and step_seconds"),
    ("group", {**NUMBERS, "max_shapes": 4}, "max_shapes=4", "compile_seconds, steps and step_seconds plan once"),
    ("bucketed", {"buckets": (4, 10), "max_buckets": 3}, "max_buckets=3", "buckets= is a fixed plan"),
    ("bucketed", {"buckets": (4, 10), "prior": OBS}, "prior=", "buckets= is a fixed plan"),
    ("bucketed", {"buckets": (4, 10), "max_shapes": 3}, "max_shapes=3", "buckets= is a fixed plan"),
    ("bucketed", {"buckets": Buckets((4, 10)), "multiple_of": 2}, "multiple_of=2", "buckets= is a fixed plan"),
    ("bucketed", {"max_buckets": 2, "clock": lambda: 0.0}, "clock=", "max_buckets=2 plans once"),
]


@pytest.mark.parametrize("loader, kwargs, named, mode", IGNORED)
def test_an_option_the_mode_ignores_is_refused_when_made(loader, kwargs, named, mode):
    src = examples() if loader == "group" else batches()
    with pytest.raises(ValueError) as caught:
        make(loader, src, **kwargs)
    msg = str(caught.value)
    assert msg.startswith(f"[shapewatch] {'group_by_length' if loader == 'group' else 'bucketed'}: ")
    assert named in msg and "would be ignored" in msg and mode in msg and "; fix: " in msg, msg
    assert src.taken == 0


@pytest.mark.parametrize("kwargs", [{"buckets": (4, 10)}, {"steps": 10}, {"max_buckets": 3}, {"prior": OBS},
                                    {"clock": lambda: 0.0}])
def test_pack_refuses_bucket_only_options_when_made(kwargs):
    src = examples()
    with pytest.raises(ValueError, match=r"strategy='pack'\) plans no buckets: .* strategy='bucket' only; fix: "):
        group_by_length(src, batch_size=2, strategy="pack", **kwargs)
    assert src.taken == 0


LEGIT = [
    ("group", {"buckets": (4, 10), "max_buckets": "auto"}),
    ("group", {"buckets": (4, 10), "max_buckets": np.str_("auto")}),
    ("group", {"buckets": (4, 10), "multiple_of": 2}),
    ("group", {"buckets": Buckets((4, 10), multiple_of=2), "multiple_of": 2}),
    ("group", {"buckets": Buckets((4, 10), multiple_of=2)}),
    ("group", {"max_buckets": 2, "prior": OBS}),
    ("group", {"max_buckets": 2, "multiple_of": 4}),
    ("group", {"max_buckets": 2, "prior": None, "max_shapes": None, "clock": None}),
    ("group", {**NUMBERS, "prior": OBS}),
    ("group", {"compile_seconds": np.float64(1.0), "steps": np.int64(10), "step_seconds": np.float32(0.01)}),
    ("group", {"max_shapes": 4, "clock": lambda: 0.0, "compile_records": lambda: [], "prior": OBS}),
    ("group", {"strategy": "pack", "max_buckets": "auto"}),
    ("group", {"strategy": "pack", "row_length": np.int64(16)}),
    ("bucketed", {"buckets": (4, 10), "warmup": 3}),
    ("bucketed", {"buckets": (4, 10), "max_buckets": "auto"}),
    ("bucketed", {"max_buckets": 2, "prior": OBS}),
    ("bucketed", {"max_buckets": 2, "warmup": 2, "multiple_of": 2}),
    ("bucketed", {"max_shapes": 4, "clock": lambda: 0.0, "compile_records": lambda: [], "prior": OBS}),
]


@pytest.mark.parametrize("loader, kwargs", LEGIT)
def test_combinations_each_mode_uses_are_taken(loader, kwargs):
    src = examples() if loader == "group" else batches()
    out = list(make(loader, src, **kwargs))
    assert src.taken == 3
    if loader == "group":
        assert sum(int(np.sum(b.mask)) for b in out) == 3 + 5 + 9
    else:
        assert [b.data.shape[0] for b in out] == [2, 2, 2]


def test_the_docs_example_prints_what_the_docs_show():
    text = DOC.read_text(encoding="utf-8")
    shown = re.search(r"max_shapes=1\)\nexcept ValueError as e:\n    print\(e\)\n```\n```text\n(.*)\n```", text).group(1)
    with pytest.raises(ValueError) as caught:
        group_by_length([[1, 2, 3]], batch_size=1, buckets=(4, 10), max_shapes=1)
    assert str(caught.value) == shown


@pytest.mark.parametrize("kwargs, name, value", [({"batch_size": 2.0}, "batch_size", 2.0),
                                                 ({"batch_size": 1, "seed": "0"}, "seed", "0"),
                                                 ({"batch_size": 1, "length_of": 3}, "length_of", 3)])
def test_the_docs_wrong_type_examples_are_type_and_value_errors(kwargs, name, value):
    with pytest.raises(TypeError) as caught:
        group_by_length([[1, 2, 3]], **kwargs)
    assert_type_error(caught.value, name, value)


def test_a_refused_loader_leaves_the_source_to_a_new_one():
    src = examples()
    with pytest.raises(ValueError):
        group_by_length(src, batch_size=2, buckets=(4, 10), max_buckets=3)
    with pytest.raises(TypeError):
        group_by_length(src, batch_size=2.0)
    out = list(group_by_length(src, batch_size=2, buckets=(4, 10), shuffle=False))
    assert sorted(int(n) for b in out for n in b.lengths if n) == [3, 5, 9]


# ------------------------------------------------------------------------------ defects


@pytest.mark.parametrize("name, value", [("compile_seconds", "1"), ("steps", True), ("step_seconds", [0.1]),
                                         ("compile_seconds", -1.0), ("step_seconds", float("nan"))])
def test_bad_cost_numbers_are_refused_when_the_loader_is_made(name, value):
    src = examples()
    with pytest.raises(ValueError, match=rf"^\[shapewatch\] {name} must be a finite number >= 0"):
        group_by_length(src, batch_size=2, **{**NUMBERS, name: value})
    assert src.taken == 0


@pytest.mark.parametrize("loader", ["group", "bucketed"])
@pytest.mark.parametrize("name", ["clock", "prior"])
def test_a_clock_or_prior_of_the_wrong_type_is_a_type_error_when_made(loader, name):
    src = examples() if loader == "group" else batches()
    with pytest.raises(TypeError) as caught:
        make(loader, src, **{name: 3})
    assert_type_error(caught.value, name, 3)


def test_a_falsy_non_callable_clock_is_not_silently_replaced():
    with pytest.raises(TypeError, match=r"clock"):
        group_by_length(examples(), batch_size=2, clock=0)


@pytest.mark.parametrize("kwargs", [{"strategy": 1}, {"strategy": "pack", "row_length": 8.0}])
def test_strategy_and_row_length_type_errors_are_also_value_errors(kwargs):
    with pytest.raises(ValueError):
        group_by_length(examples(), batch_size=2, **kwargs)


@pytest.mark.parametrize("loader", ["group", "bucketed"])
@pytest.mark.parametrize("value", [None, True, "Auto", 2.0])
def test_a_wrong_max_buckets_is_reported_as_itself_whatever_comes_with_it(loader, value):
    src = examples() if loader == "group" else batches()
    with pytest.raises(ValueError) as caught:
        make(loader, src, max_buckets=value, max_shapes=4)
    assert "max_buckets must be" in str(caught.value), str(caught.value)
    assert "would be ignored" not in str(caught.value)


def test_a_wrong_buckets_is_reported_as_itself_whatever_comes_with_it():
    with pytest.raises(TypeError) as caught:
        group_by_length(examples(), batch_size=2, buckets=8, max_buckets=3)
    assert_type_error(caught.value, "buckets", 8)


@pytest.mark.parametrize("value", ["2", 2.0, np.array([1, 2])])
def test_a_wrong_multiple_of_with_a_buckets_plan_is_a_type_error(value):
    with pytest.raises(TypeError) as caught:
        group_by_length(examples(), batch_size=2, buckets=Buckets((4, 10)), multiple_of=value)
    assert_type_error(caught.value, "multiple_of", value)


@pytest.mark.parametrize("loader", ["group", "bucketed"])
def test_a_str_for_buckets_is_a_type_error(loader):
    src = examples() if loader == "group" else batches()
    with pytest.raises(TypeError) as caught:
        make(loader, src, buckets="8")
    assert_type_error(caught.value, "buckets", "8")


@pytest.mark.parametrize("loader, name", [("group", "shuffle"), ("group", "across_processes"),
                                          ("bucketed", "return_mask"), ("bucketed", "across_processes")])
def test_a_str_for_a_bool_option_is_a_type_error(loader, name):
    src = examples() if loader == "group" else batches()
    with pytest.raises(TypeError) as caught:
        make(loader, src, **{name: "False"})
    assert_type_error(caught.value, name, "False")
