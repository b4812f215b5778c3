"""Big models: signatures interned over a shared layout, and the compact report (schema 2)."""

from __future__ import annotations

import json
import pickle

import jax.numpy as jnp
import pytest

import shapewatch
from shapewatch._monitor.signature import explain
from shapewatch._reports.load import ReportFileError, load_report, normalise_report
from shapewatch._reports.merge import diff_reports, merge_dicts
from shapewatch._reports.render import render_text


def params(n, extra=()):
    return {**{f"w{i:03d}": jnp.ones((2,)) for i in range(n)}, **{k: jnp.ones((3,)) for k in extra}}


def step(p, x):
    return x.sum()


def test_two_misses_with_one_structure_share_it_and_store_only_what_changed():
    f = shapewatch.watched_jit(step)
    p = params(50)
    f(p, jnp.ones(3))
    f(p, jnp.ones(4))
    first, second = (m.signature for m in shapewatch.misses(f))
    assert first.layout is second.layout
    assert len(first.layout.paths) == 51 and first.layout.paths[0] == "p['w000']"
    positions, _ = second.delta
    assert positions.tolist() == [50]  # only x differs from the first signature of this structure
    assert second.array(50) == shapewatch.ArrayLeaf("x", (4,), "float32", False)
    assert [a.path for a in second.arrays] == list(first.layout.paths)
    assert shapewatch.misses(f)[1].explanation == "x.shape[0]: 3 -> 4"


def test_two_functions_of_one_structure_share_one_layout():
    f, g = shapewatch.watched_jit(step), shapewatch.watched_jit(lambda p, x: x.sum())
    f(params(10), jnp.ones(3))
    g(params(10), jnp.ones(5))
    assert shapewatch.misses(f)[0].signature.layout is shapewatch.misses(g)[0].signature.layout


def test_a_structure_change_is_explained_as_before():
    f = shapewatch.watched_jit(step)
    f(params(20), jnp.ones(3))
    f(params(20, extra=("bias",)), jnp.ones(3))
    f(params(20, extra=("bias",)), jnp.ones(6))
    ms = shapewatch.misses(f)
    assert ms[0].signature.layout is not ms[1].signature.layout
    assert ms[1].explanation == "p: keys " + "{" + ",".join(repr(f"w{i:03d}") for i in range(20)) + "} -> " + \
        "{'bias'," + ",".join(repr(f"w{i:03d}") for i in range(20)) + "}"
    assert ms[2].explanation == "x.shape[0]: 3 -> 6"


def test_the_nearest_signature_has_the_fewest_changes_and_is_the_latest_on_a_tie():
    def sig(*shapes):
        return shapewatch.Signature(tuple(shapewatch.ArrayLeaf(f"x{i}", s, "float32", False)
                                          for i, s in enumerate(shapes)), (), (("x", "PyTreeDef([*, *, *])"),))

    a, b, c = sig((1,), (2,), (3,)), sig((9,), (9,), (3,)), sig((1,), (2,), (4,))
    new = sig((9,), (9,), (4,))
    assert [ch.text for ch in explain(new, [a, b, c])] == ["x2.shape[0]: 3 -> 4"]
    assert [ch.text for ch in explain(sig((1,), (9,), (3,)), [a, b])] == ["x0.shape[0]: 9 -> 1"]  # a tie: the latest
    assert [ch.text for ch in explain(sig((1,), (2,), (9,)), [b, c, a])] == ["x2.shape[0]: 3 -> 9"]
    assert [ch.text for ch in explain(c, [a, c])] == ["identical signature: retraced for a reason outside the arguments"]


def test_a_signature_read_from_a_trace_equals_one_built_by_hand_and_survives_pickling():
    f = shapewatch.watched_jit(step)
    f({"w": jnp.ones((2,))}, jnp.ones(3, jnp.int32))
    traced = shapewatch.misses(f)[0].signature
    placed = [a.placement for a in traced.arrays]  # read from the call's arguments: both on the default device
    assert placed[0] is placed[1] and not placed[0].committed and placed[0].mesh == ""
    by_hand = shapewatch.Signature(
        (shapewatch.ArrayLeaf("p['w']", (2,), "float32", False, placed[0]),
         shapewatch.ArrayLeaf("x", (3,), "int32", False, placed[1])),
        (), traced.structure)
    assert traced == by_hand and hash(traced) == hash(by_hand)
    again = pickle.loads(pickle.dumps(traced))
    assert again == traced and again.arrays == traced.arrays
    with pytest.raises(AttributeError):
        traced.keywords = ("x",)


def test_the_saved_report_stores_each_structure_once_and_misses_refer_to_signatures(tmp_path):
    f = shapewatch.watched_jit(step)
    p = params(30)
    for n in (3, 4, 5):
        f(p, jnp.ones(n))
    data = json.loads(shapewatch.report().to_json())
    assert data["schema"] == "shapewatch.report/2"
    assert len(data["structures"]) == 1 and len(data["signatures"]) == 3
    assert json.dumps(data).count("p['w007']") == 1
    assert [m["signature"] for m in data["functions"][0]["misses"]] == [0, 1, 2]
    assert data["signatures"][2]["changed"] == [[30, data["signatures"][2]["changed"][0][1]]]


def test_both_schemas_load_to_one_form_that_show_diff_and_merge_read(tmp_path):
    f = shapewatch.watched_jit(step)
    for n in (3, 4, 7):
        f(params(5), jnp.ones(n))
    rep = shapewatch.report()
    v1, v2 = tmp_path / "v1.json", tmp_path / "v2.json"
    v1.write_text(json.dumps(rep.to_dict()))  # the file an earlier shapewatch wrote
    rep.to_json(v2)
    old, new = load_report(str(v1)), load_report(str(v2))
    assert json.loads(v1.read_text())["schema"] == "shapewatch.report/1"
    assert json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)
    assert normalise_report(rep.to_dict(compact=True)) == normalise_report(rep.to_dict()) == old
    assert render_text(old, "full") == render_text(new, "full") == rep.to_text("full")
    assert "gone: (no cause disappeared)" in diff_reports(old, new)
    assert merge_dicts([("a", old), ("b", new)])["divergences"] == []
    arrays = new["functions"][0]["misses"][2]["signature"]["arrays"]
    placement = arrays[-1].pop("placement")  # read from the call's argument: uncommitted, one device
    assert arrays[-1] == {"path": "x", "shape": [7], "dtype": "float32", "weak_type": False}
    assert placement["committed"] is False and placement["mesh"] == ""


def test_a_damaged_schema_2_report_is_an_error_naming_the_field(tmp_path):
    f = shapewatch.watched_jit(step)
    f(params(2), jnp.ones(3))
    data = shapewatch.report().to_dict(compact=True)
    data["functions"][0]["misses"][0]["signature"] = 7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ReportFileError, match=r"bad.json: not a complete shapewatch.report/2 report: functions\[0\] "
                                              r"misses\[0\]\[\"signature\"\] is 7"):
        load_report(str(bad))
