"""state_dict() / load_state_dict(): a loader restarted half way goes on with exactly what was left."""

import pickle

import numpy as np
import pytest

from shapewatch.buckets import bucketed, group_by_length

rng = np.random.default_rng(0)
EXAMPLES = [np.arange(n) + 1000 * i for i, n in enumerate(np.clip(rng.lognormal(3, 1, 300), 2, 300).astype(int))]


def ticking():
    ticks = iter(range(10**9))
    return lambda: float(next(ticks))


MAKERS = {
    "group_by_length fixed": lambda: group_by_length(EXAMPLES, batch_size=8, buffer_size=96, buckets=(16, 64, 300)),
    "group_by_length online": lambda: group_by_length(EXAMPLES, batch_size=8, buffer_size=256, clock=ticking()),
    "bucketed online": lambda: bucketed([EXAMPLES[i:i + 8] for i in range(0, 300, 8)], clock=ticking()),
}


@pytest.mark.parametrize("name", MAKERS)
def test_a_loader_restored_half_way_yields_the_batches_that_were_left(name):
    whole = [(b.bucket, b.data.tolist()) for b in MAKERS[name]()]
    first = MAKERS[name]()
    part = [(b.bucket, b.data.tolist()) for _, b in zip(range(11), first)]
    state = pickle.loads(pickle.dumps(first.state_dict()))
    second = MAKERS[name]()
    second.load_state_dict(state)
    rest = [(b.bucket, b.data.tolist()) for b in second]
    assert len(part) == 11 and rest
    assert sorted(map(str, part + rest)) == sorted(map(str, whole))
    if "fixed" in name:
        assert part + rest == whole


def test_a_state_loads_only_into_a_new_loader_of_its_kind():
    first = MAKERS["group_by_length fixed"]()
    next(first)
    with pytest.raises(ValueError, match=r"\[shapewatch\] load_state_dict: the state is of a GroupByLength, not of a Bucketed"):
        bucketed([EXAMPLES[:8]]).load_state_dict(first.state_dict())
    with pytest.raises(ValueError, match="must be called before the loader yields anything"):
        first.load_state_dict(first.state_dict())
    with pytest.raises(ValueError, match="the source ended before the"):
        group_by_length(EXAMPLES[:3], batch_size=8, buffer_size=96, buckets=(16, 64, 300)).load_state_dict(
            first.state_dict())


def test_a_state_that_read_more_than_a_list_holds_is_refused_before_reading_and_the_loader_goes_on():
    first = _fixed()
    for _ in range(3):
        next(first)
    state = first.state_dict()
    state["fields"]["_consumed"] = 10**9
    source = EXAMPLES[:40]
    second = group_by_length(source, batch_size=8, buffer_size=96, buckets=(16, 64, 300))
    with pytest.raises(ValueError, match="the source ended before the 1000000000 items"):
        second.load_state_dict(state)
    # nothing was read: the refused loader yields every example of its list, from the start
    assert sorted(int(n) for b in second for n in b.lengths[:b.rows]) == sorted(len(x) for x in source)


def _fixed():
    return group_by_length(EXAMPLES[:40], batch_size=8, buffer_size=96, buckets=(16, 64, 300))


@pytest.mark.parametrize("change, error, match", [
    (lambda s: s.pop("kind"), ValueError, r"the state has no 'kind'"),
    (lambda s: s.pop("fields"), ValueError, r"the state has no 'fields'"),
    (lambda s: s.update(fields={}), ValueError, r"fields do not match a GroupByLength's: missing \['_auto'"),
    (lambda s: s.update(fields=None), TypeError, r"state\['fields'\] is NoneType None, expected a dict"),
    (lambda s: s["fields"].update(_consumed="3"), TypeError, r"state\['fields'\]\['_consumed'\] is str '3'"),
    (lambda s: s["fields"].update(_held="x"), TypeError, r"state\['fields'\]\['_held'\] is str 'x'"),
    (lambda s: s["fields"].update(_ready=[1, 2, 3]), TypeError, r"state\['fields'\]\['_ready'\]\[0\] is int 1"),
    (lambda s: s["fields"].update(plan=None), TypeError, r"state\['fields'\]\['plan'\] is NoneType None"),
    (lambda s: s["fields"].update(_batch_size="x"), TypeError, r"state\['fields'\]\['_batch_size'\] is str 'x'"),
    (lambda s: s["fields"].update(_batch_size=4), ValueError, r"is 4, but this loader was made with 8"),
    (lambda s: s["fields"].update(extra=1), ValueError, r"unknown \['extra'\]"),
], ids=["no kind", "no fields", "fields empty", "fields None", "consumed a str", "held a str", "ready junk",
        "plan None", "batch_size a str", "batch_size other", "unknown field"])
def test_a_state_refused_names_the_field_and_leaves_the_loader_usable(change, error, match):
    import copy

    first = _fixed()
    taken = next(first).rows
    state = copy.deepcopy(first.state_dict())
    change(state)
    loader = _fixed()
    with pytest.raises(error, match=r"^\[shapewatch\] load_state_dict"):
        loader.load_state_dict(state)
    with pytest.raises(error, match=match):
        _fixed().load_state_dict(state)
    rows = sorted(int(b.data[r, 0]) // 1000 for b in loader for r in range(b.rows))
    assert rows == list(range(40))  # as a new loader: every example once
    resumed = _fixed()
    resumed.load_state_dict(first.state_dict())  # and a good state still loads into a fresh one
    assert sum(b.rows for b in resumed) == 40 - taken


@pytest.mark.parametrize("size", ["batch_size", "token_budget"])
def test_a_batch_too_large_to_allocate_is_refused_when_the_loader_is_made(size):
    with pytest.raises(ValueError, match=rf"^\[shapewatch\] {size}=1,099,511,627,776 is above the largest batch"):
        group_by_length(EXAMPLES, **{size: 2**40})
