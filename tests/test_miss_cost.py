"""What a miss costs shapewatch does not grow with the misses before it: counted, never timed.

Every line of shapewatch's own code that runs during one miss is counted (``sys.settrace``,
shapewatch's files only); the 10th and the 300th miss of one function over a 2,000-leaf tree
(the fewest of each and the two before it) must run the same lines, whatever the kind of
storm (a shape, a static value, a tree structure). A loop over earlier signatures or misses anywhere on the miss path shows as
lines that grow with them.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
import weakref
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shapewatch
from shapewatch._monitor import layout as _layout

PACKAGE = os.path.dirname(shapewatch.__file__)


class Lines(int):
    """A count of lines run, with the lines per shapewatch function in ``by_function``."""

    by_function: Counter


def _lines_of(call) -> Lines:
    """Lines of shapewatch's code run by ``call()`` (other code is not traced at all)."""
    by_function: Counter = Counter()

    def local(frame, event, arg):
        if event == "line":
            code = frame.f_code
            by_function[f"{os.path.relpath(code.co_filename, PACKAGE)}:{code.co_name}"] += 1
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(PACKAGE) else None

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    lines = Lines(sum(by_function.values()))
    lines.by_function = by_function
    return lines


def _storm(fn, argument, misses: int, counted: tuple[int, ...]) -> dict[int, int]:
    """Calls ``fn(*argument(i))`` for ``misses`` new signatures; the lines run by the counted ones."""
    out = {}
    for i in range(1, misses + 1):
        args = argument(i)
        if i in counted:
            out[i] = _lines_of(lambda args=args: jax.block_until_ready(fn(*args)))
        else:
            jax.block_until_ready(fn(*args))
    return out


_FRESH = 7_919  # storm lengths start past it (see the shape storm)


def _params(leaves: int) -> dict[str, jax.Array]:
    return {f"p{i:04d}": jnp.ones((2,)) for i in range(leaves)}


def _assert_flat(lines: dict[int, Lines], last: int = 300) -> None:
    """The fewest lines of the 8th to 10th misses and of the last three: work that grows with
    the misses before shows in each of them, while one miss that ran a few more lines once
    does not decide. A failure names the functions whose lines differ."""
    early = min((lines[i] for i in (8, 9, 10)), key=int)
    late = min((lines[i] for i in (last - 2, last - 1, last)), key=int)
    differ = {name: (early.by_function[name], late.by_function[name])
              for name in early.by_function | late.by_function
              if early.by_function[name] != late.by_function[name]}
    assert int(late) == pytest.approx(int(early), rel=0.02, abs=40), (dict(lines), differ)


def test_a_shape_storm_runs_the_same_lines_at_its_300th_miss_as_at_its_10th():
    params = _params(2_000)
    shapewatch.reset()
    step = shapewatch.watched_jit(lambda params, x: x.sum())
    # Lengths no other test uses: a leaf's code is made once per process for each (shape, dtype),
    # so a length that an earlier test in the same worker made runs fewer lines (49, once).
    lines = _storm(step, lambda i: (params, jnp.ones(_FRESH + i)), 300, (8, 9, 10, 298, 299, 300))
    _assert_flat(lines)
    assert shapewatch.misses(step)[-1].explanation == f"x.shape[0]: {_FRESH + 299} -> {_FRESH + 300}"


def test_a_static_storm_runs_the_same_lines_at_its_300th_miss_as_at_its_10th():
    params = _params(200)
    shapewatch.reset()
    step = shapewatch.watched_jit(lambda params, x, n: x.sum() * n, static_argnums=2)
    lines = _storm(step, lambda i: (params, jnp.ones(3), _FRESH + i), 300, (8, 9, 10, 298, 299, 300))
    _assert_flat(lines)
    assert shapewatch.misses(step)[-1].explanation == f"n (static): {_FRESH + 299} -> {_FRESH + 300}"


def test_a_structure_storm_runs_the_same_lines_at_its_60th_miss_as_at_its_10th():
    """Each miss a new tree structure (a dict under a new key, as many leaves): the nearest
    structure is found from postings of the arguments' trees, not by comparing each earlier one."""
    params = _params(200)
    shapewatch.reset()
    step = shapewatch.watched_jit(lambda params, xs: sum(x.sum() for x in xs.values()))
    lines = _storm(step, lambda i: (params, {f"k{i:03d}": jnp.ones(2)}), 60, (8, 9, 10, 58, 59, 60))
    _assert_flat(lines, 60)
    assert "xs" in shapewatch.misses(step)[-1].explanation


def test_the_unplaced_key_is_made_from_the_delta_and_matches_placements_aside():
    from shapewatch._monitor.index import unplaced_key

    a = shapewatch.Signature((shapewatch.ArrayLeaf("x", (8,), "float32", False),
                              shapewatch.ArrayLeaf("y", (3,), "int32", False)), (), (("x", "*"), ("y", "*")))
    placed = _layout.code_of((8,), "float32", False, object())
    b = shapewatch.Signature.compact(a.layout, np.array([placed, a.codes[1]], _layout.CODE), ())
    c = shapewatch.Signature((shapewatch.ArrayLeaf("x", (9,), "float32", False),
                              shapewatch.ArrayLeaf("y", (3,), "int32", False)), (), (("x", "*"), ("y", "*")))
    assert a != b and unplaced_key(a) == unplaced_key(b)
    assert unplaced_key(a) != unplaced_key(c)


def _committed(x):
    return jax.device_put(x, jax.devices()[0])


def _placed(fn, args, kwargs, **jit_options):
    """The placements of the first miss of ``fn(*args, **kwargs)`` by path, and the lines of
    shapewatch's second flatten of the concrete arguments (``_leaves_like``) it ran."""
    f = shapewatch.watched_jit(fn, **jit_options)
    lines = _lines_of(lambda: jax.block_until_ready(f(*args, **kwargs)))
    (miss,) = shapewatch.misses(f)
    placed = {leaf.path: leaf.placement.describe() for leaf in miss.signature.arrays}
    return placed, lines.by_function["_monitor/signature.py:_leaves_like"]


def _function(case: str):
    """A new function each time (JAX shares a function's traces between its jits)."""
    if case == "keyword-only":
        def f(a, b, *, c):
            return a.sum() + b.sum() + c.sum()
    elif case == "varargs":
        def f(p, *rest):
            return p.sum() + rest[1].sum()
    elif case == "varkw":
        def f(a, *, b, **more):
            return a.sum() + b.sum() + more["c"].sum()
    elif case == "static":
        def f(a, n, b):
            return a.sum() * n + b.sum()
    else:
        def f(params, x):
            return x.sum()
    return f


_X, _Y, _Z = jnp.ones(2), jnp.ones(3), jnp.ones(4)
_P = {f"k{i:02d}": jnp.ones(2) for i in range(30)}


@pytest.mark.parametrize("case,args,kwargs,options,path", [
    ("keyword-only", (_X, _Y), {"c": _committed(_Z)}, {}, "c"),
    ("keyword-only", (_X,), {"c": _Z, "b": _committed(_Y)}, {}, "b"),
    ("varargs", (_X, _Y, _committed(_Z)), {}, {}, "rest[1]"),
    ("tree", ({**_P, "k17": _committed(_P["k17"])}, _X), {}, {}, "params['k17']"),
    ("static", (_X, 2, _committed(_Y)), {}, {"static_argnums": (1,)}, "b"),
    ("static", (_X,), {"n": 2, "b": _committed(_Y)}, {"static_argnames": ("n",)}, "b"),
    ("tree", (_P, np.ones(2)), {}, {}, "x"),
])
def test_a_miss_takes_its_concrete_leaves_from_jax_flat_arguments_each_at_its_own_path(case, args, kwargs, options,
                                                                                    path):
    """JAX holds the call's concrete leaves flat, aligned with the tracers: a miss slices them
    instead of flattening every argument again, and each leaf keeps its own placement."""
    placed, again = _placed(_function(case), args, kwargs, **options)
    assert again == 0  # no second flatten, on every JAX of the window
    special = {p for p, text in placed.items() if text != "uncommitted"}
    assert special == {path}, placed
    assert placed[path] in ("committed to cpu:0", "from the host (NumPy array or Python scalar)")


def test_a_call_whose_order_jax_flattens_otherwise_falls_back_to_its_own_flatten_with_the_same_placements():
    # JAX flattens keyword arguments by name (b, c); the bound signature holds **more after b
    placed, again = _placed(_function("varkw"), (_X,), {"b": _Y, "c": _committed(_Z)})
    assert again > 0
    assert placed == {"a": "uncommitted", "b": "uncommitted", "more['c']": "committed to cpu:0"}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Config:  # every field static: a pytree node without leaves
    depth: int = dataclasses.field(metadata={"static": True})
    act: str = dataclasses.field(metadata={"static": True})


def _storms():
    """Call sequences whose misses the short way (JAX's flat lists) and the long way must record alike."""
    p = {f"w{i:02d}": jnp.ones(2) for i in range(12)}
    put = _committed
    return {
        "shapes": (lambda params, x: x.sum(), {}, [((p, jnp.ones(n)), {}) for n in (3, 4, 5, 6)]),
        "statics": (lambda params, x, n=None: x.sum(), {"static_argnames": ("n",)},
                    [((p, jnp.ones(3)), {"n": v}) for v in (1, 2, None, (1, 2), "a", None, 3)]),
        "static positional": (lambda x, n: x.sum(), {"static_argnums": (1,)},
                              [((jnp.ones(3), v), {}) for v in (1, None, 2, (3,), None)]),
        "keyword or not": (lambda a, b: a.sum() + b.sum(), {},
                           [((_X, _Y), {}), ((_X,), {"b": _Y}), ((), {"b": _Y, "a": _X}), ((_X, jnp.ones(5)), {}),
                            ((_X,), {"b": jnp.ones(6)})]),
        "dtypes and weak types": (lambda a, s: a.sum() * s, {},
                                  [((_X, 2.0), {}), ((_X, jnp.float32(2.0)), {}), ((_X.astype(jnp.int32), 2), {}),
                                   ((_X, 3.0), {}), ((np.ones(2), 2.0), {})]),
        "None or an array": (lambda a, b: a.sum() if b is None else a.sum() + b.sum(), {},
                             [((_X, None), {}), ((_X, _Y), {}), ((_X, None), {}), ((jnp.ones(7), None), {})]),
        "defaults": (lambda a, b=None, c=2: a.sum() * c, {},
                     [((_X,), {}), ((_X,), {"c": jnp.ones(())}), ((jnp.ones(4),), {}), ((_X, _Y), {})]),
        "placements": (lambda params, x: x.sum(), {},
                       [((p, jnp.ones(3)), {}), (({**p, "w03": put(p["w03"])}, jnp.ones(4)), {}),
                        ((p, jnp.ones(5)), {}), (({**p, "w03": put(p["w03"])}, jnp.ones(5)), {})]),
        "statics without leaves": (lambda x, s: x * (1 if s is None else 2), {"static_argnums": (1,)},
                                   [((_X, ()), {}), ((_X, None), {}), ((_X, (None,)), {}), ((_X, ()), {})]),
        "a static config without leaves, by keyword": (lambda x, cfg: x * cfg.depth, {"static_argnames": ("cfg",)},
                                                       [((_X,), {"cfg": _Config(d, "relu")}) for d in (1, 2, 3)]),
        "a static config without leaves, by position": (lambda x, cfg: x * cfg.depth, {"static_argnums": (1,)},
                                                        [((_X, _Config(d, "relu")), {}) for d in (1, 2, 3)]),
        "more structures than are kept": (lambda params, x: x.sum(), {},
                                          [(({f"k{j}": jnp.ones(2) for j in range(k % 6 + 1)}, jnp.ones(3 + k)), {})
                                           for k in range(14)]),
        "structure": (lambda params, x: x.sum(), {},
                      [((p, jnp.ones(3)), {}), (({**p, "extra": jnp.ones(1)}, jnp.ones(3)), {}),
                       (({k: v for k, v in p.items() if k != "w00"}, jnp.ones(3)), {}), ((p, jnp.ones(4)), {})]),
    }


def _recorded(make, options, calls):
    shapewatch.reset()  # the copy of the same code is not a re-created function of the run before
    f = shapewatch.watched_jit(make(), **options)
    for args, kwargs in calls:
        jax.block_until_ready(f(*args, **kwargs))
    return [(m.kind, m.explanation, m.signature) for m in shapewatch.misses(f)]


@pytest.mark.parametrize("storm", list(_storms()))
def test_misses_read_from_jax_flat_lists_are_the_misses_read_the_long_way(storm, monkeypatch):
    from shapewatch._monitor import compat

    fn, options, calls = _storms()[storm]
    short = _recorded(lambda: _copy_of(fn), options, calls)
    monkeypatch.setattr(compat, "flat_arguments", lambda frame, fun: None)
    long = _recorded(lambda: _copy_of(fn), options, calls)
    assert len(short) >= 2 and short == long


def _copy_of(fn):
    """The same code as a new function (JAX shares one function's traces between its jits)."""
    import types

    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def test_a_miss_of_a_call_structure_seen_before_flattens_nothing():
    params = _params(2_000)
    f = shapewatch.watched_jit(lambda params, x: x.sum())
    lines = _storm(f, lambda i: (params, jnp.ones(_FRESH + 5_000 + i)), 4, (4,))[4]
    assert lines.by_function["_monitor/signature.py:_signature_from_fast"] > 0
    assert lines.by_function["_monitor/signature.py:_Plan.__init__"] == 0
    assert lines.by_function["_monitor/signature.py:_leaves_like"] == 0


def test_under_a_python_trace_function_and_the_leak_checker_a_miss_leaves_no_tracer_behind():
    # a trace function (a debugger, coverage) keeps snapshots of frames' locals: the short way is
    # not taken then, or JAX's leak checker would find the tracers of its trace frame in them
    f = shapewatch.watched_jit(lambda p, x: jax.tree_util.tree_map(lambda v: v * x.sum(), p))
    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: None)
    try:
        with jax.checking_leaks():
            for n in (3, 4):
                out = f({"a": jnp.ones(n)}, jnp.ones(n))
                assert float(out["a"][0]) == n
    finally:
        sys.settrace(previous)
    assert len(shapewatch.misses(f)) == 2


class _Held:
    """A static whose life is watched: hashed by identity, as a config object may be."""

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


@pytest.mark.skipif(tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 6),
                    reason="jax 0.5 keeps a static argument in its own caches after clear_caches()")
def test_a_static_argument_is_not_kept_alive_by_the_short_way():
    f = shapewatch.watched_jit(lambda x, cfg: x * 2, static_argnums=1)
    f(jnp.ones(3), 1)
    held = _Held()
    ref = weakref.ref(held)
    f(jnp.ones(4), held)  # on jax 0.10 JAX's structure of the call holds the static
    del held
    f.clear_cache()
    jax.clear_caches()
    gc.collect()
    assert ref() is None
