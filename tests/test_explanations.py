"""Explanations of misses that say what changed: call convention, defaults, identity, structure, grammar."""

import dataclasses
import functools
import sys

import jax
import jax.numpy as jnp

import shapewatch
from shapewatch import watched_jit
from shapewatch._monitor.signature import IDENTICAL, explain, identical
from shapewatch._reports.analysis import counted


def texts(f):
    return [m.explanation for m in shapewatch.misses(f)]


def causes_of(f):
    name = shapewatch.misses(f)[0].function
    return next(r.causes for r in shapewatch.report().functions if r.record.function == name)


def test_a_keyword_call_after_a_positional_one_is_explained_by_the_call_convention():
    @watched_jit
    def f(x, y):
        return x + y

    x = jnp.ones(3)
    f(x, x)
    f(x, y=x)
    assert texts(f) == ["first compile", "y: passed positionally -> by keyword"]
    assert shapewatch.misses(f)[1].signature.to_dict()["keywords"] == ["y"]
    (cause,) = causes_of(f)
    assert cause.kind == "convention"
    assert cause.fix == "pass y the same way every call (always positionally or always by keyword)"


def test_a_default_left_out_then_passed_is_explained_as_default_then_traced():
    @watched_jit
    def g(x, n=2):
        return x * n

    x = jnp.ones(3)
    g(x)
    g(x, n=2)
    assert texts(g)[1] == "n: default (not passed) -> passed by keyword, traced int32[] (weak_type)"
    assert shapewatch.misses(g)[0].signature.defaults == ("n",)
    (cause,) = causes_of(g)
    assert cause.kind == "default"
    assert "pass n in every call or in none" in cause.fix and "static_argnames='n'" in cause.fix


def test_a_static_default_passed_explicitly_with_the_same_value_is_explained():
    @watched_jit(static_argnames="n")
    def g(x, n=2):
        return x * n

    g(jnp.ones(3))
    g(jnp.ones(3), n=2)
    assert texts(g)[1] == "n: default (not passed) -> passed by keyword, static 2"


def test_an_identical_signature_is_not_called_a_first_compile():
    @watched_jit
    def f(x):
        return x + 1

    f(jnp.ones(3))
    f.clear_cache()
    f(jnp.ones(3))
    first, again = shapewatch.misses(f)
    assert first.changes == () and first.explanation == "first compile"
    assert [c.field for c in again.changes] == [IDENTICAL]
    assert again.explanation.startswith("identical signature")
    assert [c.kind for c in causes_of(f)] == ["identical"]


def test_explain_is_empty_only_for_a_first_compile_and_carries_a_reason_it_is_given():
    sig = shapewatch.Signature((shapewatch.ArrayLeaf("x", (3,), "float32", False),), (), (("x", "PyTreeDef(*)"),))
    assert explain(sig, []) == ()
    assert [c.text for c in explain(sig, [sig])] == ["identical signature: retraced for a reason outside the arguments"]
    reason = "identical signature: retraced after clear_cache()"
    assert explain(sig, [sig], reason=reason) == (identical(reason),)
    assert identical(reason).to_dict()["text"] == reason


@dataclasses.dataclass(eq=False)
class ByIdentity:
    lr: float = 0.1


def test_a_new_object_of_a_class_that_hashes_by_identity_is_named_as_such_with_the_fix():
    @watched_jit(static_argnums=1)
    def f(x, cfg):
        return x * cfg.lr

    f(jnp.ones(2), ByIdentity())
    f(jnp.ones(2), ByIdentity())
    assert texts(f)[1] == ("cfg (static): ByIdentity(lr=0.1), same repr, compared by identity: a new object on "
                           "every call (ByIdentity is a class that hashes by identity)")
    (cause,) = causes_of(f)
    assert "hashes by identity" in cause.text
    assert "@dataclasses.dataclass(frozen=True)" in cause.fix and "pass the same object every call" in cause.fix


def _apply():
    @watched_jit(static_argnums=0)
    def apply(f, x):
        return f(x).sum()

    return apply


relu = lambda x: jnp.maximum(x, 0)  # noqa: E731
square = lambda x: x * x  # noqa: E731


def test_two_different_functions_as_a_static_argument_are_named_with_their_lines_and_expected():
    apply = _apply()
    x = jnp.ones(8)
    for _ in range(3):
        apply(relu, x)
        apply(square, x)
    line = relu.__code__.co_firstlineno
    assert texts(apply) == ["first compile",
                            f"f (static): <lambda> (test_explanations.py:{line}) -> "
                            f"<lambda> (test_explanations.py:{line + 1})"]
    (cause,) = causes_of(apply)
    assert cause.text == (f"static argument f took 2 different functions: <lambda> (test_explanations.py:{line}), "
                          f"<lambda> (test_explanations.py:{line + 1}): one executable per function, as expected")
    assert cause.fix.startswith("nothing to fix")


def test_a_function_re_created_for_a_static_argument_is_told_to_be_created_once():
    apply = _apply()
    for _ in range(3):
        apply(lambda x: x * 2, jnp.ones(8))
    assert ", same repr, compared by identity: a new object on every call" in texts(apply)[1]
    (cause,) = causes_of(apply)
    assert cause.text.startswith("static argument f was 3 different objects of function; it hashes by identity")
    assert cause.fix.startswith("create it once, outside the loop")


def test_two_jax_functions_as_a_static_argument_are_different_functions_and_expected():
    apply = _apply()
    x = jnp.ones(8)
    for _ in range(3):
        assert float(apply(jax.nn.relu, x)) == 8.0  # a custom_jvp function
        assert float(apply(jnp.tanh, x)) == float(jnp.tanh(x).sum())  # a jitted function
    (cause,) = causes_of(apply)
    assert cause.text.startswith("static argument f took 2 different functions: relu (functions.py:")
    assert cause.fix.startswith("nothing to fix")


def _add(x, k):
    return x + k


def _scale(x, k):
    return x * k


def test_a_partial_as_a_static_argument_is_shown_without_memory_addresses():
    apply = _apply()
    for _ in range(2):
        apply(functools.partial(_add, k=1), jnp.ones(8))
    assert " at 0x" not in texts(apply)[1]
    assert texts(apply)[1].startswith("f (static): functools.partial(_add, k=1), same repr, compared by identity")
    (cause,) = causes_of(apply)
    assert cause.fix.startswith("create it once, outside the loop")


def test_functions_and_bound_methods_as_a_static_argument_are_all_counted():
    class Model:
        def forward(self, x):
            return x + 1

    apply = _apply()
    model = Model()
    for f in (functools.partial(_add, k=1), functools.partial(_scale, k=2), model.forward,
              functools.partial(_add, k=1)):
        apply(f, jnp.ones(8))
    (cause,) = causes_of(apply)
    assert cause.text.startswith("static argument f was 4 different objects (3 of partial, 1 of method)")


def test_partials_of_different_functions_beside_a_bound_method_are_three_different_functions():
    class Model:
        def forward(self, x):
            return x + 1

    apply = _apply()
    for f in (functools.partial(_add, k=1), functools.partial(_scale, k=2), Model().forward):
        apply(f, jnp.ones(8))
    (cause,) = causes_of(apply)  # the report was a KeyError
    assert cause.text.startswith("static argument f took 3 different functions: functools.partial(_add, k=1) "
                                 "(test_explanations.py:")
    assert cause.fix.startswith("nothing to fix")


@dataclasses.dataclass(frozen=True)
class LongConfig:
    name: str = "a-rather-long-experiment-name-that-fills-the-repr"
    lr: float = 0.1
    steps: int = 100


def test_two_long_static_reprs_that_differ_at_the_end_show_the_part_that_differs():
    @watched_jit(static_argnums=1)
    def f(x, cfg):
        return x * cfg.lr

    f(jnp.ones(2), LongConfig())
    f(jnp.ones(2), LongConfig(steps=200))
    assert texts(f)[1] == "cfg (static): ...lr=0.1, steps=100) -> ...lr=0.1, steps=200)"
    (cause,) = causes_of(f)
    assert cause.values[0].endswith("steps=100)") and cause.values[1].endswith("steps=200)")


def test_a_nested_key_added_is_named_by_its_path():
    @watched_jit
    def f(b):
        return 0.0

    x = jnp.ones(2)
    f({"in": {"t": x}})
    f({"in": {"t": x, "m": x}})
    assert texts(f)[1] == "b['in']: keys {'t'} -> {'m','t'}"
    assert [c.path for c in causes_of(f)] == ["b['in']"]


def test_dictionary_keys_are_quoted_whole():
    @watched_jit
    def f(b):
        return 0.0

    x = jnp.ones(2)
    f({"x": x})
    f({"a[0]": x, "x": x})
    assert texts(f)[1] == "b: keys {'x'} -> {'a[0]','x'}"


def test_a_none_argument_is_an_empty_pytree_not_a_static():
    @watched_jit
    def f(x, mask):
        return x if mask is None else x * mask

    @watched_jit
    def g(b):
        return b["x"]

    x = jnp.ones(2)
    f(x, None)
    f(x, x)
    g({"x": x, "mask": None})
    g({"x": x, "mask": x})
    assert texts(f)[1] == "mask: None -> float32[2]"
    assert texts(g)[1] == "b['mask']: None -> float32[2]"


def test_a_list_that_grew_says_its_length_and_a_leaf_that_changed_alongside_is_named_too():
    @watched_jit
    def f(xs, y):
        return y

    f([jnp.ones(2), jnp.ones(2)], jnp.ones(3))
    f([jnp.ones(2), jnp.ones(2), jnp.ones(2)], jnp.ones(4))
    assert texts(f)[1] == "xs: length 2 -> 3; y.shape[0]: 3 -> 4"


def test_counts_in_text_reports_are_singular_for_one():
    assert [counted(1, "compile"), counted(2, "compile"), counted(1, "miss", "misses"), counted(0, "time")] == [
        "1 compile", "2 compiles", "1 miss", "0 times"]
    f = watched_jit(lambda v: v * 2)
    f(jnp.ones(2))
    text = shapewatch.report().to_text("full")
    assert "  1 compile, 1 signature | " in text and "  last miss:" in text
    for _ in range(2):
        g = watched_jit(lambda v: v * 3)
        g(jnp.ones(2))
    text = shapewatch.report().to_text()
    assert "was re-created 1 time (" in text
    assert ": 2 compiles, " in text.splitlines()[0]


def test_a_function_traced_inside_another_jit_then_called_on_its_own_compiles_once_as_expected():
    @watched_jit
    def objective(params, t):
        return jnp.sum(params * t) ** 2

    lines = {}

    @jax.jit
    def update(i, params):
        g = jax.grad(objective)(params, i); lines["traced"] = sys._getframe().f_lineno  # noqa: E702
        return params - 0.1 * g

    params = jnp.ones(2)
    for t in range(3):
        params = update(t, params)
        objective(params, t); lines["called"] = sys._getframe().f_lineno  # noqa: E702
    (record,) = [f for f in shapewatch.report().functions if f.record.function.endswith("objective")]
    assert (record.record.compiles, record.record.signatures) == (1, 1)
    assert [m.kind for m in record.record.misses] == ["inlined", "no_retrace"]
    here = "test_explanations.py"
    assert texts(objective) == [
        "first traced inside update, as part of its trace (no compile of its own)",
        f"compiled on its own, once, without a retrace: the signature first traced inside update ({here}:{lines['traced']})"]
    (cause,) = record.causes
    assert (cause.kind, cause.text) == ("inside", f"traced first inside update ({here}:{lines['traced']}), then compiled "
                                                  f"on its own at {here}:{lines['called']}, once (one executable for "
                                                  "its own calls): expected")
    assert cause.fix.startswith("nothing to fix")
