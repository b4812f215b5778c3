"""Structure names, code locations and placement merges in reports: one test per defect a
review found.

Real JAX (and Equinox where named) on the CPU, no mocks; each test is one defect found.
"""

from __future__ import annotations

import collections
import functools
import json

import jax
import jax.numpy as jnp
import pytest

import shapewatch
from shapewatch._monitor.registry import code_key

NT = collections.namedtuple("NT", "a b")


def _changes(fn) -> list[str]:
    return [m.explanation for m in shapewatch.misses(fn)[1:]]


def test_namedtuple_field_none_to_array_is_not_an_attribute_change():
    # the namedtuple has fields a and b in both calls; b went from None to an array
    @shapewatch.watched_jit
    def f(t):
        return t.a

    f(NT(jnp.ones(2), None))
    f(NT(jnp.ones(2), jnp.ones(3)))
    assert _changes(f) == ["t.b: None -> float32[3]"]


def test_list_inside_namedtuple_none_to_array_is_not_a_length_change():
    # t.a is a list of 2 in both calls; its second item went from None to an array
    @shapewatch.watched_jit
    def f(t):
        return t.b

    f(NT([jnp.ones(2), None], jnp.ones(1)))
    f(NT([jnp.ones(2), jnp.ones(3)], jnp.ones(1)))
    assert _changes(f) == ["t.a[1]: None -> float32[3]"]


def test_an_equinox_field_none_to_array_is_named_by_field():
    eqx = pytest.importorskip("equinox")

    class M(eqx.Module):
        w: object
        b: object

        def __call__(self, x):
            return self.w * x if self.b is None else self.w * x + self.b

    with shapewatch.watch():
        @eqx.filter_jit
        def forward(model, x):
            return model(x)

    forward(M(jnp.ones(3), None), jnp.ones(3))
    forward(M(jnp.ones(3), jnp.ones(3)), jnp.ones(3))
    assert _changes(forward) == ["model.b: None -> float32[3]"]


def test_code_key_through_wraps_of_a_builtin_keeps_the_wrapper_location():
    # functools.wraps(len) on a Python function: the code that runs is the wrapper's; its
    # location was known before today and is "?" since code_key follows __wrapped__ to len
    wrapper = functools.wraps(len)(lambda x: x)
    assert code_key(wrapper)[3] != "?"
    assert code_key(wrapper)[3].endswith(f":{wrapper.__code__.co_firstlineno}")


def test_merge_names_a_memory_kind_that_differs_on_one_device(tmp_path):
    dev = jax.devices()[0]
    try:
        pinned = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")
        jax.device_put(jnp.ones(1), pinned)
    except ValueError:
        pytest.skip("no pinned_host memory on this CPU backend")
    device = jax.sharding.SingleDeviceSharding(dev, memory_kind="device")

    @shapewatch.watched_jit
    def scale(x):
        return x * 2

    paths = []
    for i, sharding in enumerate((device, pinned)):
        shapewatch.reset()
        scale(jax.device_put(jnp.ones(4), sharding))
        paths.append(str(tmp_path / f"r{i}.json"))
        shapewatch.report().to_json(paths[-1])
    merged = shapewatch.merge_reports(paths) if hasattr(shapewatch, "merge_reports") else None
    if merged is None:
        from shapewatch._reports.merge import merge_reports
        merged = merge_reports(paths)
    assert merged["divergences"], json.dumps(merged, indent=1)
    assert "pinned_host" in merged["divergences"][0]["difference"]


def test_a_report_without_measured_costs_says_so_when_asked_for_auto():
    from shapewatch.buckets import group_by_length, propose

    it = group_by_length([jnp.arange(n) for n in (3, 5, 9)], batch_size=1, max_buckets=2)
    list(it)
    with pytest.raises(ValueError, match=r"the saved report measured no costs: its loader had a fixed plan\); "
                                         r"missing compile_seconds, steps, step_seconds"):
        propose(it.report(), "auto")
