"""The signature index (``_monitor/index.py``) against the rule it stands for and the search it replaced.

The nearest earlier signature is the one of the same structure with the fewest changes, the
latest on a tie; with none of that structure, the one whose structure differs in the fewest
arguments, the latest on a tie. ``explain`` over a :class:`SignatureIndex` is checked here
against that rule computed by brute force, and against the search of the code before the
index (copied below), on random sequences of signatures; then, with real JAX on CPU, the
programs in which the two differed: inputs that are NumPy arrays in one call and device
arrays in another, a keyword flip at an earlier shape, a lowered signature then calls.
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch
from shapewatch._monitor import explain as _explain
from shapewatch._monitor import layout as _layout
from shapewatch._monitor.index import SignatureIndex
from shapewatch._monitor.placement import Placement
from shapewatch._monitor.signature_types import ArrayLeaf, Change, Signature, StaticLeaf, identical


def _differing_counts(layout: _layout.Layout, codes: np.ndarray, idx: np.ndarray,
                     others: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """For each ``(idx, val)`` of ``others`` (deltas of ``layout``), how many leaves differ from ``codes``.

    ``codes`` is a signature's full codes and ``idx`` its own delta positions. A leaf
    differs where the other's delta disagrees with ``codes``, or where only this
    one's delta has it: a few vectorised operations over the deltas, whatever the
    number of leaves.
    """
    k = len(others)
    sizes = np.fromiter((len(i) for i, _ in others), np.int64, count=k)
    if not sizes.sum():
        return np.full(k, len(idx), np.int64)
    owner = np.repeat(np.arange(k), sizes)
    all_idx = np.concatenate([i for i, _ in others])
    all_val = np.concatenate([v for _, v in others])
    disagree = np.bincount(owner, weights=codes[all_idx] != all_val, minlength=k)
    shared = np.bincount(owner, weights=np.isin(all_idx, idx), minlength=k) if idx.size else 0
    return (disagree + len(idx) - shared).astype(np.int64)


# -- the search before the index (``explain`` of the parent of the change), over the same helpers --

def _old_explain(new: Signature, earlier: Sequence[Signature], reason: str | None = None) -> tuple[Change, ...]:
    if not earlier:
        return ()
    best: list[Change] | None = None
    candidates = [s for s in reversed(earlier) if s.structure == new.structure
                  and len(s.layout.paths) == len(new.layout.paths) and len(s.statics) == len(new.statics)]
    codes = new.codes
    same = [s for s in candidates if s.layout is new.layout]
    counts = _differing_counts(new.layout, codes, new.delta[0], [s.delta for s in same]) if same else []
    bounds = {id(s): n for s, n in zip(same, list(counts))}
    for s in candidates:
        if best is not None and bounds.get(id(s), 0) + sum(a != b for a, b in zip(new.statics, s.statics)) >= len(best):
            continue
        c = _explain._leaf_changes(new, s, codes)
        changed = {x.path for x in c}
        c += [x for x in _explain._default_changes(new, s) if x.path not in changed] + _explain._convention_changes(new, s)
        if best is None or len(c) < len(best):
            best = c
        if not best:
            return (identical(reason),)
    if best is not None:
        return tuple(best)

    def mismatched(s: Signature) -> int:
        return len(set(new.structure) ^ set(s.structure)) + len(set(new.defaults) ^ set(s.defaults))

    nearest = min(reversed(earlier), key=mismatched)
    return tuple(_explain._structure_changes(new, nearest) + _explain._convention_changes(new, nearest))


def _rule(new: Signature, earlier: Sequence[Signature], reason: str | None = None) -> tuple[Change, ...] | None:
    """The rule by brute force, for the same structure (None: no signature of it)."""
    best = None
    for s in reversed(earlier):
        if s.structure == new.structure and len(s.layout.paths) == len(new.layout.paths) \
                and len(s.statics) == len(new.statics):
            c = _explain._leaf_changes(new, s)
            changed = {x.path for x in c}
            c += [x for x in _explain._default_changes(new, s) if x.path not in changed] + _explain._convention_changes(new, s)
            if best is None or len(c) < len(best):
                best = c
    if best is None:
        return None
    return (identical(reason),) if not best else tuple(best)


# -- random signatures --------------------------------------------------------------------------

_STRUCTURES = {
    "A": ((("x", "*"), ("y", "*"), ("n", "static")), ["x", "y"], ["n"]),
    "A2": ((("x", "*"), ("y", "*"), ("n", "static")), ["x2", "y"], ["n"]),  # A's text, other paths
    "B": ((("x", "*"), ("y", "PyTreeDef((*, *))"), ("n", "static")), ["x", "y[0]", "y[1]"], ["n"]),
    "C": ((("x", "*"), ("n", "static")), ["x"], ["n"]),
    "D": ((("x", "*"), ("y", "*")), ["x", "y"], []),
    "E": ((("x", "*"), ("z", "*")), ["x", "z"], []),
}
_READ = [Placement("cpu:0", committed=True), Placement("cpu:1", committed=True)]
_MIXED = [None, Placement("host"), Placement("cpu:0", committed=False)] + _READ


def _random_signature(rng: random.Random, names: Sequence[str], placements: Sequence[Placement | None]) -> Signature:
    structure, paths, statics = _STRUCTURES[rng.choice(names)]
    arrays = [ArrayLeaf(p, (rng.choice([2, 3]),) * rng.choice([1, 1, 2]), rng.choice(["float32", "float32", "int32"]),
                        rng.random() < 0.2, rng.choice(placements)) for p in paths]
    values = [rng.choice([1, 2, 3]) for _ in statics]
    st = [StaticLeaf(s, str(v), "int", "value", hash(v)) for s, v in zip(statics, values)]
    args = [n for n, _ in structure]
    defaults = tuple(n for n in args if n == "y" and rng.random() < 0.2)
    keywords = tuple(n for n in args if n not in defaults and rng.random() < 0.2)
    return Signature(arrays, st, structure, keywords, defaults)


def _texts(changes: Sequence[Change]) -> list[tuple[str, str, str]]:
    return [(c.path, c.field, c.text) for c in changes]


def _sequences(placements, names=("A", "A2", "B", "C", "D", "E"), seeds=range(120), length=14):
    """(new, earlier distinct signatures, the index of them) at each step of random sequences."""
    for seed in seeds:
        rng = random.Random(seed)
        seen: list[Signature] = []
        index = SignatureIndex()
        for _ in range(length):
            new = _random_signature(rng, names, placements)
            yield new, list(dict.fromkeys(seen)), index
            if new not in index:
                index.add(new)
            seen.append(new)


@pytest.mark.parametrize("names", [("A", "A2", "B", "C", "D", "E"), ("A",), ("A", "A2"), ("C", "D", "E")])
@pytest.mark.parametrize("placements", [[None], _READ], ids=["none read", "all committed"])
def test_explain_over_the_index_gives_the_change_lists_of_the_search_it_replaced(names, placements):
    steps = 0
    for new, earlier, index in _sequences(placements, names):
        old = _texts(_old_explain(new, earlier, "why"))
        assert _texts(_explain.explain(new, index, "why")) == old, (new, earlier)
        assert _texts(_explain.explain(new, earlier, "why")) == old
        steps += 1
    assert steps == 120 * 14


@pytest.mark.parametrize("names", [("A", "A2", "B", "C", "D", "E"), ("A",), ("A", "A2")])
def test_with_placements_read_on_one_side_or_uncommitted_the_nearest_still_has_the_fewest_changes(names):
    """A leaf whose placement alone differs (not read on one side, or NumPy against an uncommitted
    array) may be no change at all: the search's bound must not count it as one."""
    checked = 0
    for new, earlier, index in _sequences(_MIXED, names, seeds=range(200)):
        rule = _rule(new, earlier, "why")
        if rule is not None:
            assert _texts(_explain.explain(new, index, "why")) == _texts(rule), (new, earlier)
            checked += 1
    assert checked > 1000


def _sig(n: int, *, keywords=(), defaults=(), x_placement=None, y=(2,), y_placement=None) -> Signature:
    return Signature((ArrayLeaf("x", (n,), "float32", False, x_placement),
                      ArrayLeaf("y", y, "float32", False, y_placement)), (), (("x", "*"), ("y", "*")),
                     keywords, defaults)


def test_a_tie_goes_to_the_latest_even_when_an_older_one_differs_only_in_placements_and_the_call():
    # The older: same shapes, y passed by keyword (one change); the later: x's length (one change).
    older, later = _sig(3, keywords=("y",)), _sig(4)
    assert [c.text for c in _explain.explain(_sig(3), [older, later])] == ["x.shape[0]: 4 -> 3"]
    assert [c.text for c in _old_explain(_sig(3), [older, later])] == ["x.shape[0]: 4 -> 3"]
    # The later one from the host, the new one on a device, uncommitted: still one change, the latest.
    host, device = Placement("host"), Placement("cpu:0", committed=False)
    earlier = [_sig(3, y=(4,), x_placement=device, y_placement=device), _sig(3, y=(5,), x_placement=host, y_placement=host)]
    new = _sig(3, y=(6,), x_placement=device, y_placement=device)
    assert [c.text for c in _explain.explain(new, earlier)] == ["y.shape[0]: 5 -> 6"]
    assert [c.text for c in _old_explain(new, earlier)] == ["y.shape[0]: 5 -> 6"]


def test_a_signature_lowered_without_placements_is_the_nearest_of_a_call_one_shape_away():
    lowered = [_sig(n) for n in (2, 3, 4)]
    placed = Placement("cpu:0", committed=False)
    new = _sig(4, y=(3,), x_placement=placed, y_placement=placed)
    assert [c.text for c in _explain.explain(new, lowered + [_sig(5, x_placement=placed, y_placement=placed)])] == \
        ["y.shape[0]: 2 -> 3"]


def test_the_index_after_removals_and_rebuilds_answers_as_a_list_of_what_it_holds():
    rng = random.Random(7)
    index = SignatureIndex()
    held: list[Signature] = []
    for step in range(400):
        new = _random_signature(rng, ("A", "A2", "D"), _MIXED)
        want = _rule(new, held, "why")
        got = _explain.explain(new, index, "why")
        if want is not None:
            assert _texts(got) == _texts(want), step
        else:
            assert _texts(got) == _texts(_old_explain(new, held, "why")), step
        if new not in index:
            index.add(new)
            held.append(new)
        if len(held) > 20:  # evict the oldest, and now and then one from the middle (a guard took it back)
            gone = held.pop(0 if step % 3 else rng.randrange(len(held)))
            index.remove(gone)
        assert list(index) == held
        assert all(index.traced_before(s) for s in held)


def test_a_storm_of_structures_with_evictions_keeps_the_nearest_and_only_the_live_structures():
    """Each signature a new dict structure, the oldest evicted past 20: the nearest structure is
    the one the search before the index found, and the index holds slots of live structures only."""
    rng = random.Random(3)
    index = SignatureIndex()
    held: list[Signature] = []
    for step in range(600):
        keys = sorted(rng.sample(range(30), rng.choice([1, 2])))
        tree = "PyTreeDef({" + ", ".join(f"'k{k}': *" for k in keys) + "})"
        other = rng.choice(["*", "PyTreeDef((*, *))"])
        paths = [f"d['k{k}']" for k in keys] + (["z"] if other == "*" else ["z[0]", "z[1]"])
        new = Signature([ArrayLeaf(p, (2,), "float32", False) for p in paths], (),
                        (("d", tree), ("z", other)))
        assert _texts(_explain.explain(new, index)) == _texts(_old_explain(new, held)), step
        if new not in index:
            index.add(new)
            held.append(new)
        if len(held) > 20:
            index.remove(held.pop(0))
        assert len(index._structures.count) <= 2 * len(held) + 34


# -- real JAX on CPU ----------------------------------------------------------------------------

def _explanations(fn) -> list[str]:
    return [m.explanation for m in shapewatch.misses(fn)]


def test_numpy_then_device_inputs_are_diffed_against_the_latest_signature_one_change_away():
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x, y: x.sum() + y.sum())
    f(jnp.ones(3), jnp.ones(4))
    f(np.ones(3, np.float32), np.ones(5, np.float32))  # from the host: no change against uncommitted
    f(jnp.ones(3), jnp.ones(6))
    assert _explanations(f) == ["first compile", "y.shape[0]: 4 -> 5", "y.shape[0]: 5 -> 6"]


def test_a_keyword_flip_at_an_earlier_shape_does_not_beat_a_later_signature_one_change_away():
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x, y: x.sum() + y.sum())
    f(jnp.ones(3), y=jnp.ones(2))
    f(jnp.ones(4), jnp.ones(2))
    f(jnp.ones(3), jnp.ones(2))
    assert _explanations(f)[-1] == "x.shape[0]: 4 -> 3"


def test_calls_after_lowering_are_diffed_against_the_lowered_signature_one_change_away():
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x, y: x.sum() + y.sum())
    for n in (2, 3, 4):
        f.lower(jnp.ones(n), jnp.ones(2))
    f(jnp.ones(3), jnp.ones(2))
    f(jnp.ones(4), jnp.ones(3))
    assert _explanations(f)[-1] == "y.shape[0]: 2 -> 3"


def test_a_storm_of_mixed_placements_follows_the_rule_at_every_miss():
    d0 = jax.devices()[0]
    rng = np.random.default_rng(0)
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x, y: x.sum() + y.sum())
    kinds = [jnp.asarray, lambda a: a, lambda a: jax.device_put(a, d0)]
    for _ in range(40):
        x, y = (np.ones(int(rng.integers(1, 4)), np.float32) for _ in range(2))
        f(kinds[int(rng.integers(3))](x), kinds[int(rng.integers(3))](y))
    seen: list[Signature] = []
    checked = 0
    for m in shapewatch.misses(f):
        assert m.signature is not None
        earlier = list(dict.fromkeys(seen))
        rule = _rule(m.signature, earlier)
        if rule is not None and earlier:
            assert _texts(m.changes) == _texts(rule), m
            checked += 1
        seen.append(m.signature)
    assert checked >= 10


def test_identical_signatures_are_named_for_their_reason_as_before():
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x: x @ x)
    f.lower(jnp.ones((2, 2)))
    f(jnp.ones((2, 2)))
    f.clear_cache()
    f(jnp.ones((2, 2)))
    with jax.default_matmul_precision("highest"):
        f(jnp.ones((2, 2)))
    assert _explanations(f) == [
        "first compile", "first compile of a signature traced ahead of time (x: float32[2,2])",
        "identical signature, traced again after clear_cache()",
        "identical signature, traced again under another JAX trace context (a configuration such as "
        "jax.default_matmul_precision or jax.numpy_dtype_promotion, or an enclosing transformation's axis names)"]


def test_a_signature_traced_inside_another_jit_is_still_named_so_after_a_guard_stopped_its_compile():
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x: x * 3)
    g = shapewatch.watched_jit(lambda x: f(x) + 1)
    f(jnp.ones(5))
    g(jnp.ones(3))
    with pytest.raises(shapewatch.RecompileError), shapewatch.no_recompiles(f):
        f(jnp.ones(3))  # stopped: taken back out of the records
    f(jnp.ones(3))
    misses = shapewatch.misses(f)
    assert [m.kind for m in misses] == ["compile", "inlined", "no_retrace"]
    assert misses[2].explanation.startswith("compiled on its own, once, without a retrace: the signature first "
                                            "traced inside <lambda>")
    assert misses[2].signature == misses[1].signature


def test_a_compile_without_a_retrace_is_no_trace_context_for_a_later_identical_retrace():
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x: x * 3)
    f(jnp.ones(3))
    f(jax.device_put(jnp.ones(3), jax.devices()[0]))  # committed: compiled without a retrace
    jax.clear_caches()
    f(jnp.ones(3))
    assert _explanations(f)[-1].startswith("identical shapes and dtypes, traced again for a reason outside them")


def test_an_evicted_signature_traced_again_is_diffed_against_those_held(monkeypatch):
    monkeypatch.setattr(shapewatch._monitor.config.settings, "max_records", 3)
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x: x * 3)
    for n in (1, 2, 3, 4, 5, 1, 6):
        f(jnp.ones(n))
    f.clear_cache()
    f(jnp.ones(6))
    f(jnp.ones(1))
    assert _explanations(f) == ["x.shape[0]: 5 -> 6", "identical signature, traced again after clear_cache()",
                                "x.shape[0]: 6 -> 1"]


def test_calls_counted_from_a_miss_that_evicts_are_of_the_signatures_before_it(monkeypatch):
    monkeypatch.setattr(shapewatch._monitor.config.settings, "max_records", 2)
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x, n: x * n, static_argnums=1, count_calls=True)
    f(jnp.ones(3), 1)
    f(jnp.ones(3), 2)
    f(jnp.ones(4), 1)  # a shape changed: counting starts, and the first signature is evicted
    f(jnp.ones(3), 1)
    f(jnp.ones(3), 2)
    (fr,) = shapewatch.report().functions
    # As before the index: the calls of the two first signatures (alike in their arrays) go to the
    # first, which is evicted; the signature held keeps none of them.
    assert [m.calls for m in fr.record.misses] == [0, 1]
    assert fr.record.calls == 5


def test_structure_storms_and_same_text_layouts_explain_as_before():
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda d: sum(v.sum() for v in jax.tree_util.tree_leaves(d)))
    for d in [{"a": jnp.ones(2)}, {"a": jnp.ones(2), "b": jnp.ones(2)}, {"b": jnp.ones(2)},
              {"a": jnp.ones(3), "b": jnp.ones(2)}, [jnp.ones(2)], {"a": jnp.ones(2), "c": jnp.ones(2)},
              ({"a": jnp.ones(2)},), {"a": jnp.ones(2)}]:
        f(d)
    f.clear_cache()
    f({"b": jnp.ones(2)})
    f({"z": jnp.ones(2)})
    assert _explanations(f) == [
        "first compile", "d: keys {'a'} -> {'a','b'}", "d: keys {'a','b'} -> {'b'}", "d['a'].shape[0]: 2 -> 3",
        "d: dict with keys {'a','b'} -> list of 1", "d: list of 1 -> dict with keys {'a','c'}",
        "d: dict with keys {'a','c'} -> tuple of 1", "identical signature, traced again after clear_cache()",
        "d: tuple of 1 -> dict with keys {'z'}"]
    P = collections.namedtuple("P", ["a", "b"])
    shapewatch.reset()
    g = shapewatch.watched_jit(lambda p: sum(v.sum() for v in jax.tree_util.tree_leaves(p)))
    for p in [P(jnp.ones(2), jnp.ones(2)), (jnp.ones(2), jnp.ones(2)), P(jnp.ones(3), jnp.ones(3)),
              (jnp.ones(3), jnp.ones(3)), {"a": jnp.ones(2), "b": jnp.ones(2)}, {"a": jnp.ones(3), "b": jnp.ones(2)}]:
        g(p)
    assert _explanations(g) == [
        "first compile", "p: keys {a,b} -> {0,1}", "p.a.shape[0]: 2 -> 3; p.b.shape[0]: 2 -> 3",
        "p[0].shape[0]: 2 -> 3; p[1].shape[0]: 2 -> 3", "p: tuple of 2 -> dict with keys {'a','b'}",
        "p['a'].shape[0]: 2 -> 3"]


def test_threads_calling_one_watched_function_record_each_signature_once():
    shapewatch.reset()
    f = shapewatch.watched_jit(lambda x: x * 2)

    def work(k: int) -> None:
        for n in range(1, 25):
            f(jnp.ones((n % 6 + 1, k % 3 + 1)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    misses = shapewatch.misses(f)
    assert len(misses) == len({m.signature for m in misses}) == 18
    assert not any("identical" in m.explanation for m in misses)


def test_a_code_is_published_only_once_its_unplaced_code_is_written(monkeypatch):
    """Another thread may read a code from the table without the lock: its unplaced code must be there."""

    class Checked(dict):
        def __setitem__(self, key, code):
            plain = _layout.code_of(*key[:3]) if key[3] is not None else code
            assert code < len(_layout._plain) and _layout._plain[code] == plain
            super().__setitem__(key, code)

    original = _layout._codes
    checked = Checked(original)
    monkeypatch.setattr(_layout, "_codes", checked)
    where = Placement("cpu:7", committed=True)
    try:
        for n in range(200):  # enough new codes to grow the table
            _layout.code_of((10_000 + n,), "float32", False, where)
    finally:
        original.update(checked)  # the codes made here stay known once the table is put back
