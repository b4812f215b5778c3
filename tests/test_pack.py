"""``group_by_length(..., strategy="pack")``: whole examples first-fit into rows of one length.

Every token of example ``i`` is ``i * SPAN + position``: a batch's rows, read through their
``segment_ids``, name each example and show it whole. First-fit is computed here on its own
(a plain loop over open rows), not with the library's.
"""

from __future__ import annotations

import copy
import pickle
import sys
from collections import Counter

import numpy as np
import pytest

from shapewatch.buckets import Batch, Buckets, bucketed, group_by_length
from shapewatch.buckets._loaders.pack import first_fit, pack_rows
from tests._interrupt import Interrupter, alarm, buckets_files, drain, sweep

SPAN = 10_000
FLUSH = "ignore:.*buffer_size=.* is below one full packed batch"


def examples(lengths, width=None):
    """Example ``i``: ``i * SPAN + arange(n)`` (a dict with a (n, width) leaf too, if ``width``)."""
    out = []
    for i, n in enumerate(lengths):
        tokens = (i * SPAN + np.arange(n)).astype(np.int64)
        out.append(tokens if width is None else
                   {"tokens": tokens, "feats": np.repeat(tokens[:, None], width, axis=1).astype(np.float32)})
    return out


def lognormal(count, seed=0, top=60):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(12), 0.8, count), 1, top).astype(int).tolist()


def naive_first_fit(lengths, capacity):
    """Rows (lists of indices) by first-fit: each example into the first open row with room."""
    rooms, rows = [], []
    for i, n in enumerate(lengths):
        need = min(n, capacity)
        for r, room in enumerate(rooms):
            if room >= need:
                rooms[r] -= need
                rows[r].append(i)
                break
        else:
            rooms.append(capacity - need)
            rows.append([i])
    return rows


def segments(batch: Batch, key="tokens"):
    """Every example of a packed batch, as a tuple of its tokens, read through ``segment_ids``;
    checks positions, mask, lengths and that padding only ends a row."""
    data = batch.data if not isinstance(batch.data, dict) else batch.data[key]
    ids, pos = np.asarray(batch.segment_ids), np.asarray(batch.positions)
    assert ids.dtype == np.int32 and pos.dtype == np.int32 and ids.shape == data.shape[:2] == pos.shape
    assert (np.asarray(batch.mask) == (ids > 0)).all()
    assert (batch.lengths == (ids > 0).sum(axis=1)).all()
    assert (pos[ids == 0] == 0).all()
    got = []
    for r in range(ids.shape[0]):
        row = ids[r]
        used = int((row > 0).sum())
        assert (row[used:] == 0).all() and (row[:used] > 0).all(), row  # padding only at the end
        if r >= batch.rows:
            assert used == 0  # rows past .rows are padding
        count = int(row.max(initial=0))
        assert sorted(set(row[:used].tolist())) == list(range(1, count + 1))
        assert (np.diff(row[:used]) >= 0).all()  # segments 1, 2, ... one after the other
        for k in range(1, count + 1):
            where = row == k
            assert (pos[r][where] == np.arange(where.sum())).all()
            got.append(tuple(data[r][where].tolist()))
    return got


def drained(loader, key="tokens"):
    batches = list(loader)
    return batches, sorted(t for b in batches for t in segments(b, key))


def want(items):
    return sorted(tuple(np.asarray(e["tokens"] if isinstance(e, dict) else e).tolist()) for e in items)


# ---------------------------------------------------------------- every example once, whole, one shape

@pytest.mark.parametrize("shuffle, buffer_size, remainder", [
    (True, 4096, "pad"), (False, 4096, "pad"), (True, 64, "pad"), (False, 40, "keep"), (True, 50, "pad"),
], ids=["shuffled, one buffer", "in order, one buffer", "shuffled, buffers of 64", "in order, keep",
        "shuffled, buffers of 50"])
def test_every_example_comes_once_and_whole_with_positions_in_one_shape(shuffle, buffer_size, remainder):
    data = examples(lognormal(300))
    loader = group_by_length(data, batch_size=4, strategy="pack", shuffle=shuffle, buffer_size=buffer_size,
                             remainder=remainder, seed=3, multiple_of=16)
    batches, got = drained(loader)
    assert got == want(data)
    top = max(lognormal(300)[:buffer_size])
    assert loader.plan.boundaries == (-(-top // 16) * 16,)  # the first buffer's longest, rounded up to 16
    shapes = {b.data.shape for b in batches}
    if remainder == "pad" and buffer_size != 40:
        assert shapes == {(4, loader.plan.max_length)} and loader.max_shapes == 1
    lengths = {b.bucket for b in batches}  # the row length and any extended ones
    assert sum(b.rows < 4 for b in batches) <= len(lengths)  # only the last rows of each make a short batch
    assert {b.bucket for b in batches} == {loader.plan.max_length, *loader.extended}
    assert loader.batches == len(batches) and sum(loader.shapes.values()) == len(batches)
    assert loader.max_buffered <= buffer_size


def test_pytree_examples_pack_every_leaf_along_the_length():
    data = examples(lognormal(80, seed=1), width=3)
    loader = group_by_length(data, batch_size=2, strategy="pack", row_length=64, seed=1)
    batches, got = drained(loader)
    assert got == want(data)
    for b in batches:
        assert b.data["feats"].shape == (2, 64, 3) and b.data["feats"].dtype == np.float32
        assert (b.data["feats"] == b.data["tokens"][..., None]).all()  # the leaves stay aligned
        assert (b.data["tokens"][b.segment_ids == 0] == 0).all()  # pad_value in the padding


def test_the_row_length_is_the_first_buffers_longest_rounded_to_multiple_of():
    lengths = [5, 17, 3, 9, 30, 2]
    loader = group_by_length(examples(lengths), batch_size=2, strategy="pack", multiple_of=8, buffer_size=4)
    _, got = drained(loader)
    assert got == want(examples(lengths))
    assert loader.plan.boundaries == (24,)  # 17, the longest of the first 4, rounded up to 8
    assert loader.extended == {48: 1}  # 30 came later: rows of 24 doubled until they hold it
    assert {s[1] for s in loader.shapes} == {24, 48} and loader.max_shapes == 2


@pytest.mark.parametrize("buffer_size", [512, 64])
def test_a_source_sorted_by_length_packs_into_rows_doubled_a_few_shapes_each_example_once(buffer_size):
    # the row length chosen from a first buffer of the shortest: each longer example rows of its own
    # length would be a shape a length (164 here); rows of the chosen length doubled are a few
    lengths = np.sort(np.random.default_rng(0).integers(1, 200, 3000)).tolist()
    data = examples(lengths)
    loader = group_by_length(data, batch_size=8, strategy="pack", buffer_size=buffer_size)
    batches, got = drained(loader)
    assert got == want(data)
    row = loader.plan.max_length
    rows = sorted({b.bucket for b in batches})
    assert rows == [row * 2**k for k in range(len(rows))] and rows[-1] >= 199 > rows[-1] // 2
    assert len(rows) == int(np.ceil(np.log2(199 / row))) + 1 <= 7  # rows of 36 (buffer 512) or of 4 (64)


def test_a_buffer_spread_over_many_row_lengths_is_warned_as_such():
    # rows of 10 given: 60 examples of 11..30 in rows of their own lengths, 3 a length; 40 of them
    # would fill a batch of one length, but no length holds one
    data = examples(list(range(11, 31)) * 3)
    with pytest.warns(UserWarning) as caught:
        drained(group_by_length(data, batch_size=6, strategy="pack", row_length=10, buffer_size=40, shuffle=False))
    text = str(caught[0].message)
    assert "buffer_size=40 is below one full packed batch of any of the 20 row lengths it holds (11, 12, " in text
    assert "expected a row_length that holds the longer examples, or buffer_size >= 120" in text


def test_an_example_longer_than_the_row_follows_overflow():
    lengths = [4, 12, 3, 5, 2]
    data = examples(lengths)
    cut = group_by_length(data, batch_size=2, strategy="pack", row_length=Buckets((8,), overflow="truncate"))
    batches, got = drained(cut)
    assert cut.truncated == 1 and {b.data.shape for b in batches} == {(2, 8)}
    expect = sorted([tuple(e.tolist()) for e in data if len(e) <= 8] + [tuple(range(SPAN, SPAN + 8))])
    assert got == expect  # example 1 cut to its first 8 tokens, in a row of its own

    strict = group_by_length(data, batch_size=2, strategy="pack", row_length=Buckets((8,), overflow="error"),
                             shuffle=False)
    with pytest.raises(ValueError, match=r"length 12, above the row length 8 \(overflow='error'\); it was left out"):
        next(strict)
    _, rest = drained(strict)
    assert rest == sorted(tuple(e.tolist()) for e in data if len(e) <= 8)

    wide = group_by_length(data, batch_size=2, strategy="pack", row_length=8, multiple_of=4)
    batches, got = drained(wide)
    assert got == want(data) and {b.data.shape for b in batches} == {(2, 8), (2, 12)}


def test_token_budget_sets_the_rows_of_a_packed_batch():
    data = examples(lognormal(100, seed=4))
    loader = group_by_length(data, token_budget=256, strategy="pack", row_length=64)
    batches, got = drained(loader)
    assert got == want(data) and {b.data.shape for b in batches} == {(4, 64)}


def test_remainder_drop_drops_only_the_last_short_batch():
    data = examples([6] * 9)  # 5 rows of 2: two batches of 2 rows, then one of 1 row (dropped)
    loader = group_by_length(data, batch_size=2, strategy="pack", row_length=12, remainder="drop")
    batches, got = drained(loader)
    assert len(batches) == 2 and loader.dropped == 1 and len(got) == 8
    assert set(got) <= set(want(data))


def test_a_seed_fixes_the_batches_and_another_seed_changes_them():
    data = examples(lognormal(200, seed=5))

    def run(seed):
        return [b.data.tolist() for b in group_by_length(data, batch_size=4, strategy="pack", buffer_size=64,
                                                         seed=seed)]

    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.filterwarnings(FLUSH)
def test_random_configurations_give_every_example_once_within_the_shapes_promised():
    rng = np.random.default_rng(12)
    for trial in range(30):
        lengths = rng.integers(1, int(rng.integers(2, 80)), size=int(rng.integers(1, 150))).tolist()
        row = int(rng.integers(1, 90))
        overflow = str(rng.choice(["extend", "truncate"]))
        options = dict(batch_size=int(rng.integers(1, 6)), buffer_size=int(rng.integers(1, 200)),
                       shuffle=bool(rng.integers(2)), seed=trial, remainder=str(rng.choice(["pad", "keep"])),
                       row_length=Buckets((row,), overflow=overflow) if rng.integers(2) else None)
        data = examples(lengths)
        loader = group_by_length(data, strategy="pack", **options)
        batches, got = drained(loader)
        top = loader.plan.max_length
        expect = sorted(tuple(e[:top].tolist()) if len(e) > top and overflow == "truncate"
                        and options["row_length"] is not None else tuple(e.tolist()) for e in data)
        assert got == expect, (trial, options)
        assert all(b.data.shape[0] == options["batch_size"] or options["remainder"] == "keep" for b in batches)
        if options["remainder"] == "pad":
            assert len({b.data.shape for b in batches}) <= loader.max_shapes
        assert loader.report()["batches"] == len(batches)


# ---------------------------------------------------------------- padding against first-fit

def test_the_library_first_fit_is_first_fit():
    rng = np.random.default_rng(7)
    for _ in range(40):
        capacity = int(rng.integers(1, 50))
        lengths = rng.integers(1, capacity + 1, size=int(rng.integers(0, 120))).tolist()
        assert first_fit(lengths, capacity) == naive_first_fit(lengths, capacity)
        assert len(pack_rows(lengths, capacity)) <= len(naive_first_fit(lengths, capacity))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shuffle", [False, True])
def test_padding_is_no_worse_than_first_fit_into_rows_of_the_same_length(seed, shuffle):
    lengths = lognormal(400, seed=seed, top=int(np.random.default_rng(seed).integers(20, 120)))
    loader = group_by_length(examples(lengths), batch_size=8, strategy="pack", shuffle=shuffle, seed=seed)
    batches, got = drained(loader)
    assert got == want(examples(lengths))
    row = loader.plan.max_length
    used = sum(int((b.segment_ids > 0).any(axis=1).sum()) for b in batches)
    assert used == sum(b.rows for b in batches)
    first_fit_rows = len(naive_first_fit(lengths, row))
    assert used <= first_fit_rows
    padding = 1 - sum(lengths) / (used * row)
    assert padding <= 1 - sum(lengths) / (first_fit_rows * row)
    # and far below bucketing's one-bucket plan at the same length
    assert padding < 1 - np.mean(lengths) / row


# ---------------------------------------------------------------- Batch for bucketing

def test_bucketed_batches_carry_one_segment_per_row():
    data = examples([3, 7, 1, 12, 5])
    (b, *_) = group_by_length(data, batch_size=8, buckets=(16,), shuffle=False)
    assert b.segment_ids.dtype == np.int32 and b.segment_ids.shape == (8, 16)
    assert (b.segment_ids == b.mask.astype(np.int32)).all()
    assert b.positions[3].tolist() == list(range(12)) + [0] * 4 and (b.positions[5:] == 0).all()
    (c,) = bucketed([np.ones((2, 5))], buckets=(8,), return_mask=False)
    assert c.mask is None and c.segment_ids.tolist() == [[1] * 5 + [0] * 3] * 2
    made = Batch(np.zeros((2, 4)), None, np.array([2, 0]), 4, 1)
    assert made.segment_ids.tolist() == [[1, 1, 0, 0], [0, 0, 0, 0]]
    assert "segment_ids" not in repr(made) and pickle.loads(pickle.dumps(made)).positions.tolist() == [
        [0, 1, 0, 0], [0, 0, 0, 0]]


def test_a_packed_batch_shows_its_segments_when_printed():
    (b,) = group_by_length(examples([2, 3]), batch_size=1, strategy="pack", row_length=6)
    assert b.segment_ids.tolist() == [[1, 1, 2, 2, 2, 0]] and b.positions.tolist() == [[0, 1, 0, 1, 2, 0]]
    assert "segment_ids=array([[1, 1, 2, 2, 2, 0]], dtype=int32)" in repr(b)
    assert "positions=array([[0, 1, 0, 1, 2, 0]], dtype=int32)" in repr(b)


# ---------------------------------------------------------------- a step that honours segment_ids

def test_a_step_that_honours_segment_ids_gives_each_example_the_same_result_packed_as_alone():
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    vocab, dim, row = 97, 16, 48
    emb, pos_emb = rng.normal(size=(vocab, dim)), rng.normal(size=(row, dim))
    wq, wk, wv = (rng.normal(size=(dim, dim)) / np.sqrt(dim) for _ in range(3))
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), (emb, pos_emb, wq, wk, wv))

    def attend(params, tokens, segment_ids, positions, honour):
        emb, pos_emb, wq, wk, wv = params
        x = emb[tokens % vocab] + pos_emb[positions]
        q, k, v = x @ wq, x @ wk, x @ wv
        scores = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(dim)
        real = segment_ids[:, None, :] > 0
        same = segment_ids[:, :, None] == segment_ids[:, None, :] if honour else True
        causal = positions[:, :, None] >= positions[:, None, :] if honour else True
        scores = jnp.where(real & same & causal, scores, -1e9)
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, axis=-1), v)

    step = jax.jit(attend, static_argnames="honour")
    lengths = lognormal(60, seed=11, top=row)
    data = examples(lengths)

    def per_example(batches, honour):
        out = {}
        for b in batches:
            y = np.asarray(step(params, b.data, b.segment_ids, b.positions, honour=honour))
            for r in range(b.data.shape[0]):
                for k in range(1, int(b.segment_ids[r].max(initial=0)) + 1):
                    where = b.segment_ids[r] == k
                    out[tuple(b.data[r][where].tolist())] = y[r][where]
        return out

    packed = list(group_by_length(data, batch_size=4, strategy="pack", row_length=row, seed=2))
    alone = list(group_by_length(data, batch_size=4, buckets=(row,), shuffle=False))
    assert sum(b.rows for b in packed) < sum(b.rows for b in alone)  # several examples share rows
    assert any(b.segment_ids.max() > 1 for b in packed)
    a, p = per_example(alone, True), per_example(packed, True)
    assert sorted(a) == sorted(p) == want(data)
    for key in a:
        np.testing.assert_allclose(p[key], a[key], rtol=1e-5, atol=1e-5)
    # a step that ignores the segments mixes the examples of a row: the check above would see it
    mixed = per_example(packed, False)
    assert any(not np.allclose(mixed[key], a[key], rtol=1e-3, atol=1e-3) for key in a)


# ---------------------------------------------------------------- resume

@pytest.mark.parametrize("shuffle", [True, False])
def test_a_packing_loader_restored_mid_epoch_yields_exactly_the_batches_that_were_left(shuffle):
    data = examples(lognormal(300, seed=8))

    def make():
        return group_by_length(data, batch_size=4, strategy="pack", buffer_size=96, shuffle=shuffle, seed=4)

    whole = [b.data.tolist() for b in make()]
    first = make()
    part = [next(first).data.tolist() for _ in range(5)]
    state = pickle.loads(pickle.dumps(first.state_dict()))
    assert state["format"] == "shapewatch.pack-state/3"
    second = make()
    second.load_state_dict(state)
    rest = [b.data.tolist() for b in second]
    assert part + rest == whole and rest
    assert second.batches == len(whole) and second.plan == first.plan


@pytest.mark.filterwarnings(FLUSH)
def test_doubled_rows_stay_within_token_budget():
    # rows of 10 chosen from the first buffer; for 700 and 900, 10 doubled is 1280, above the budget
    # of 1000 tokens a batch: rows of the budget instead (one shape for both, not one a length)
    data = examples([10] * 40 + [900] * 3 + [700] * 2)
    loader = group_by_length(data, token_budget=1000, strategy="pack", buffer_size=16, shuffle=False)
    batches, got = drained(loader)
    assert got == want(data)
    assert all(b.data.size <= 1000 for b in batches) and {b.bucket for b in batches} == {10, 1000}


@pytest.mark.filterwarnings(FLUSH)
def test_examples_longer_than_token_budget_share_doubled_rows():
    # rows of 16 chosen from a sorted source's first buffer, a budget of 64 tokens a batch: the
    # examples longer than the budget (65..199) get a row of their own either way; doubled rows
    # (128, 256) hold them in two shapes, where rows of their own lengths made one shape a length
    data = examples(list(range(1, 200)))
    loader = group_by_length(data, token_budget=64, strategy="pack", buffer_size=16, shuffle=False)
    batches, got = drained(loader)
    assert got == want(data)
    assert {b.bucket for b in batches} == {16, 32, 64, 128, 256}
    assert all(b.data.size <= 64 for b in batches if b.bucket <= 64)
    assert all(b.rows == 1 for b in batches if b.bucket > 64)


def test_an_example_within_token_budget_that_no_row_within_it_holds_gets_the_least_row_above():
    # token_budget=100, multiple_of=8: rows of 8 doubled to 128 for 97 and 100 would pass the budget
    # more than needed (no multiple of 8 within 100 holds them); the least row that does: 104
    from shapewatch.buckets._loaders.pack import row_of

    assert row_of(97, 8, "extend", 8, doubling=True, budget=100) == 104
    assert row_of(100, 8, "extend", 8, doubling=True, budget=100) == 104
    assert row_of(100, 4, "extend", 3, doubling=True, budget=100) == 102
    assert row_of(90, 8, "extend", 8, doubling=True, budget=100) == 96  # the budget's row holds it
    assert row_of(101, 8, "extend", 8, doubling=True, budget=100) == 128  # longer than the budget: doubled


@pytest.mark.filterwarnings(FLUSH)
def test_a_state_saved_with_rows_of_each_longer_length_loads_into_the_doubled_rows():
    # a state saved before a chosen row was doubled: its open rows keyed by each longer example's
    # own length; loaded, they join the doubled rows that new examples go to (none left stranded)
    rng = np.random.default_rng(3)
    data = examples(rng.integers(1, 20, 48).tolist() + rng.integers(1, 100, 352).tolist())  # rows of 19

    def make():
        return group_by_length(data, batch_size=4, strategy="pack", buffer_size=48, shuffle=False)

    first = make()
    part = [next(first) for _ in range(12)]
    state = copy.deepcopy(first.state_dict())
    row = state["plan"].max_length
    own = {}
    for items in state["open"].values():
        for item in items:
            own.setdefault(max(row, item[1]), []).append(item)
    assert len(own) > len(state["open"])  # the layout of the code before differs from this one's
    state["open"] = own
    second = make()
    second.load_state_dict(state)
    rest = list(second)
    assert sorted(t for b in part + rest for t in segments(b)) == want(data)
    assert {b.bucket for b in rest} <= {row * 2**k for k in range(8)}  # no row of an example's own length


@pytest.mark.filterwarnings("ignore:.*below one full packed batch")
def test_a_pack_state_2_saved_before_loads_with_the_extended_rows_its_plan_counted():
    data = examples([5, 17, 3, 9, 30, 2, 40, 6, 33, 4, 8, 7] * 3)

    def make():
        return group_by_length(data, batch_size=2, strategy="pack", multiple_of=8, buffer_size=4, seed=2)

    whole = [b.data.tolist() for b in make()]
    first = make()
    part = [next(first).data.tolist() for _ in range(6)]
    assert first.extended
    state = copy.deepcopy(first.state_dict())  # as pack-state/2 was: the count on the plan, not in counts
    vars(state["plan"])["extended"] = Counter(state["counts"].pop("extended"))
    state["format"] = "shapewatch.pack-state/2"
    second = make()
    second.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert second.extended == first.extended and second.max_shapes == first.max_shapes
    assert "extended" not in vars(second.plan) and second.plan == first.plan
    assert part + [b.data.tolist() for b in second] == whole


def _small():
    return group_by_length(examples(lognormal(40, seed=9)), batch_size=2, strategy="pack", buffer_size=30,
                           seed=1)


@pytest.mark.parametrize("change, error, match", [
    (lambda s: s.update(format="shapewatch.pack-state/1"), ValueError, r"expects a dict from state_dict\(\)"),
    (lambda s: s.update(lockstep={"processes": [0, 2]}), ValueError,
     r"saved by a loader in step across processes and is loaded into a loader on its own"),
    (lambda s: s.pop("ready"), ValueError, r"missing \['ready'\]"),
    (lambda s: s.update(extra=1), ValueError, r"unknown \['extra'\]"),
    (lambda s: s.update(consumed="3"), TypeError, r"state\['consumed'\] is str '3'"),
    (lambda s: s.update(ready=[1]), TypeError, r"state\['ready'\]\[0\] is int 1"),
    (lambda s: s.update(ready=[(8, [[]], "full")]), TypeError, r"state\['ready'\]\[0\]\[1\]\[0\] is list"),
    (lambda s: s.update(open={8: ["x"]}), TypeError, r"state\['open'\]\[8\]\[0\] is str 'x'"),
    (lambda s: s.update(plan=Buckets((4, 8))), TypeError, r"state\['plan'\] is Buckets"),
    (lambda s: s.update(rng={}), TypeError, r"state\['rng'\] is dict"),
    (lambda s: s["arguments"].update(batch_size=3), ValueError, r"is 3, but this loader was made with 2"),
    (lambda s: s["arguments"].update(batch_size="2"), TypeError, r"\['batch_size'\] is str '2'"),
    (lambda s: s["counts"].update(warned=1), TypeError, r"state\['counts'\]\['warned'\] is int 1"),
], ids=["other version", "saved in step", "no ready", "unknown key", "consumed a str", "ready junk", "an empty row",
        "open junk", "plan of two", "rng empty", "batch_size other", "batch_size a str", "warned an int"])
@pytest.mark.filterwarnings(FLUSH)
def test_a_packing_state_refused_names_the_field_and_leaves_the_loader_usable(change, error, match):
    first = _small()
    taken = sum(len(segments(next(first))) for _ in range(2))
    state = copy.deepcopy(first.state_dict())
    change(state)
    loader = _small()
    with pytest.raises(error, match=match):
        loader.load_state_dict(state)
    _, got = drained(loader)  # as a new loader: every example once
    assert got == want(examples(lognormal(40, seed=9)))
    resumed = _small()
    resumed.load_state_dict(first.state_dict())
    assert len(drained(resumed)[1]) == 40 - taken


def test_states_do_not_cross_strategies():
    data = examples([3, 4, 5])
    packing = group_by_length(data, batch_size=2, strategy="pack")
    bucketing = group_by_length(data, batch_size=2, buckets=(8,))
    with pytest.raises(ValueError, match=r"a state of strategy='bucket'"):
        packing.load_state_dict(bucketing.state_dict())
    with pytest.raises(ValueError, match=r"expects a dict from state_dict\(\) \('shapewatch.loader-state/2'.* "
                                         r"\(a state of strategy='pack': load it into a loader made with"):
        bucketing.load_state_dict(packing.state_dict())


# ---------------------------------------------------------------- interrupted at every line

PACK_FILES = buckets_files("_loaders.group_by_length", "_loaders.group_by_length_examples", "_loaders.pack",
                           "_loaders.batch", "_loaders.reading")
LENGTHS = [3, 7, 1, 12, 5, 9, 2, 14, 6, 4, 11, 8, 3, 10]


@pytest.fixture
def no_hang():
    with alarm(600):
        yield


PACKERS = {
    "chosen length, shuffled, small buffer": lambda: group_by_length(
        examples(LENGTHS), batch_size=2, strategy="pack", buffer_size=6, seed=1),
    "given length, extended, in order, drop": lambda: group_by_length(
        iter(examples(LENGTHS)), batch_size=2, strategy="pack", row_length=12, multiple_of=2, buffer_size=8,
        shuffle=False, remainder="drop"),
}


@pytest.mark.filterwarnings(FLUSH)
@pytest.mark.parametrize("mode", PACKERS)
def test_a_packing_loader_interrupted_at_any_line_of_next_yields_every_example_once(mode, no_hang):
    every = want(examples(LENGTHS))
    drop = "drop" in mode

    def check(batches, loader, clean):
        got = sorted(t for b in batches for t in segments(b))
        if drop:  # the short batches at the end are dropped, and counted: the rest comes once
            assert len(got) == len(set(got)) and set(got) <= set(every)
            assert len(got) + loader.dropped == len(every) and loader.dropped > 0
        else:
            assert got == every
        # and as the run not interrupted, batch by batch: a move cut short leaves the loader's
        # random generator as it was, so the move made again packs and shuffles the same
        assert [b.data.tolist() for b in batches] == [b.data.tolist() for b in clean]

    clean = Interrupter(-1, PACK_FILES)
    first = PACKERS[mode]()
    clean_batches = drain(first, clean)
    check(clean_batches, first, clean_batches)
    assert clean.lines > 50
    for at in sweep(clean.lines):
        hook = Interrupter(at, PACK_FILES)
        loader = PACKERS[mode]()
        batches = drain(loader, hook)
        assert hook.fired == 1, f"line event {at} of {clean.lines} was never reached"
        check(batches, loader, clean_batches)
        with pytest.raises(StopIteration):  # ended, and stays ended
            next(loader)


@pytest.mark.filterwarnings(FLUSH)
def test_a_packing_loader_interrupted_while_reading_saves_a_state_that_resumes_with_every_example(no_hang):
    make = PACKERS["chosen length, shuffled, small buffer"]
    for at in range(0, 300, 3):  # within the first next(): reading, parsing, packing
        hook = Interrupter(at, PACK_FILES)
        first = make()
        sys.settrace(hook)
        try:
            taken = segments(next(first))
        except KeyboardInterrupt:
            taken = []
        finally:
            sys.settrace(None)
        second = make()
        second.load_state_dict(first.state_dict())
        rest = list(first)
        assert [b.data.tolist() for b in second] == [b.data.tolist() for b in rest], at
        assert sorted(taken + [t for b in rest for t in segments(b)]) == want(examples(LENGTHS)), at


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs, error, match", [
    (dict(strategy=1), TypeError, r"strategy must be a str, 'bucket', 'pack' or 'auto'; got int 1"),
    (dict(strategy="packed"), ValueError, r"unknown strategy 'packed'; expected one of 'bucket', 'pack'"),
    (dict(strategy="pack", row_length=8.0), TypeError, r"row_length must be an int or a one-boundary Buckets; "
                                                        r"got float 8.0"),
    (dict(strategy="pack", row_length="8"), TypeError, r"row_length must be an int"),
    (dict(strategy="pack", row_length=0), ValueError, r"row_length must be an integer >= 1; got 0"),
    (dict(strategy="pack", row_length=10, multiple_of=8), ValueError,
     r"row_length=10 is not a multiple of multiple_of=8; fix: row_length=16"),
    (dict(strategy="pack", row_length=Buckets((4, 8))), ValueError, r"row_length must be one length"),
    (dict(strategy="pack", row_length=Buckets((8,), overflow="extend"), multiple_of=4), ValueError,
     r"multiple_of=4 would be ignored: row_length=Buckets\(.*\) is a Buckets, whose own multiple_of=1 applies"),
    (dict(row_length=8), ValueError, r"row_length=8 is the row length of strategy='pack'"),
    (dict(strategy="pack", buckets=(4, 8)), ValueError,
     r"plans no buckets: buckets=\(4, 8\) applies to strategy='bucket' only"),
    (dict(strategy="pack", max_buckets=3, prior="x.json"), ValueError,
     r"max_buckets=3, prior='x.json' apply to strategy='bucket' only; fix: leave them out"),
    (dict(strategy="pack", compile_seconds=2.0), ValueError, r"compile_seconds=2.0 applies"),
    (dict(strategy="pack", max_shapes=1), ValueError, r"max_shapes=1 applies"),
    (dict(strategy="pack", clock=lambda: 0.0), ValueError, r"clock=<function"),
    (dict(strategy="pack", compile_records=list), ValueError, r"compile_records=<class 'list'> applies"),
    (dict(strategy="pack", remainder="spill"), ValueError, r"unknown remainder 'spill'"),
    (dict(strategy="pack", batch_size=0), ValueError, r"batch_size must be an integer >= 1"),
], ids=lambda v: str(v)[:40])
def test_bad_arguments_are_refused_when_the_loader_is_made(kwargs, error, match):
    kwargs = {"batch_size": 2, **kwargs}
    with pytest.raises(error, match=r"^\[shapewatch\] .*" + match):
        group_by_length(examples([3, 4]), **kwargs)


def test_bad_examples_raise_once_and_the_others_are_kept():
    data = [np.arange(3), np.arange(0), np.arange(4) + SPAN, {"x": np.arange(2)}, np.arange(5) + 2 * SPAN]
    loader = group_by_length(data, batch_size=4, strategy="pack", row_length=8, shuffle=False)
    with pytest.raises(ValueError, match=r"an example has length 0: packed, it would hold no position"):
        next(loader)
    with pytest.raises(ValueError, match=r"examples differ in structure"):
        next(loader)
    _, got = drained(loader)
    assert got == sorted([(0, 1, 2), tuple(range(SPAN, SPAN + 4)), tuple(range(2 * SPAN, 2 * SPAN + 5))])

    fixed = [{"tokens": np.arange(3), "label": np.int64(1)}, {"tokens": np.arange(2) + SPAN, "label": np.int64(0)}]
    with pytest.raises(ValueError, match=r"strategy='pack' packs sequences: leaf \['label'\] of an example"):
        next(iter(group_by_length(fixed, batch_size=2, strategy="pack")))
