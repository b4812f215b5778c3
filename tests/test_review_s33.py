"""Review s33: defects found in the auto planner's changes."""

from __future__ import annotations

import numpy as np

from shapewatch.buckets._auto_planner import AutoPlanner


def test_the_dp_bound_stops_only_at_a_plan_within_the_cap():
    # the layer-4 best plan adds a shape over the cap (the caller skips it); the DP's bound must
    # not take it for the best found, or the layer-5 plan of compiled shapes (cheaper, within
    # the cap) is never computed and a worse plan is chosen
    p = AutoPlanner(name="t", multiple_of=1, rows_for=lambda b: 19, max_shapes=6, horizon=1000,
                    unit_size=64, clock=None, records=None, prior=None)
    values = np.array([10, 20, 30, 40, 50, 60])
    per_unit = np.array([0.16, 0.192, 0.272, 0.335, 0.421, 0.62])
    weights = np.array([1.376, 7.951, 7.795, 9.084, 7.563, 5.687])
    p.compiled = {10, 20, 30, 50, 60}
    bounds, total, new = p._best(values, weights, per_unit, 0.42, 5, 60)
    ref, _ = p._cost(np.array([10, 20, 30, 50, 60]), values, weights, per_unit, 0.42)
    assert total <= ref + 1e-9
    assert len(p.compiled | set(bounds.tolist())) <= 5
