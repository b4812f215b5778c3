#!/bin/sh
# Writes the pinned test environments anew from the newest releases: requirements/pyX.Y.txt for
# every Python 3.10 to 3.13 found (the newest jax that Python can install), and
# requirements/jax-min.txt (the oldest supported jax, given as $1, on Python 3.10).
# Usage: tools/lock.sh 0.5.0
# Lock each with the oldest patch release of that Python you want to support (a package may
# need 3.11.5 where Debian 12 ships 3.11.2): name it with PYTHON_3_11=/usr/bin/python3.11 etc.
set -eu
cd "$(dirname "$0")/.."
extras="test,dev,frameworks,notebooks,grain,docs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
freeze() {  # python, output, header, pip arguments...
    python=$1 out=$2 header=$3
    shift 3
    "$python" -m venv "$work/venv"
    "$work/venv/bin/python" -m pip install --quiet --upgrade pip
    "$work/venv/bin/python" -m pip install --quiet "$@"
    jax=$("$work/venv/bin/python" -c 'import jax; print(jax.__version__)')
    { printf '%s\n' "$header" | sed "s/JAX/$jax/"; "$work/venv/bin/python" -m pip freeze --exclude-editable; } > "$out"
    rm -rf "$work/venv"
    echo "shapewatch: wrote $out (jax $jax)"
}
for v in 3.13 3.12 3.11 3.10; do
    eval "python=\${PYTHON_$(echo "$v" | tr . _):-}"
    [ -n "$python" ] || python=$(/bin/sh tools/pick_python.sh "$v") || { echo "shapewatch: no Python $v found; requirements/py$v.txt left as it is" >&2; continue; }
    freeze "$python" "requirements/py$v.txt" "# The pinned test environment for Python $v: jax JAX, the newest jax for this Python,
# and every test, framework, docs and lint dependency at the version tested.
# make installs it (then shapewatch itself, editable); make lock writes it anew." -e ".[$extras]"
done
python=$(/bin/sh tools/pick_python.sh 3.10) || { echo "shapewatch: no Python 3.10 found; requirements/jax-min.txt left as it is" >&2; exit 0; }
freeze "$python" requirements/jax-min.txt "# The pinned test environment for the oldest supported jax: jax JAX on Python 3.10,
# with the releases of numpy, scipy, Equinox, Flax and optax that still support it.
# make installs it for test-compat (then shapewatch itself, editable); make lock writes it anew." \
    "jax==$1" "jaxlib==$1" "numpy<2.3" "scipy<1.16" "equinox==0.13.8" "flax==0.10.4" "optax==0.2.5" "dm-haiku==0.0.17" \
    -e ".[test,notebooks,grain]"
