# shapewatch: `make demo` and `make test` do all the set-up from a fresh clone.
#
# Three points of the supported window (jax 0.5.0 .. 0.12.x, Python 3.10 .. 3.13) are tested:
#   make test         the newest:        jax $(JAX_NEWEST) on Python 3.13 (3.12 will do)
#   make test-compat  the most installed: jax $(JAX_MAIN) on Python 3.11
#                     and the oldest:     jax $(JAX_MIN) on Python 3.10 (or the next one found)
# Every point also installs Equinox, Flax and optax (the frameworks' tests; the oldest jax
# takes the releases that still support it). Each Python is looked up as pythonX.Y on PATH,
# then in pyenv's versions; pass
# PYTHON_NEWEST=..., PYTHON_MAIN=... or PYTHON_MIN=... to choose one yourself.
JAX_NEWEST ?= 0.12.0.1
JAX_MAIN ?= 0.10.2
JAX_MIN ?= 0.5.0
VENV ?= .venv
VENV_MAIN ?= .venv-jax-main
VENV_MIN ?= .venv-jax-min

# The first working interpreter of the given versions: pythonX.Y on PATH, else pyenv's.
find_python = $(firstword $(foreach v,$(1),$(shell for p in python$(v) "$$(pyenv root 2>/dev/null || echo $${PYENV_ROOT:-$$HOME/.pyenv})"/versions/$(v).*/bin/python$(v); do "$$p" -c pass >/dev/null 2>&1 && { echo "$$p"; break; }; done)))
ifeq ($(origin PYTHON_NEWEST), undefined)
PYTHON_NEWEST := $(call find_python,3.13 3.12)
endif
ifeq ($(origin PYTHON_MAIN), undefined)
PYTHON_MAIN := $(call find_python,3.11 3.12 3.13)
endif
ifeq ($(origin PYTHON_MIN), undefined)
PYTHON_MIN := $(call find_python,3.10 3.11 3.12 3.13)
endif

PY := $(VENV)/bin/python
PY_MAIN := $(VENV_MAIN)/bin/python
PY_MIN := $(VENV_MIN)/bin/python

# $(call need_python,VAR,what it is for,versions)
need_python = @test -n "$($(1))" || { echo "shapewatch: $(2) needs Python $(3), and none was found as python$(firstword $(3)) on PATH or in pyenv's versions. Install one (for example: pyenv install $(firstword $(3))) or name it: make $(1)=/path/to/python$(firstword $(3)) ..." >&2; exit 2; }

.PHONY: demo test test-compat bench lint clean

$(VENV)/.installed: pyproject.toml
	$(call need_python,PYTHON_NEWEST,jax $(JAX_NEWEST),3.13 or 3.12)
	$(PYTHON_NEWEST) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "jax==$(JAX_NEWEST)" "jaxlib==$(JAX_NEWEST)" -e ".[test,dev,frameworks]"
	touch $@

$(VENV_MAIN)/.installed: pyproject.toml
	$(call need_python,PYTHON_MAIN,jax $(JAX_MAIN),3.11 or newer)
	$(PYTHON_MAIN) -m venv $(VENV_MAIN)
	$(PY_MAIN) -m pip install --quiet --upgrade pip
	$(PY_MAIN) -m pip install --quiet "jax==$(JAX_MAIN)" "jaxlib==$(JAX_MAIN)" -e ".[test,frameworks]"
	touch $@

$(VENV_MIN)/.installed: pyproject.toml
	$(call need_python,PYTHON_MIN,jax $(JAX_MIN),3.10 or newer)
	$(PYTHON_MIN) -m venv $(VENV_MIN)
	$(PY_MIN) -m pip install --quiet --upgrade pip
	$(PY_MIN) -m pip install --quiet "jax==$(JAX_MIN)" "jaxlib==$(JAX_MIN)" "numpy<2.3" "scipy<1.16" \
		"equinox==0.13.8" "flax==0.10.4" "optax==0.2.5" -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(PY) -m shapewatch demo

# The whole suite (with doctests) and every benchmark in --quick mode, on the newest jax.
test: $(VENV)/.installed
	$(PY) -m pytest -n 2 -q
	$(PY) -m pytest -q --doctest-modules shapewatch -p no:shapewatch
	$(PY) benchmarks/run.py --quick --out /dev/null

# The same suite on the most installed and on the oldest supported jax.
test-compat: $(VENV_MAIN)/.installed $(VENV_MIN)/.installed
	$(PY_MAIN) -m pytest -n 2 -q
	$(PY_MIN) -m pytest -n 2 -q

# Every benchmark on the newest jax; the overhead tables also get a row from each other jax.
bench: $(VENV)/.installed $(VENV_MAIN)/.installed $(VENV_MIN)/.installed
	$(PY) benchmarks/run.py --out bench-results.md --python $(PY_MAIN) --python $(PY_MIN)

lint: $(VENV)/.installed
	$(PY) -m ruff check shapewatch tests benchmarks examples

clean:
	rm -rf $(VENV) $(VENV_MAIN) $(VENV_MIN) build dist *.egg-info
