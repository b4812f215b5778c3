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
        group_by_length(EXAMPLES[:3], batch_size=8).load_state_dict(first.state_dict())
