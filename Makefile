# shapewatch: `make demo` and `make test` do all the set-up from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
VENV_MIN ?= .venv-jax-min
# The newest and the oldest jax that shapewatch supports; both are tested.
JAX_NEWEST ?= 0.10.2
JAX_MIN ?= 0.5.0
PY := $(VENV)/bin/python
PY_MIN := $(VENV_MIN)/bin/python

.PHONY: demo test test-compat test-fast bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "jax==$(JAX_NEWEST)" "jaxlib==$(JAX_NEWEST)" -e ".[test,dev]"
	touch $@

$(VENV_MIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_MIN)
	$(PY_MIN) -m pip install --quiet --upgrade pip
	$(PY_MIN) -m pip install --quiet "jax==$(JAX_MIN)" "jaxlib==$(JAX_MIN)" "numpy<2.3" "scipy<1.16" -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(PY) -m shapewatch demo

# The whole suite (with doctests) and every benchmark in --quick mode.
test: $(VENV)/.installed
	$(PY) -m pytest -n 2 -q
	$(PY) -m pytest -q --doctest-modules shapewatch -p no:shapewatch
	$(PY) benchmarks/run.py --quick --out /dev/null

# The same suite against the oldest supported jax.
test-compat: $(VENV_MIN)/.installed
	$(PY_MIN) -m pytest -n 2 -q

bench: $(VENV)/.installed
	$(PY) benchmarks/run.py --out bench-results.md

lint: $(VENV)/.installed
	$(PY) -m ruff check shapewatch tests benchmarks examples

clean:
	rm -rf $(VENV) $(VENV_MIN) build dist *.egg-info
