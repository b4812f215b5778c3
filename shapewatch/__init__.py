"""shapewatch: see, explain and fix JAX recompiles."""


import importlib.metadata as _metadata

from shapewatch._analysis import Cause as Cause
from shapewatch._api import misses as misses
from shapewatch._api import reset as reset
from shapewatch._api import suggest_buckets as suggest_buckets
from shapewatch._bench import BenchResult as BenchResult
from shapewatch._bench import BenchWarning as BenchWarning
from shapewatch._bench import CompareResult as CompareResult
from shapewatch._bench import bench as bench
from shapewatch._config import configure as configure
from shapewatch._distributed import check_hosts_agree as check_hosts_agree
from shapewatch._errors import RecompileError as RecompileError
from shapewatch._errors import RecompileWarning as RecompileWarning
from shapewatch._errors import ShapewatchWarning as ShapewatchWarning
from shapewatch._guards import expect_compiles as expect_compiles
from shapewatch._guards import freeze as freeze
from shapewatch._guards import no_recompiles as no_recompiles
from shapewatch._guards import unfreeze as unfreeze
from shapewatch._jit import is_watched as is_watched
from shapewatch._jit import watched_jit as watched_jit
from shapewatch._merge import merge_reports as merge_reports
from shapewatch._records import FunctionRecord as FunctionRecord
from shapewatch._records import Miss as Miss
from shapewatch._report import FunctionReport as FunctionReport
from shapewatch._report import Report as Report
from shapewatch._report import install_exit_hook as _install_exit_hook
from shapewatch._report import report as report
from shapewatch._signature import ArrayLeaf as ArrayLeaf
from shapewatch._signature import Change as Change
from shapewatch._signature import Signature as Signature
from shapewatch._signature import StaticLeaf as StaticLeaf

try:
    __version__ = _metadata.version("shapewatch")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"

from shapewatch import buckets as buckets  # noqa: E402  (after the core it may use)

_install_exit_hook()

__all__ = [
    "ArrayLeaf",
    "BenchResult",
    "BenchWarning",
    "CompareResult",
    "Cause",
    "FunctionReport",
    "Report",
    "Change",
    "FunctionRecord",
    "Miss",
    "RecompileError",
    "RecompileWarning",
    "ShapewatchWarning",
    "Signature",
    "StaticLeaf",
    "__version__",
    "bench",
    "buckets",
    "check_hosts_agree",
    "configure",
    "expect_compiles",
    "freeze",
    "is_watched",
    "merge_reports",
    "misses",
    "no_recompiles",
    "report",
    "reset",
    "suggest_buckets",
    "unfreeze",
    "watched_jit",
]
