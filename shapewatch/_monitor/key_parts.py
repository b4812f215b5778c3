"""The parts of JAX's persistent-cache key that are the same for every compile of a run.

JAX's key (``jax/_src/cache_key.py``, jax 0.5 to 0.12) hashes the lowered module
without debug information, the jaxlib version, the backend's platform and
platform version, the XLA flags (from ``XLA_FLAGS``, ``LIBTPU_INIT_ARGS`` and
``--xla*`` command-line arguments, dump flags excluded), the compile options
(device assignment, and what configuration options such as the compiler effort
put there), the accelerator topology, the compression and a custom hook. All of
them but the module and the compile options are per run: :func:`key_parts` reads
them, and the configuration values that enter the compile options or decide
whether an entry is written, so that two runs' parts can be compared by name.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: The XLA flags as JAX's key read them at this process's first compile (XLA removes the flags it
#: parses from ``XLA_FLAGS`` when the backend starts, so they are read where JAX reads them).
flags_at_first_compile: list[list[str]] = []

#: Configuration values that enter the key (through the compile options or the program) or
#: decide what is written and read.
CONFIG_NAMES = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_exec_time_optimization_effort",
    "jax_memory_fitting_effort",
    "jax_compiler_detailed_logging_min_ops",
    "jax_compilation_cache_include_metadata_in_key",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
    "jax_compilation_cache_dir",
    "jax_enable_compilation_cache",
    "jax_compilation_cache_max_size",
)


def xla_flags() -> list[str]:
    """The XLA flags JAX puts into the key now, sorted, as ``cache_key._hash_xla_flags`` collects them
    (flags XLA parsed when the backend started are gone from ``XLA_FLAGS`` by then)."""
    flags: list[str] = []
    for variable in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):
        flags += (os.environ.get(variable) or "").split()
    flags += [a for a in sys.argv if a.startswith("--xla")]
    try:
        from jax._src import cache_key

        excluded = set(getattr(cache_key, "xla_flags_to_exclude_from_cache_key", ()))
    except Exception:
        excluded = set()
    return sorted(f for f in flags if f.split("=")[0] not in excluded)


def _try(get: Any) -> Any:
    try:
        return get()
    except Exception:  # a key part that cannot be read is None, never an error
        return None


def key_parts() -> dict[str, Any]:
    """The per-run parts of the persistent-cache key, each ``None`` where it cannot be read."""
    import jax

    def jaxlib_version() -> str:
        import jaxlib

        return str(jaxlib.__version__)

    def platform_version() -> str:
        from jax._src import xla_bridge

        return str(xla_bridge.get_backend().platform_version)

    devices = _try(jax.devices) or []
    config = {}
    for name in CONFIG_NAMES:
        value = _try(lambda name=name: getattr(jax.config, name))
        config[name] = value if value is None or isinstance(value, bool | int | float | str) else str(value)
    return {
        "jax": jax.__version__,
        "jaxlib": _try(jaxlib_version),
        "backend": _try(jax.default_backend),
        "platform_version": _try(platform_version),
        "device_kind": str(devices[0].device_kind) if devices else None,
        "device_count": len(devices) if devices else None,
        "local_device_count": _try(jax.local_device_count),
        "process_count": _try(jax.process_count),
        "xla_flags": (flags_at_first_compile or [xla_flags()])[0],
        "config": config,
    }
