#!/bin/sh
# Prints the path of the first working Python of the versions given (newest first, as
# "3.13 3.12 ..."): for each version, pythonX.Y on PATH, then python3 on PATH if it is that
# version, then pyenv's versions. Prints nothing (and exits 1) when none is found.
pyenv_root=$( (pyenv root) 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
for v in "$@"; do
    for p in "python$v" python3 "$pyenv_root"/versions/"$v".*/bin/python"$v"; do
        found=$(command -v "$p" 2>/dev/null) || continue
        [ "$("$found" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$v" ] || continue
        echo "$found"
        exit 0
    done
done
exit 1
