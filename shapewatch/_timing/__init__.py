"""Timing: ``bench`` and ``bench.compare``, honest measurements of JAX functions.

``stats`` holds the statistics and units, ``calls`` the first call and warm-up
that both share, ``bench`` and ``compare`` the two measurements; this package
attaches ``compare`` to ``bench`` as ``bench.compare``.

May import: the monitor (a watched function's records split a first call's cost).
"""

from shapewatch._timing import bench as _bench
from shapewatch._timing import compare as _compare

_bench.bench.compare = _compare.compare  # type: ignore[attr-defined]
