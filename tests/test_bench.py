"""Tests of shapewatch.bench and bench.compare, on real JAX (CPU)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shapewatch._monitor.env import environment
from shapewatch._timing.bench import (
    NOISE_MEAN_RATIO,
    NOISE_P90_RATIO,
    BenchResult,
    BenchWarning,
    Stats,
    _noise,
    bench,
)
from shapewatch._timing.compare import CompareResult, _imprecise, compare

# Timings on a shared machine can be noisy at any time: tests that are not about a
# warning ignore BenchWarning (pytest.warns and recwarn still see every warning).
pytestmark = pytest.mark.filterwarnings("ignore::shapewatch._timing.bench.BenchWarning")


@pytest.fixture(scope="module")
def double():
    return jax.jit(lambda x: x * 2.0 + 1.0)


@pytest.fixture(scope="module")
def x():
    return jax.device_put(jnp.ones(16, jnp.float32))


def test_bench_is_callable_with_a_compare_attribute():
    assert callable(bench)
    assert bench.compare is compare
    assert BenchWarning.__module__ == "shapewatch"
    assert issubclass(BenchWarning, UserWarning)


def test_a_clean_device_array_benchmark_gives_no_warnings(recwarn):
    # About a millisecond per call, so that one scheduler hiccup cannot move the
    # mean much. Noise itself depends on the machine's load: when it is reported,
    # it must at least be true by the documented rule.
    a = jax.device_put(jnp.ones((192, 192), jnp.float32))
    matmuls = jax.jit(lambda a: (a @ a @ a @ a).sum())
    result = bench(matmuls, a, warmup=3, repeat=15)
    assert [w for w in result.warnings if not w.startswith("noisy")] == []
    if result.warnings:
        s = result.steady
        assert s.mean_s > NOISE_MEAN_RATIO * s.median_s or s.p90_s > NOISE_P90_RATIO * s.median_s
    emitted = [w for w in recwarn if issubclass(w.category, BenchWarning)]
    assert len(emitted) == (1 if result.warnings else 0)
    assert result.recompiles == 0
    assert result.samples == 15 == len(result.times_s)
    assert result.min_s <= result.p10_s <= result.median_s <= result.p90_s
    assert result.first_call.total_s > 0
    assert result.first_call.compiles >= 1


def test_the_noise_rule_passes_a_tight_spread_and_flags_a_long_tail():
    tight = Stats.of([1e-3 * (1 + 0.01 * (i % 7)) for i in range(50)])
    one_outlier = Stats.of([1e-3] * 49 + [0.2])
    slow_fifth = Stats.of([1e-3] * 40 + [3.5e-3] * 10)
    assert _noise(tight, "") is None
    assert "the mean is 5.0x the median" in _noise(one_outlier, "")
    assert "p90 is 3.5x" in _noise(slow_fifth, "")


def test_a_numpy_argument_warns_that_the_transfer_is_timed(double):
    with pytest.warns(BenchWarning, match=r"args\[0\] \(NumPy float32\[16\]\).*device_put"):
        result = bench(double, np.ones(16, np.float32), warmup=1, repeat=5)
    assert any("host arguments" in w for w in result.warnings)


def test_a_python_scalar_in_a_pytree_argument_is_named_by_its_path(double):
    fn = jax.jit(lambda p: p["w"] * 2)
    with pytest.warns(BenchWarning, match=r"args\[0\]\['w'\] \(Python float 3.0\)"):
        bench(fn, {"w": 3.0}, warmup=0, repeat=3)


def test_shapes_that_change_between_calls_warn_about_recompiles(double):
    counter = itertools.count(1)
    with pytest.warns(BenchWarning, match="recompiled"):
        result = bench(lambda: double(jnp.zeros(next(counter))), warmup=1, repeat=4)
    assert result.recompiles >= 4
    assert any("recompiled" in w for w in result.warnings)


def test_a_function_that_is_slow_every_tenth_call_warns_about_noise():
    counter = itertools.count(1)

    def sometimes_slow():
        if next(counter) % 10 == 0:
            time.sleep(0.02)

    with pytest.warns(BenchWarning, match="noisy.*median or the minimum"):
        result = bench(sometimes_slow, warmup=0, repeat=30)
    assert result.mean_s > 1.5 * result.median_s


def test_a_20_ms_sleep_is_measured_as_about_20_ms():
    # No upper bound in seconds (a loaded machine wakes a sleeper late): each timed call is
    # checked against the sleep it holds, measured from inside, and against the whole call.
    inside = []

    def nap():
        t0 = time.perf_counter()
        time.sleep(0.02)
        inside.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    result = bench(nap, warmup=1, repeat=5)
    whole = time.perf_counter() - t0
    timed = inside[-5:]  # the first call and the warmup call come first
    assert len(inside) == 7 and result.times_s and len(result.times_s) == 5
    assert all(t >= s > 0.019 for t, s in zip(result.times_s, timed, strict=True))  # one sleep each
    assert sum(result.times_s) + sum(inside[:2]) <= whole  # apart, not summed nor counted twice
    assert result.median_s == sorted(result.times_s)[2]
    assert 0.019 < result.median_s
    assert result.first_call.trace_s is None
    assert "ms" in str(result)


def test_min_time_keeps_timing_until_enough_time_was_measured(monkeypatch):
    # bench's clock made a counter that each call moves by exactly 2**-9 s (about 2 ms): a
    # loaded machine cannot make one call outlast min_time and end the timing after one sample
    now = [0.0]
    module = sys.modules["shapewatch._timing.bench"]
    monkeypatch.setattr(module, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: now[0])}))

    def call():
        now[0] += 2.0 ** -9

    result = bench(call, warmup=0, repeat=1, min_time=10 * 2.0 ** -9)
    assert result.times_s == [2.0 ** -9] * 10  # 1, then the 9 more that reach min_time
    assert sum(result.times_s) >= 10 * 2.0 ** -9
    assert result.samples > 1


def test_to_dict_is_json_serialisable_and_str_is_readable(double, x):
    result = bench(double, x, warmup=2, repeat=10)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["steady"]["samples"] == 10
    assert data["environment"]["jax"] == jax.__version__
    text = str(result)
    assert text.startswith("bench double.<locals>.<lambda>: first call")
    assert "median" in text and "p10..p90" in text and "(10 samples)" in text


def test_the_environment_records_versions_backend_and_process():
    env = environment()
    assert env["jax"] == jax.__version__
    assert env["backend"] == "cpu"
    assert env["device_count"] >= 1 and env["process_count"] == 1
    assert isinstance(env["x64"], bool) and env["cpu_count"]
    json.dumps(env)


def test_compare_of_a_function_with_itself_gives_a_ratio_near_one(double, x):
    result = bench.compare(double, double, x, warmup=2, repeat=20, rounds=20)
    assert isinstance(result, CompareResult)
    assert 0.5 < result.ratio < 2.0
    assert result.ratio_p10 <= result.ratio <= result.ratio_p90
    assert result.candidate.samples == result.baseline.samples == 20
    assert result.calls_per_round == 20
    json.dumps(result.to_dict())
    assert "ratio" in str(result)


def test_compare_warns_when_the_per_round_ratios_leave_the_ratio_imprecise():
    steady = np.full(100, 1.0) + np.linspace(-0.01, 0.01, 100)
    (lo, hi), warning = _imprecise(steady)
    assert lo <= 1.0 <= hi and warning is None
    scattered = np.geomspace(0.25, 4.0, 40)
    (lo, hi), warning = _imprecise(scattered)
    assert hi - lo > 0.1 and warning.startswith("imprecise: the ratio's 95% interval")


def test_compare_picks_the_block_size_when_repeat_is_none(double, x):
    # a call of microseconds is timed in blocks of many calls; one of 5 ms in blocks of one
    fast = bench.compare(double, double, x, warmup=1, rounds=4)
    assert fast.calls_per_round > 1

    def slow(v):
        time.sleep(0.005)
        return v

    assert bench.compare(slow, slow, x, warmup=1, rounds=2).calls_per_round == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"repeat": 0}, ValueError, r"^\[shapewatch\] bench: repeat must be >= 1, got 0"),
        ({"warmup": -1}, ValueError, r"^\[shapewatch\] bench: warmup must be >= 0, got -1"),
        ({"repeat": 2.5}, TypeError, r"^\[shapewatch\] bench: repeat must be an int >= 1"),
        ({"min_time": -0.1}, ValueError, r"^\[shapewatch\] bench: min_time must be >= 0"),
        ({"min_time": "1s"}, TypeError, r"^\[shapewatch\] bench: min_time must be seconds"),
    ],
)
def test_bad_settings_raise_a_clear_error(double, x, kwargs, error, match):
    with pytest.raises(error, match=match):
        bench(double, x, **kwargs)


def test_a_non_callable_raises_a_type_error(x):
    with pytest.raises(TypeError, match=r"^\[shapewatch\] bench: fn must be callable, got Array"):
        bench(x)
    with pytest.raises(TypeError, match=r"^\[shapewatch\] bench: g must be callable, got int 3"):
        bench.compare(jnp.sin, 3)
    with pytest.raises(ValueError, match=r"rounds must be >= 1, got 0"):
        bench.compare(jnp.sin, jnp.cos, rounds=0)


def test_a_function_that_raises_is_reported_not_timed():
    def broken():
        raise ValueError("boom")

    with pytest.raises(
        RuntimeError,
        match=r"broken raised ValueError\('boom'\) on its first call; nothing was timed",
    ) as info:
        bench(broken)
    assert isinstance(info.value.__cause__, ValueError)


def test_a_function_that_raises_later_names_the_call():
    counter = itertools.count(1)

    def fails_on_third_call():
        if next(counter) == 3:
            raise KeyError("late")

    with pytest.raises(RuntimeError, match=r"raised KeyError\('late'\) on warmup call 2 of 5"):
        bench(fails_on_third_call, warmup=5, repeat=3)


def test_a_watched_function_splits_its_first_call_into_trace_lower_and_compile():
    import shapewatch

    watched_jit = getattr(shapewatch, "watched_jit", None)
    try:
        from shapewatch._monitor.jit import is_watched  # noqa: F401
    except (ImportError, AttributeError):
        watched_jit = None
    if watched_jit is None:
        pytest.skip("shapewatch.watched_jit / shapewatch._monitor.jit.is_watched do not exist yet")
    fn = watched_jit(lambda v: jnp.tanh(v) * 3.0)
    fresh = jax.device_put(jnp.ones((7, 13, 3), jnp.float32))  # a shape nothing else uses
    result = bench(fn, fresh, warmup=1, repeat=5)
    first = result.first_call
    assert first.trace_s is not None and first.trace_s > 0
    assert first.lower_s is not None and first.compile_s is not None and first.compile_s > 0
    assert first.trace_s + first.lower_s + first.compile_s <= first.total_s * 1.01
    assert first.misses == 1
    again = bench(fn, fresh, warmup=0, repeat=1)
    assert again.first_call.misses == 0 and "no miss" in str(again)
    assert result.recompiles == 0
    assert not [w for w in result.warnings if "recompiled" in w]
    assert "compile" in str(result)


def test_bench_result_is_exported_for_type_checks(double, x):
    assert isinstance(bench(double, x, warmup=0, repeat=1), BenchResult)


def test_the_runner_collects_every_section_and_reports_a_failing_program(tmp_path):
    (tmp_path / "bench_a_ok.py").write_text(
        "import sys\nprint('### ok' + (' quick' if '--quick' in sys.argv else ''))\nprint('| a |')\n"
    )
    (tmp_path / "bench_b_broken.py").write_text("raise SystemExit('broken on purpose')\n")
    (tmp_path / "bench_c_ok.py").write_text("print('### third')\n")
    out = tmp_path / "report.md"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "run.py"), "--quick"]
        + ["--dir", str(tmp_path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "FAILED: bench_b_broken.py" in proc.stderr
    report = out.read_text()
    assert report == proc.stdout
    assert report.startswith("## shapewatch benchmarks (quick)")
    assert "| jax / jaxlib |" in report
    assert (
        report.index("### ok quick") < report.index("broken on purpose") < report.index("### third")
    )
