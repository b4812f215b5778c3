"""shapewatch.buckets.grain: group_by_length as a grain IterDataset transformation."""

import json

import grain
import numpy as np
import pytest

from shapewatch.buckets.grain import GroupByLengthIterDataset

rng = np.random.default_rng(0)
EXAMPLES = [np.arange(n) + 1000 * i for i, n in enumerate(np.clip(rng.lognormal(3, 1, 200), 2, 300).astype(int))]


def dataset():
    return GroupByLengthIterDataset(grain.MapDataset.source(EXAMPLES).to_iter_dataset(), batch_size=8,
                                    buffer_size=256, max_buckets=3)


def test_batches_hold_every_example_once_unaltered():
    rows = [row[:n].tolist() for b in dataset() for row, n in zip(b.data, b.lengths) if n]
    assert sorted(rows) == sorted(e.tolist() for e in EXAMPLES)


def test_an_iterator_restored_from_grains_state_goes_on_with_the_batches_left():
    whole = [b.data.tolist() for b in dataset()]
    it = iter(dataset())
    first = [next(it).data.tolist() for _ in range(7)]
    state = json.loads(json.dumps(it.get_state()))  # grain keeps iterator states as JSON
    again = iter(dataset())
    again.set_state(state)
    assert first + [b.data.tolist() for b in again] == whole


def test_bad_keywords_raise_when_the_dataset_is_made():
    with pytest.raises(ValueError, match="needs batch_size or token_budget"):
        GroupByLengthIterDataset(grain.MapDataset.source(EXAMPLES))
