"""shapewatch: see, explain and fix JAX recompiles.

The public names are re-exported here from the private wings (see the README's
architecture section): ``_monitor`` (what runs inside a miss), ``_reports``
(what reads the records), ``_guards``, ``_timing``, ``buckets`` (the fixer)
and ``_integrations`` (command line, pytest plugin, many processes).
"""

import importlib.metadata as _metadata

from shapewatch._guards.guards import expect_compiles as expect_compiles
from shapewatch._guards.guards import freeze as freeze
from shapewatch._guards.guards import no_recompiles as no_recompiles
from shapewatch._guards.guards import unfreeze as unfreeze
from shapewatch._integrations.adapters import install as _install_adapters
from shapewatch._integrations.contract import expect_manifest as expect_manifest
from shapewatch._integrations.distributed import check_hosts_agree as check_hosts_agree
from shapewatch._integrations.ipython import load_ipython_extension as load_ipython_extension
from shapewatch._integrations.ipython import unload_ipython_extension as unload_ipython_extension
from shapewatch._integrations.loaders import compile_records as compile_records
from shapewatch._integrations.manifest_file import install_exit_hook as _install_manifest_hook
from shapewatch._integrations.manifest_file import write_manifest as write_manifest
from shapewatch._integrations.patch import unwatch as unwatch
from shapewatch._integrations.patch import watch as watch
from shapewatch._integrations.warm import Warmup as Warmup
from shapewatch._integrations.warm import warm as warm
from shapewatch._monitor.access import misses as misses
from shapewatch._monitor.access import reset as reset
from shapewatch._monitor.config import configure as configure
from shapewatch._monitor.errors import ManifestError as ManifestError
from shapewatch._monitor.errors import RecompileError as RecompileError
from shapewatch._monitor.errors import RecompileWarning as RecompileWarning
from shapewatch._monitor.errors import ShapewatchWarning as ShapewatchWarning
from shapewatch._monitor.jit import is_watched as is_watched
from shapewatch._monitor.jit import watched_jit as watched_jit
from shapewatch._monitor.records import FunctionRecord as FunctionRecord
from shapewatch._monitor.records import Miss as Miss
from shapewatch._monitor.signature import ArrayLeaf as ArrayLeaf
from shapewatch._monitor.signature import Change as Change
from shapewatch._monitor.signature import Signature as Signature
from shapewatch._monitor.signature import StaticLeaf as StaticLeaf
from shapewatch._reports.analysis import Cause as Cause
from shapewatch._reports.manifest import load_manifest as load_manifest
from shapewatch._reports.merge import merge_reports as merge_reports
from shapewatch._reports.report import FunctionReport as FunctionReport
from shapewatch._reports.report import Report as Report
from shapewatch._reports.report import install_exit_hook as _install_exit_hook
from shapewatch._reports.report import report as report
from shapewatch._reports.suggest import suggest_buckets as suggest_buckets
from shapewatch._timing.bench import BenchResult as BenchResult
from shapewatch._timing.bench import BenchWarning as BenchWarning
from shapewatch._timing.bench import bench as bench
from shapewatch._timing.compare import CompareResult as CompareResult

try:
    __version__ = _metadata.version("shapewatch")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"

from shapewatch import buckets as buckets  # noqa: E402  (after the core it may use)

_install_manifest_hook()  # registered first, so it runs after the report's (atexit runs last-in first)
_install_exit_hook()
_install_adapters()

__all__ = [
    "ArrayLeaf",
    "BenchResult",
    "BenchWarning",
    "Cause",
    "Change",
    "CompareResult",
    "FunctionRecord",
    "FunctionReport",
    "ManifestError",
    "Miss",
    "RecompileError",
    "RecompileWarning",
    "Report",
    "ShapewatchWarning",
    "Signature",
    "StaticLeaf",
    "Warmup",
    "__version__",
    "bench",
    "buckets",
    "check_hosts_agree",
    "compile_records",
    "configure",
    "expect_compiles",
    "expect_manifest",
    "freeze",
    "is_watched",
    "load_ipython_extension",
    "load_manifest",
    "merge_reports",
    "misses",
    "no_recompiles",
    "report",
    "reset",
    "suggest_buckets",
    "unfreeze",
    "unload_ipython_extension",
    "unwatch",
    "warm",
    "watch",
    "watched_jit",
    "write_manifest",
]
