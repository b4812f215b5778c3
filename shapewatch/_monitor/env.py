"""The environment a measurement or a record was taken in.

Timings and compile counts mean little without the machine, the JAX version and
the backend they came from, so every benchmark result (and any other record that
wants it) carries :func:`environment`.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import sys
from typing import Any

__all__ = ["cpu_model", "environment"]


@functools.lru_cache(maxsize=1)
def cpu_model() -> str | None:
    """The CPU model name, from ``/proc/cpuinfo`` where present.

    Returns:
        The first ``model name`` line (Linux x86), else ``platform.processor()``,
        else ``None`` when neither says anything.

    >>> isinstance(cpu_model(), (str, type(None)))
    True
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _try(get: Any) -> Any:
    try:
        return get()
    except Exception:  # noqa: BLE001 - an environment record must never fail
        return None


_seen_process: list[tuple[int, int]] = []  # (index, count) while jax.distributed was up


def note_process() -> None:
    """Remembers this process's place in a jax.distributed job (the report at exit may come after shutdown)."""
    from shapewatch._monitor.compat import distributed_state

    state = distributed_state()
    if state.client is not None and not _seen_process:
        _seen_process.append((int(state.process_id), int(state.num_processes)))


def process_place() -> tuple[int, int]:
    """(index, count) in a jax.distributed job, (0, 1) without one; asks no backend."""
    note_process()
    return _seen_process[0] if _seen_process else (0, 1)


def _process_index() -> int:
    # jax.distributed knows the process even where the backend does not (CPU without collectives).
    import jax

    note_process()
    return _seen_process[0][0] if _seen_process else jax.process_index()


def _process_count() -> int:
    import jax

    note_process()
    return _seen_process[0][1] if _seen_process else jax.process_count()


def environment() -> dict[str, Any]:
    """Describe the software and hardware this process runs on.

    Initialises the JAX backend if it is not yet (it asks for the devices). Every
    field that cannot be read is ``None`` rather than an error.

    Returns:
        A JSON-serialisable dict with the keys ``jax``, ``jaxlib`` (versions),
        ``backend``, ``device_kind``, ``device_count``, ``x64`` (bool),
        ``process_index``, ``process_count``, ``python``, ``platform``,
        ``machine``, ``cpu_model``, ``cpu_count``, ``hostname`` and ``pid``.

    >>> env = environment()
    >>> env["process_index"], env["pid"] == os.getpid()
    (0, True)
    """
    import jax

    def jaxlib_version() -> str:
        import jaxlib

        return str(jaxlib.__version__)

    devices = _try(jax.devices) or []
    return {
        "jax": jax.__version__,
        "jaxlib": _try(jaxlib_version),
        "backend": _try(jax.default_backend),
        "device_kind": _try(lambda: str(devices[0].device_kind)) if devices else None,
        "device_count": len(devices) if devices else _try(jax.device_count),
        "x64": _try(lambda: bool(jax.config.jax_enable_x64)),
        "process_index": _try(_process_index),
        "process_count": _try(_process_count),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine() or None,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hostname": _try(socket.gethostname),
        "pid": os.getpid(),
    }


if __name__ == "__main__":  # pragma: no cover - a quick look from the shell
    import json

    json.dump(environment(), sys.stdout, indent=2)
    print()
