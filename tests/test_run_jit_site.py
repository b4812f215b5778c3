"""``shapewatch run`` watches a jit written in the program, whatever it jits; and names it in the program's terms.

Each program runs in a real subprocess under ``python -m shapewatch run`` (or plain
``python`` for ``watched_jit``), on real JAX on the CPU.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRANSFORMS = {  # what the program jits: a JAX transformation of a functools.partial
    "value_and_grad": "jax.value_and_grad(functools.partial(loss, k=2.0))",
    "grad": "jax.grad(functools.partial(loss, k=2.0))",
    "value_and_grad_has_aux": "jax.value_and_grad(functools.partial(loss_aux, k=2.0), has_aux=True)",
    "vmap": "jax.vmap(functools.partial(loss, k=2.0), in_axes=(None, 0))",
}


def transformed_partial(jitted):
    return textwrap.dedent(f'''\
        import functools, jax, jax.numpy as jnp

        def loss(p, x, k=2.0):
            return ((x @ p) ** 2).sum() * k

        def loss_aux(p, x, k):
            return loss(p, x, k), 0.0

        p = jnp.ones((4, 2))
        f = jax.jit({jitted})
        for n in (3, 5, 7):
            f(p, jnp.ones((n, 4)))
    ''')


def run(tmp_path, source, *args, env=None):
    script = tmp_path / "prog.py"
    script.write_text(source)
    base = {k: v for k, v in os.environ.items() if k not in ("SHAPEWATCH_REPORT", "SHAPEWATCH_LOG")}
    env = {**base, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", **(env or {})}
    return subprocess.run([sys.executable, "-m", "shapewatch", "run", *args, str(script)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)


def line_of(source, text):
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def watched(tmp_path, source, *args):
    """The run's exit status, its JSON report's functions that compiled, and its stderr."""
    proc = run(tmp_path, source, "--report", "full", "--json", "r.json", *args)
    assert (tmp_path / "r.json").exists(), (proc.returncode, proc.stderr)
    report = json.loads((tmp_path / "r.json").read_text())
    return proc, [f for f in report["functions"] if f["compiles"]], report["unwatched"]


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_jit_of_a_transformed_partial_is_watched_counted_and_fails_the_budget(tmp_path, name):
    source = transformed_partial(TRANSFORMS[name])
    proc, functions, unwatched = watched(tmp_path, source, "--fail-on-recompile", "1")
    assert proc.returncode == 3, proc.stderr
    assert [f["compiles"] for f in functions] == [3]
    assert functions[0]["causes"][0]["text"] == "x.shape[0] took 3 values in [3, 7]"
    assert not any("loss" in name for name in unwatched), unwatched


def test_a_transformed_partial_is_headed_by_the_programs_function_not_jaxs_wrapper(tmp_path):
    source = transformed_partial(TRANSFORMS["value_and_grad"])
    proc, functions, _ = watched(tmp_path, source)
    assert proc.returncode == 0, proc.stderr
    assert (functions[0]["function"], functions[0]["location"]) == ("loss", f"{tmp_path / 'prog.py'}:3")
    assert "traceback_util" not in proc.stderr and "loss  (prog.py:3)" in proc.stderr


def test_watched_jit_of_a_transformed_partial_is_headed_by_the_programs_function(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(transformed_partial(TRANSFORMS["value_and_grad"]).replace(
        "import functools, jax, jax.numpy as jnp", "import functools, jax, jax.numpy as jnp, shapewatch").replace(
        "f = jax.jit(", "f = shapewatch.watched_jit("))
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", "SHAPEWATCH_REPORT": "full"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "loss  (prog.py:3)" in proc.stderr
    assert "jax/_src" not in proc.stderr, proc.stderr


OPTAX_UPDATE = textwrap.dedent('''\
    import jax, jax.numpy as jnp, optax

    opt = optax.sgd(0.1)
    update = jax.jit(opt.update)
    for n in (3, 5, 7):
        w = jnp.ones(n)
        update(w, opt.init(w), w)
''')


def test_a_jit_in_the_program_of_an_installed_librarys_closure_is_watched_at_the_jit_line(tmp_path):
    pytest.importorskip("optax")
    # optax's update, like Haiku's apply, is a closure defined in site-packages: the jit is the program's
    proc, functions, _ = watched(tmp_path, OPTAX_UPDATE, "--fail-on-recompile", "1")
    assert proc.returncode == 3, proc.stderr
    assert [f["compiles"] for f in functions] == [3]
    assert functions[0]["location"] == f"{tmp_path / 'prog.py'}:{line_of(OPTAX_UPDATE, 'jax.jit(')}"
    assert functions[0]["function"].endswith("update_fn")
    assert "site-packages" not in proc.stderr


HAIKU_APPLY = textwrap.dedent('''\
    import haiku as hk, jax, jax.numpy as jnp

    net = hk.without_apply_rng(hk.transform(lambda x: hk.Linear(4)(x).sum()))
    params = net.init(jax.random.PRNGKey(0), jnp.ones((3, 8)))
    apply = jax.jit(net.apply)
    for n in (3, 5, 7, 9):
        apply(params, jnp.ones((n, 8)))
''')


def test_a_jit_of_a_haiku_apply_is_watched_and_fails_the_budget(tmp_path):
    pytest.importorskip("haiku", reason="dm-haiku is not installed here (requirements/*.txt pin it where it imports)")
    proc, functions, _ = watched(tmp_path, HAIKU_APPLY, "--fail-on-recompile", "1")
    assert proc.returncode == 3, proc.stderr
    assert [f["compiles"] for f in functions] == [4]
    assert functions[0]["location"] == f"{tmp_path / 'prog.py'}:{line_of(HAIKU_APPLY, 'jax.jit(')}"
    assert functions[0]["causes"][0]["text"] == "x.shape[0] took 4 values in [3, 9]"
    assert "--fail-on-recompile 1: without_apply_rng.<locals>.apply_fn compiled 4 times" in proc.stderr
    assert f"apply_fn  (prog.py:{line_of(HAIKU_APPLY, 'jax.jit(')})" in proc.stderr  # the report, printed
    assert "site-packages" not in proc.stderr


def test_every_compile_of_a_haiku_apply_that_jax_logs_is_counted(tmp_path):
    pytest.importorskip("haiku", reason="dm-haiku is not installed here (requirements/*.txt pin it where it imports)")
    proc, functions, _ = watched(tmp_path, HAIKU_APPLY.replace("(3, 5, 7, 9)", "(3, 5, 3, 8, 5, 2)"))
    assert proc.returncode == 0, proc.stderr
    logged = run(tmp_path, HAIKU_APPLY.replace("(3, 5, 7, 9)", "(3, 5, 3, 8, 5, 2)"),
                 env={"JAX_LOG_COMPILES": "1"}).stderr.count("compilation of jit(apply_fn)")
    assert logged == 4  # JAX's own count: the lengths 3, 5, 8 and 2, once each
    assert [f["compiles"] for f in functions] == [logged]


LIBRARY_OWN_JIT = textwrap.dedent('''\
    import jax, jax.numpy as jnp, optax

    opt = optax.adam(1e-2)
    w = jnp.ones(3)
    state = opt.init(w)
    for n in (3, 4):
        opt.update(jnp.ones(3) * n, state, w)  # optax's own jits, made and called in optax
''')


def test_an_installed_librarys_own_jits_stay_unwatched(tmp_path):
    pytest.importorskip("optax")
    proc, functions, _ = watched(tmp_path, LIBRARY_OWN_JIT, "--fail-on-recompile", "0")
    assert proc.returncode == 0, proc.stderr
    assert functions == []


LINEN_PARTIAL = textwrap.dedent('''\
    import functools, jax, jax.numpy as jnp
    import flax.linen as nn

    class GPT(nn.Module):
        @nn.compact
        def __call__(self, idx, training=True):
            return nn.Dense(4)(idx)

    model = GPT()
    params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 3)))
    generate = jax.jit(functools.partial(model.apply, params, training=False))
    for n in (1, 2, 3):
        generate(jnp.ones((n, 3)))
    forward = jax.jit(model.apply)
    for n in (1, 2):
        forward(params, jnp.ones((n, 3)))
''')


def test_a_jitted_partial_of_a_linen_apply_is_named_at_the_jit_line_and_by_the_modules_call(tmp_path):
    pytest.importorskip("flax.linen")
    proc, functions, _ = watched(tmp_path, LINEN_PARTIAL)
    assert proc.returncode == 0, proc.stderr
    prog = tmp_path / "prog.py"
    named = {(f["function"], f["location"]): f["causes"][0]["text"] for f in functions}
    assert named == {
        ("GPT.apply", f"{prog}:{line_of(LINEN_PARTIAL, 'generate = jax.jit(')}"): "idx.shape[0] took 3 values in [1, 3]",
        ("GPT.apply", f"{prog}:{line_of(LINEN_PARTIAL, 'forward = jax.jit(')}"): "idx.shape[0] took 2 values in [1, 2]",
    }
    assert "flax/linen" not in proc.stderr and "args[0]" not in proc.stderr


BOUND_METHOD_PARTIAL = textwrap.dedent('''\
    import functools, jax, jax.numpy as jnp

    class Base:
        def forward(self, params, tokens, scale):
            return (tokens @ params).sum() * scale

    class Model(Base):
        pass

    model = Model()
    step = jax.jit(functools.partial(model.forward, scale=2.0))
    for n in (1, 2, 3):
        step(jnp.ones((3, 2)), jnp.ones((n, 3)))
''')


def test_a_jitted_partial_of_a_bound_method_is_named_after_the_objects_class_at_the_jit_line(tmp_path):
    proc, functions, _ = watched(tmp_path, BOUND_METHOD_PARTIAL)
    assert proc.returncode == 0, proc.stderr
    assert [(f["function"], f["location"]) for f in functions] == [
        ("Model.forward", f"{tmp_path / 'prog.py'}:{line_of(BOUND_METHOD_PARTIAL, 'jax.jit(')}")]
    assert functions[0]["causes"][0]["text"] == "tokens.shape[0] took 3 values in [1, 3]"


WEAK_ARRAY = textwrap.dedent('''\
    import jax, jax.numpy as jnp

    @jax.jit
    def step(w, x):
        return w * 2.0 + x.sum()

    w = jnp.array(1.0)  # weakly typed; the step returns a typed float32
    x = jnp.ones(3)
    w = step(w, x)
    w = step(w, x)
''')


def test_a_weakly_typed_array_is_named_as_one_not_as_a_python_scalar(tmp_path):
    proc, functions, _ = watched(tmp_path, WEAK_ARRAY)
    assert proc.returncode == 0, proc.stderr
    assert functions[0]["misses"][1]["explanation"] == "w: weakly typed float32 array -> float32 array"
    assert functions[0]["causes"][0]["text"].startswith("w flipped between a weakly typed array")
    assert "Python scalar (weak" not in proc.stderr


def test_a_python_scalar_is_still_named_as_one(tmp_path):
    source = WEAK_ARRAY.replace("w = jnp.array(1.0)", "w = 1.0")
    proc, functions, _ = watched(tmp_path, source)
    assert functions[0]["misses"][1]["explanation"] == "w: Python scalar (weak_type) -> float32 array"
    assert functions[0]["causes"][0]["text"] == "w flipped between a Python scalar (weak type) and a typed array"


LOGGING_PROGRAM = textwrap.dedent('''\
    import logging, jax, jax.numpy as jnp

    logging.basicConfig(level=logging.INFO)  # as absl's --alsologtostderr does
    f = jax.jit(lambda x: x + 1)
    f(jnp.ones(1)); f(jnp.ones(2))
    logging.getLogger("prog").info("the program's own line")
''')


def test_shapewatchs_log_is_silent_under_run_in_a_program_that_logs_info(tmp_path):
    proc = run(tmp_path, LOGGING_PROGRAM, "--report", "off")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["INFO:prog:the program's own line"]


@pytest.mark.parametrize("asked", [("-v",), ("SHAPEWATCH_LOG=info",)])
def test_shapewatchs_log_prints_each_compile_once_when_asked(tmp_path, asked):
    args = [a for a in asked if a.startswith("-")]
    env = dict(a.split("=", 1) for a in asked if "=" in a)
    proc = run(tmp_path, LOGGING_PROGRAM, "--report", "off", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    logged = [line for line in proc.stderr.splitlines() if line.startswith("[shapewatch]")]
    assert [line.endswith(("first compile", "x.shape[0]: 1 -> 2")) for line in logged] == [True, True]
    assert "INFO:prog:the program's own line" in proc.stderr


def test_a_log_level_that_is_not_valid_is_a_usage_error_listing_the_valid_ones(tmp_path):
    proc = run(tmp_path, LOGGING_PROGRAM, env={"SHAPEWATCH_LOG": "loud"})
    assert proc.returncode == 2
    assert "SHAPEWATCH_LOG='loud' is not valid: use info, debug" in proc.stderr


def test_the_pytest_fixture_and_warm_find_a_stand_in_named_function_by_the_name_its_misses_carry():
    import functools

    import jax.numpy as jnp

    import shapewatch
    from shapewatch._monitor.jit import watched_target
    from shapewatch._monitor.jit_site import code_key_of

    class Model:
        def forward(self, tokens, scale):
            return tokens.sum() * scale

    step = shapewatch.watched_jit(functools.partial(Model().forward, scale=2.0))
    step(jnp.ones(2))
    (function,) = shapewatch.report().functions
    _, name, module, location = code_key_of(watched_target(step))
    assert (name, module, location) == (function.record.function, function.record.module, function.record.location)
    jit_line = line_of(Path(__file__).read_text(), "step = shapewatch.watched_jit(functools.partial(Model()")
    assert name.endswith("Model.forward") and location.endswith(f"test_run_jit_site.py:{jit_line}")
