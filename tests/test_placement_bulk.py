"""Bulk placements (placements_of) and flatten_up_to leaves (signature_of).

Each case runs in a subprocess with 8 host devices. It compares the watched function's results
with jax.jit's and the number of its misses with the compiles JAX logs for a plain jit of the
same calls, and prints the misses' explanations.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent("""
    import json, logging
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shapewatch
    from shapewatch import watched_jit

    compiles = []
    class _Count(logging.Handler):
        def emit(self, record):
            if "Finished XLA compilation of jit(step)" in record.getMessage():
                compiles.append(1)
    logging.getLogger("jax").addHandler(_Count())
    jax.config.update("jax_log_compiles", True)
    devs = jax.devices()
    mesh = Mesh(np.array(devs).reshape(2, 4), ("d", "m"))

    def check(make_calls):
        def step(t):
            return jax.tree_util.tree_map(lambda v: v * 2, t)
        watched = watched_jit(step)
        got = [watched(*args) for args in make_calls()]
        misses = [m.explanation for m in shapewatch.misses(watched)]
        del compiles[:]
        def step(t):  # a fresh function: jax.jit's caches are keyed on it
            return jax.tree_util.tree_map(lambda v: v * 2, t)
        plain = jax.jit(step)
        want = [plain(*args) for args in make_calls()]
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert np.allclose(np.asarray(a), np.asarray(b))
        print(json.dumps({"misses": misses, "compiles": len(compiles)}))
""")


def _case(body):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_leaf_moved_to_another_device_is_named_leaf_by_leaf():
    found = _case("""
        x0, x1 = jax.device_put(jnp.ones(4), devs[0]), jax.device_put(jnp.ones(4), devs[1])
        check(lambda: [([x0, x0, x0],), ([x1, x1, x1],)])
    """)
    assert found["compiles"] == len(found["misses"]) == 2
    assert found["misses"][1] == "; ".join(f"t[{i}]: committed to cpu:0 -> committed to cpu:1" for i in range(3))


def test_committed_then_uncommitted_leaves_are_named():
    found = _case("""
        x0 = jax.device_put(jnp.ones(4), devs[0])
        check(lambda: [([x0, x0],), ([jnp.ones(4), jnp.ones(4)],)])
    """)
    assert found["compiles"] == len(found["misses"]) == 2
    assert found["misses"][1] == "t[0]: committed to cpu:0 -> uncommitted; t[1]: committed to cpu:0 -> uncommitted"


def test_one_leaf_of_a_mesh_tree_resharded_is_the_only_one_named():
    found = _case("""
        a = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("d")))
        b = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("m")))
        check(lambda: [([a, a, a],), ([a, a, b],), ([b, b, b],)])
    """)
    assert found["compiles"] == len(found["misses"]) == 3
    assert found["misses"][1] == "t[2] sharding: P('d',) -> P('m',) on mesh {d: 2, m: 4}"


def test_equal_shardings_of_distinct_objects_and_a_mix_of_numpy_scalars_and_arrays_compile_once():
    found = _case("""
        a = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("d")))
        b = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("d")))
        check(lambda: [([a, b],), ([a, a],), ([b, b],)])
    """)
    assert found == {"misses": ["first compile"], "compiles": 1}
    mixed = _case("""
        x0 = jax.device_put(jnp.ones(4), devs[0])
        check(lambda: [([x0, np.ones(4), 1.0],), ([x0, jnp.ones(4), 1.0],)])
    """)
    assert mixed == {"misses": ["first compile"], "compiles": 1}


def test_a_memory_kind_change_and_none_leaves_in_a_dict():
    import jax

    kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
    if "pinned_host" not in kinds:
        pytest.skip(f"this JAX's CPU has no pinned_host memory ({sorted(kinds)})")
    found = _case("""
        a = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("d")))
        h = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("d"), memory_kind="pinned_host"))
        x0 = jax.device_put(jnp.ones(8), NamedSharding(mesh, P()))
        x1 = jax.device_put(jnp.ones(8), NamedSharding(mesh, P("d")))
        check(lambda: [({"a": a, "n": None, "x": x0},), ({"a": h, "n": None, "x": x0},),
                       ({"a": h, "n": None, "x": x1},)])
    """)
    assert found["compiles"] == len(found["misses"]) == 3
    assert found["misses"][1] == "t['a'] memory kind: device -> pinned_host"
    assert found["misses"][2] == "t['x'] sharding: P() -> P('d',) on mesh {d: 2, m: 4}"


def test_a_custom_node_that_drops_none_children_and_typed_keys():
    found = _case("""
        class Box:
            def __init__(self, a, b):
                self.a, self.b = a, b
        def flatten(x):
            return [v for v in (x.a, x.b) if v is not None], tuple(v is None for v in (x.a, x.b))
        def unflatten(aux, kids):
            it = iter(kids)
            return Box(*[None if n else next(it) for n in aux])
        jax.tree_util.register_pytree_node(Box, flatten, unflatten)
        x0, x1 = jax.device_put(jnp.ones(2), devs[0]), jax.device_put(jnp.ones(2), devs[1])
        k0, k1 = jax.random.key(0), jax.device_put(jax.random.key(0), devs[1])
        def make():
            return [([Box(x0, None), k0],), ([Box(x1, None), k0],), ([Box(x1, x1), k0],), ([Box(x1, x1), k1],)]
        def step_fn(t):
            return [t[0].a * 2, jax.random.key_data(t[1])]
        # check() maps every leaf; keys need key_data
        watched = watched_jit(step_fn); plain = jax.jit(step_fn)
        got = [watched(*a) for a in make()]; want = [plain(*a) for a in make()]
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert np.allclose(np.asarray(g), np.asarray(w))
        print(json.dumps({"misses": [m.explanation for m in shapewatch.misses(watched)], "compiles": 0}))
    """)
    assert found["misses"][1] == "t[0][<flat index 0>]: committed to cpu:0 -> committed to cpu:1"
    assert len(found["misses"]) == 4
    assert found["misses"][3] == "t[1]: uncommitted -> committed to cpu:1"


def test_donated_and_deleted_arguments_raise_as_jax_jit_does():
    found = _case("""
        import shapewatch
        out = {}
        for name, wrap in (("watched", watched_jit), ("jit", jax.jit)):
            d = jnp.ones(4); d.delete()
            try:
                wrap(lambda t: t + 1)(d)
            except Exception as e:
                out[name] = type(e).__name__
        print(json.dumps({"misses": [out["watched"], out["jit"]], "compiles": 0}))
    """)
    assert found["misses"][0] == found["misses"][1]


def test_donated_trees_moved_between_devices_are_named_and_return_what_jit_returns():
    found = _case("""
        def make():
            return lambda t: [v + 1 for v in t]
        w, j = watched_jit(make(), donate_argnums=0), jax.jit(make(), donate_argnums=0)
        outs = []
        for fn in (w, j):
            got = []
            for d in (0, 1, 1, 2):
                t = [jax.device_put(jnp.ones(4) * i, devs[d]) for i in range(3)]
                got.append([np.asarray(v).tolist() for v in fn(t)])
            outs.append(got)
        assert outs[0] == outs[1]
        print(json.dumps({"misses": [m.explanation for m in shapewatch.misses(w)], "compiles": 0}))
    """)
    assert found["misses"][2] == "; ".join(f"t[{i}]: committed to cpu:1 -> committed to cpu:2" for i in range(3))


def test_a_ref_argument_moved_to_another_device_is_named_with_the_array_beside_it():
    import jax

    if not hasattr(jax, "new_ref"):
        pytest.skip("jax.new_ref needs a newer JAX")
    found = _case("""
        def upd(r, x):
            r[...] += x
            return x * 2
        results = []
        for wrap in (watched_jit, jax.jit):
            fn = wrap(upd)
            r0 = jax.new_ref(jax.device_put(jnp.zeros(3), devs[0]))
            r1 = jax.new_ref(jax.device_put(jnp.zeros(3), devs[1]))
            x0, x1 = jax.device_put(jnp.ones(3), devs[0]), jax.device_put(jnp.ones(3), devs[1])
            outs = [fn(r0, x0), fn(r1, x1), fn(r1, x1)]
            results.append(([np.asarray(o).tolist() for o in outs], r0[...].tolist(), r1[...].tolist()))
            if wrap is watched_jit:
                misses = [m.explanation for m in shapewatch.misses(fn)]
        assert results[0] == results[1], results
        print(json.dumps({"misses": misses, "compiles": 0}))
    """)
    assert found["misses"] == ["first compile",
                               "r: committed to cpu:0 -> committed to cpu:1; x: committed to cpu:0 -> committed to cpu:1"]
