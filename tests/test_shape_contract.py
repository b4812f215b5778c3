"""A checked-in manifest as the set of signatures a program may compile: shapewatch run --expect,
and shapewatch.expect_manifest for tests."""

from __future__ import annotations

import subprocess
import sys

import jax.numpy as jnp
import pytest

import shapewatch
from tests._across import PROGRAM, environment, run


def _run_expect(tmp_path, manifest, **variables):
    return subprocess.run([sys.executable, "-m", "shapewatch", "run", "--expect", str(manifest), PROGRAM],
                          env=environment(tmp_path / "cache", SHAPEWATCH_MANIFEST="off", **variables),
                          capture_output=True, text=True, timeout=240)


@pytest.fixture
def contract(tmp_path):
    run(tmp_path / "cache", LENGTHS="8")
    return tmp_path / "cache.shapewatch" / "_across_program.p0.json"


def test_a_run_inside_the_manifest_passes(tmp_path, contract):
    proc = _run_expect(tmp_path, contract, LENGTHS="8")
    assert proc.returncode == 0, proc.stderr
    assert "outside" not in proc.stderr


def test_a_new_signature_fails_the_run_naming_the_function_and_the_signature(tmp_path, contract):
    proc = _run_expect(tmp_path, contract, LENGTHS="8,12")
    assert proc.returncode == 3
    assert (f"[shapewatch] step compiled a signature outside {contract}: x: float32[2,12]; it differs from the "
            "nearest allowed signature in x.shape[1]: 12 (the manifest: 8). Fix the shape (pad or bucket it), "
            "or, if it is expected, write a new manifest and check it in") in proc.stderr


def test_a_manifest_that_cannot_be_read_is_a_usage_error(tmp_path):
    proc = _run_expect(tmp_path, tmp_path / "missing.json")
    assert proc.returncode == 2
    assert f"[shapewatch] run --expect: {tmp_path / 'missing.json'}: no such manifest" in proc.stderr


def test_expect_manifest_fails_a_test_that_compiles_a_new_signature(tmp_path):
    @shapewatch.watched_jit
    def step(x):
        return x * 2

    step(jnp.ones(4))
    path = shapewatch.write_manifest(tmp_path / "contract.json")
    with shapewatch.expect_manifest(path):
        step(jnp.ones(4))  # cached: nothing compiles
    with pytest.raises(shapewatch.ManifestError, match=r"step compiled a signature outside .*contract.json: "
                                                       r"x: float32\[5\]; .* x.shape\[0\]: 5 \(the manifest: 4\)"):
        with shapewatch.expect_manifest(path):
            step(jnp.ones(5))


def test_expect_manifest_names_a_function_the_manifest_does_not_hold(tmp_path):
    path = shapewatch.write_manifest(tmp_path / "empty.json")
    other = shapewatch.watched_jit(lambda x: x - 1)
    with pytest.raises(shapewatch.ManifestError, match=r"<locals>.<lambda> compiled \(x: float32\[2\]\), and "
                                                       r".*empty.json holds no signature of .*<lambda>"):
        with shapewatch.expect_manifest(path):
            other(jnp.ones(2))


METHOD_PROGRAM = '''
import functools
import jax.numpy as jnp
import shapewatch

class Model:
    @functools.partial(shapewatch.watched_jit, static_argnums=0)
    def apply(self, x):
        return x * 3

    def __hash__(self):
        return 1

    def __eq__(self, other):
        return isinstance(other, Model)

Model().apply(jnp.ones(3))
'''


def test_a_static_object_whose_repr_holds_its_address_is_the_same_signature_in_the_next_run(tmp_path):
    program = tmp_path / "model.py"
    program.write_text(METHOD_PROGRAM)
    contract = tmp_path / "model.json"
    run(tmp_path / "cache", program=str(program), SHAPEWATCH_MANIFEST=contract)  # a static self: its repr
    assert " at 0x" in contract.read_text()  # holds its address, new in each run
    proc = subprocess.run([sys.executable, "-m", "shapewatch", "run", "--expect", str(contract), str(program)],
                          env=environment(tmp_path / "cache", SHAPEWATCH_MANIFEST="off"),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
