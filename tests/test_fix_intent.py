"""A length that is the program's intent (a curriculum of ODE save times): the fix says what padding changes.

Each program is a real watched function on real JAX (CPU). The output shapes a compile traced are
read with ``jax.eval_shape`` of the same function, as a miss would see them.
"""

import jax
import jax.numpy as jnp
import numpy as np

import shapewatch
from shapewatch import watched_jit
from shapewatch._reports.axis_fix import axis_fix as fix_of
from shapewatch._reports.axis_fix import output_follows, schedule_factor

CURRICULUM = (10, 20, 40, 80)  # the save times of the solve double as training goes on


def decay(y, t):
    return -0.5 * y + jnp.sin(t)


def solve(y0, ts):
    """Euler steps between the save times ts; the solution at each (the output's length is len(ts))."""
    def step(y, t_pair):
        t0, t1 = t_pair
        y = y + (t1 - t0) * decay(y, t0)
        return y, y

    _, ys = jax.lax.scan(step, y0, (ts[:-1], ts[1:]))
    return jnp.concatenate([y0[None], ys])


def loss(y0, ts):
    return (solve(y0, ts) ** 2).mean()  # reduced: the output's length does not follow len(ts)


def run_curriculum(fn):
    watched = watched_jit(fn)
    y0 = jnp.ones(3)
    for n in CURRICULUM:
        for _ in range(3):  # a few steps at each stage
            watched(y0, jnp.linspace(0.0, 1.0, n))
    (function,) = shapewatch.report().functions
    return next(c for c in function.causes if c.kind == "axis")


def outputs_of(fn, lengths):
    """Per length, the output leaves as a miss traces them: ``(path, shape)``."""
    found = []
    for n in lengths:
        out = jax.eval_shape(fn, jnp.ones(3), jnp.linspace(0.0, 1.0, n))
        leaves, _ = jax.tree_util.tree_flatten_with_path(out)
        found.append([("out" + jax.tree_util.keystr(path), tuple(leaf.shape)) for path, leaf in leaves])
    return found


def test_a_curriculum_of_save_times_is_a_bounded_schedule_whose_fix_says_padding_changes_the_result():
    cause = run_curriculum(solve)
    assert cause.text == "ts.shape[0] took 4 values in [10, 80]"
    fix = cause.fix
    assert fix.startswith("bounded: 4 lengths (each 2 times the last, in order: a schedule, such as a curriculum), "
                          "each compiled once"), fix
    assert "storm" not in fix
    # the miss recorded the traced output's shapes: the output axis that follows the length is named
    assert ("the output's length follows this one (out.shape[0] had it on every compile): padding changes what "
            "the function returns; if the length is what the program asks for (the save times of an ODE solve, "
            "a curriculum's horizon), keep these shapes") in fix
    assert "shapewatch does not record" not in fix
    # a schedule: the caveat comes first, before any padding is weighed; the longer-lengths caveat last
    assert fix.index("padding changes what the function returns") < fix.index("padding would save 3 compiles")
    assert fix.endswith("; lengths longer than 80 will compile again: give the largest the program can see "
                        "(shapewatch.buckets.propose(lengths, max_length=...), or a loader's buckets=[..., maximum])")


def test_a_reduced_output_gets_no_word_of_intent_and_the_recorded_outputs_are_the_traced_ones():
    cause = run_curriculum(loss)
    assert "what the program asks for" not in cause.fix and cause.fix.startswith("bounded: 4 lengths")
    shapewatch.reset()
    def paired(y0, ts):
        return {"ys": solve(y0, ts), "t_end": ts[-1]}

    watched = watched_jit(paired)
    for n in CURRICULUM:
        watched(jnp.ones(3), jnp.linspace(0.0, 1.0, n))
    (function,) = shapewatch.report().functions
    assert [m.outputs for m in shapewatch.misses(watched)] == [
        (("out['t_end']", ()), ("out['ys']", (n, 3))) for n in CURRICULUM]
    assert "out['ys'].shape[0] had it on every compile" in next(c for c in function.causes if c.kind == "axis").fix


def test_outputs_of_many_leaves_or_other_nodes_are_not_recorded_and_cost_a_few_steps():
    from shapewatch._monitor.signature import output_shapes

    assert output_shapes(jnp.ones((2, 3))) == (("out", (2, 3)),)
    assert output_shapes((jnp.ones(2), None, [jnp.ones(1)])) == (("out[0]", (2,)), ("out[2][0]", (1,)))
    assert output_shapes([jnp.ones(1)] * 65) is None  # past the limit: not walked
    assert output_shapes({i: jnp.ones(1) for i in range(20_000)}) is None
    assert output_shapes(jax.tree_util.Partial(jnp.sin)) is None  # a node of its own: unknown


def test_the_output_axis_that_follows_the_length_is_found_from_the_traced_output_shapes():
    assert output_follows(list(CURRICULUM), outputs_of(solve, CURRICULUM)) == "out.shape[0]"
    assert output_follows(list(CURRICULUM), outputs_of(loss, CURRICULUM)) == ""  # a scalar: nothing follows
    paired = outputs_of(lambda y0, ts: {"ys": solve(y0, ts), "t_end": ts[-1]}, CURRICULUM)
    assert output_follows(list(CURRICULUM), paired) == "out['ys'].shape[0]"


def test_output_shapes_unknown_or_known_for_one_length_only_tell_nothing():
    known = outputs_of(solve, CURRICULUM)
    assert output_follows(list(CURRICULUM), None) is None
    assert output_follows(list(CURRICULUM), [known[0], None, None, None]) is None  # compiles that did not trace
    assert output_follows(list(CURRICULUM), [known[0], None, known[2], None]) == "out.shape[0]"


def test_a_fix_told_that_the_output_follows_says_so_first_and_names_the_output_axis():
    lengths = list(CURRICULUM)
    follows = output_follows(lengths, outputs_of(solve, lengths))
    fix = fix_of(lengths, lengths, "", 0.2, output=follows)
    verdict, _, rest = fix.partition("; ")
    assert verdict.startswith("bounded: 4 lengths (each 2 times the last")
    assert rest.startswith("the output's length follows this one (out.shape[0] had it on every compile): padding "
                           "changes what the function returns; if the length is what the program asks for")
    assert "shapewatch does not record" not in fix and "unknown here" not in fix
    unknown = fix_of(lengths, lengths, "", 0.2, output=None)  # outputs not recorded: the caveat as a condition
    assert ("if this length is what the program asks for (the output's length follows it: the save times of an "
            "ODE solve, a curriculum's horizon), padding changes the result") in unknown
    assert "(the output's shapes are unknown here:" in unknown
    # the same lengths on a sequence axis of a reduced output: no word of it
    reduced = fix_of(lengths, lengths, "sequence", 0.2, output=output_follows(lengths, outputs_of(loss, lengths)))
    assert "what the program asks for" not in reduced


def test_a_data_length_padded_in_a_storm_keeps_no_intent_caveat_on_a_sequence_axis():
    @watched_jit
    def step(tokens):
        return jnp.tanh(tokens).sum()

    for n in np.random.default_rng(1).integers(5, 200, 20):
        step(np.ones((2, int(n)), np.float32))
    (function,) = shapewatch.report().functions
    fix = next(c for c in function.causes if c.kind == "axis").fix
    assert fix.startswith("storm: ") and "what the program asks for" not in fix


def test_save_times_that_grow_by_one_per_compile_keep_the_caveat_after_the_one_shape_fix():
    @watched_jit
    def trajectory(y0, ts):
        return solve(y0, ts)

    for n in range(10, 16):
        trajectory(jnp.ones(3), jnp.linspace(0.0, 1.0, n))
    (function,) = shapewatch.report().functions
    fix = next(c for c in function.causes if c.kind == "axis").fix
    assert fix.startswith("the length grows by 1 per compile, in order (10 to 15"), fix
    assert "the output's length follows this one (out.shape[0] had it on every compile)" in fix
    assert fix.index("padding changes what the function returns") < fix.index("; lengths longer than")


def test_a_schedule_is_one_factor_in_order_each_length_once():
    assert schedule_factor([10, 20, 40, 80]) == 2
    assert schedule_factor([4, 12, 36]) == 3
    assert schedule_factor([10, 20]) is None  # two lengths: too few to call a schedule
    assert schedule_factor([10, 20, 40, 20]) is None  # back down: not in order
    assert schedule_factor([8, 16, 24, 32]) is None  # a grid met in order, not a schedule
