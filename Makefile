# shapewatch: `make demo` and `make test` do all the set-up from a fresh clone.
#
# They need a Python 3.10 to 3.13, make, and a network to the package index. They take the
# newest supported Python found (pythonX.Y or python3 on PATH, then pyenv's versions), and
# install its pinned test environment, requirements/pyX.Y.txt: the newest jax for that Python
# (3.13 and 3.12: jax 0.12.0.1; 3.11: jax 0.10.2; 3.10: jax 0.6.2) and every test dependency
# at the version tested, so that every fresh machine gets the same result. Name a Python
# yourself with `make test PYTHON=/path/to/python3.X`.
#
#   make demo          the demo report
#   make test          the whole suite (on 2 workers; the few tests marked `alone`, which interrupt
#                      their own process or time real steps, after it), the doctests and every benchmark in --quick mode
#   make test-compat   the suite at the three points of the supported window:
#                        newest  jax 0.12.0.1 on Python 3.13 (or 3.12)
#                        main    jax 0.10.2 on Python 3.11
#                        oldest  jax 0.5.0 on Python 3.10 (requirements/jax-min.txt)
#                      a point whose Python is missing is skipped with a note (CI=true: fails);
#                      POINTS="main oldest" runs some of them
#   make test-latest   the suite on the newest of everything (no pins), to see drift first
#   make lock          writes the pinned environments anew from the newest releases
#   make docs          the documentation site, warnings as errors
#   make bench         every benchmark, printed as tables
#   make lint          ruff
#   make jax-suite     JAX's own jit tests with jax.jit swapped for watched_jit (JAX_SRC=a jax clone)
#   make flax-suite    Flax NNX's own tests that use jit, with the swap (FLAX_SRC=a flax clone)
SUPPORTED := 3.13 3.12 3.11 3.10
JAX_MIN := 0.5.0

ifeq ($(origin PYTHON), undefined)
PYTHON := $(shell $(SHELL) tools/pick_python.sh $(SUPPORTED))
endif
PYVER := $(if $(PYTHON),$(shell "$(PYTHON)" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null))
PINS ?= requirements/py$(PYVER).txt
VENV ?= .venv-py$(PYVER)
PY := $(VENV)/bin/python
JAX_OF = $(shell sed -n 's/^jax==//p' $(1) 2>/dev/null)
ABOUT = shapewatch: Python $(shell "$(PYTHON)" -c 'import platform; print(platform.python_version())' 2>/dev/null) ($(PYTHON)), jax $(call JAX_OF,$(PINS)) (pinned in $(PINS))

.PHONY: demo test test-compat test-point test-env test-latest lock docs bench lint jax-suite flax-suite clean FORCE

# An environment made by another Python (another patch release, or one since uninstalled) is
# set up again: its Python must be the one named, as the first line says.
PYID := import sys; print(sys.version.split()[0], sys.base_prefix)
ifneq ($(wildcard $(VENV)/.installed),)
ifneq ($(shell "$(PY)" -c '$(PYID)' 2>/dev/null),$(shell "$(PYTHON)" -c '$(PYID)' 2>/dev/null))
$(VENV)/.installed: FORCE
endif
endif

$(VENV)/.installed: $(PINS) pyproject.toml
	@echo "$(ABOUT): setting up $(VENV)"
	"$(PYTHON)" -m venv --clear $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r $(PINS)
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

# No pinned environment for this Python: say why, and what to do.
requirements/%.txt:
	@test -n "$(PYTHON)" || { echo "shapewatch: make demo and make test need a Python 3.10 to 3.13; none was found as python3.13 .. python3.10 or python3 on PATH, nor in pyenv's versions. Install one (your system's python3 package will do) or name it: make test PYTHON=/path/to/python3.X" >&2; exit 2; }
	@test -n "$(PYVER)" || { echo "shapewatch: PYTHON=$(PYTHON) does not run as a Python (\"$(PYTHON)\" -c 'import sys' failed); name a Python 3.10 to 3.13: make test PYTHON=/path/to/python3.X" >&2; exit 2; }
	@echo "shapewatch: $(PYTHON) is Python $(PYVER), and there is no $@: the supported Pythons are 3.10 to 3.13. Name another (make test PYTHON=/path/to/python3.X) or try the newest of everything: make test-latest" >&2; exit 2

demo: $(VENV)/.installed
	@echo "$(ABOUT)"
	$(PY) -m shapewatch demo

# The whole suite (with the docs' checked outputs), the doctests, every benchmark in --quick mode.
test: $(VENV)/.installed
	@echo "$(ABOUT)"
	$(PY) -m pytest -n 2 -q -m "not alone"
	$(PY) -m pytest -q -m alone
	$(PY) -m pytest -q --doctest-modules shapewatch -p no:shapewatch
	$(PY) benchmarks/run.py --quick --jobs 2 --out /dev/null

# The suite in one environment (PYTHON, PINS and VENV as given).
test-env: $(VENV)/.installed
	@echo "$(ABOUT)"
	$(PY) -m pytest -n 2 -q -m "not alone"
	$(PY) -m pytest -q -m alone

# One point of the window, skipped with a note when its Python is missing (CI=true: fails).
test-point:
	@p=$$($(SHELL) tools/pick_python.sh $(POINT_PYTHONS)); \
	if [ -z "$$p" ]; then \
	  msg="shapewatch: skipped the $(POINT_NAME) point ($(POINT_JAX)): no Python $(or $(POINT_WANT),$(POINT_PYTHONS)) on PATH or in pyenv's versions; install one (for example: pyenv install $(firstword $(POINT_PYTHONS))) or your system's python$(firstword $(POINT_PYTHONS)) package"; \
	  if [ "$(CI)" = "true" ]; then echo "$$msg; CI has every Python, so this fails" >&2; exit 2; fi; \
	  echo "$$msg" >&2; exit 0; \
	fi; \
	$(MAKE) --no-print-directory test-env PYTHON="$$p" $(POINT_VARS)

POINTS ?= newest main oldest
test-compat:
	$(if $(filter newest,$(POINTS)),@$(MAKE) --no-print-directory test-point POINT_NAME=newest POINT_PYTHONS="3.13 3.12" POINT_WANT="3.13 or 3.12" POINT_JAX="jax 0.12.0.1")
	$(if $(filter main,$(POINTS)),@$(MAKE) --no-print-directory test-point POINT_NAME=main POINT_PYTHONS="3.11" POINT_JAX="jax 0.10.2")
	$(if $(filter oldest,$(POINTS)),@$(MAKE) --no-print-directory test-point POINT_NAME=oldest POINT_PYTHONS="3.10" POINT_JAX="jax $(JAX_MIN)" \
		POINT_VARS="PINS=requirements/jax-min.txt VENV=.venv-jax-min")

# The newest of everything, no pins: what a user's `pip install shapewatch jax` gets today.
test-latest:
	@test -n "$(PYTHON)" || { echo "shapewatch: test-latest needs a Python 3.10 to 3.13" >&2; exit 2; }
	"$(PYTHON)" -m venv --clear .venv-latest
	.venv-latest/bin/python -m pip install --quiet --upgrade pip
	.venv-latest/bin/python -m pip install --quiet --upgrade -e ".[test,dev,frameworks,notebooks,grain,docs]"
	@echo "shapewatch: newest of everything: Python $(PYVER), jax $$(.venv-latest/bin/python -c 'import jax; print(jax.__version__)')"
	.venv-latest/bin/python -m pytest -n 2 -q -m "not alone"
	.venv-latest/bin/python -m pytest -q -m alone

# Writes requirements/pyX.Y.txt for every Python found, and jax-min.txt, from the newest releases.
lock:
	$(SHELL) tools/lock.sh $(JAX_MIN)

docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d site

# Every benchmark on this Python's jax; the overhead tables also get a row from the other points
# of the window that are set up (make test-compat sets them up).
bench: $(VENV)/.installed
	$(PY) benchmarks/run.py --out bench-results.md $(foreach v,.venv-py3.11 .venv-jax-min,$(if $(wildcard $(v)/.installed),$(if $(filter $(v),$(VENV)),,--python $(v)/bin/python)))

# JAX's own tests of jit (api, pjit, jax_jit, checkify, compilation_cache) and of what jit carries
# (mutable_array, hijax, aot, export, debug_info, memories, layout, cache_key, stateful_rng) at the tag
# of the installed jax, as released and with jax.jit swapped for watched_jit: prints per file the tests
# that fail only with the swap (exit 1 if one is not a known, explained difference). Needs a clone of
# jax-ml/jax with its tags; run it on the jax of your choice: make jax-suite JAX_SRC=path/to/jax
# PYTHON=python3.11 (a jax newer than the clone's tags: JAX_SUITE_REF=its newest tag or commit)
JAX_SUITE_JOBS ?= 2
jax-suite: $(VENV)/.installed
	@test -n "$(JAX_SRC)" || { echo "shapewatch: make jax-suite needs a JAX clone: make jax-suite JAX_SRC=path/to/jax (git clone https://github.com/jax-ml/jax)" >&2; exit 2; }
	$(PY) tools/jax_suite.py --jax-src "$(JAX_SRC)" -n $(JAX_SUITE_JOBS) $(if $(JAX_SUITE_REF),--ref "$(JAX_SUITE_REF)")

# Flax NNX's own tests that use jit (tests/nnx at the commit that set the installed flax's version),
# as released and with jax.jit swapped for watched_jit: prints per file the tests that fail only with
# the swap (exit 1 if any). make flax-suite FLAX_SRC=path/to/flax (git clone https://github.com/google/flax)
flax-suite: $(VENV)/.installed
	@test -n "$(FLAX_SRC)" || { echo "shapewatch: make flax-suite needs a Flax clone: make flax-suite FLAX_SRC=path/to/flax (git clone https://github.com/google/flax)" >&2; exit 2; }
	$(PY) tools/flax_nnx_suite.py --flax-src "$(FLAX_SRC)" -n $(JAX_SUITE_JOBS)

lint: $(VENV)/.installed
	$(PY) -m ruff check shapewatch tests benchmarks examples tools

clean:
	rm -rf .venv .venv-py* .venv-jax-* .venv-latest site build dist *.egg-info
