"""Warm start: compile an earlier run's signatures ahead of time, in background threads.

``shapewatch.warm(manifest)`` (or ``shapewatch run --warm manifest.json script.py``)
reads a run manifest; each watched function it names, once it exists (now, or
when the program defines it), has each of its manifest signatures lowered and
compiled on abstract arguments (``jitted.lower(...).compile()`` with
``jax.ShapeDtypeStruct`` leaves, passed as the recorded call passed them) by a
pool of ``shapewatch-warm`` threads, while the program goes on.

What the program's own first call then finds depends on JAX: from jax 0.6 the
call reuses the ahead-of-time trace, lowering and executable (nothing compiles
on the call); on jax 0.5 it reuses the trace and lowering and compiles again, so
the warm-up helps there only through the persistent cache (the warm-up's
compile loads or writes the entry, the call's compile loads it).

A call that asks for a signature the warm-up is still compiling does not wait for
it: JAX compiles it on the calling thread too (two compiles of one program, on
two cores), and the call returns when its own compile is done.

Arguments are rebuilt from the manifest's signature: dicts, lists, tuples and None
of array leaves, and static values written as Python literals. A signature of
another tree (a dataclass, a framework module, a NamedTuple) or a static value
that is not a literal is skipped and listed in :attr:`Warmup.skipped`.
"""

from __future__ import annotations

import ast
import collections
import os
import threading
import time
from typing import Any

from shapewatch._monitor.errors import ManifestError


class Warmup:
    """A warm start in progress: what it compiled, skipped and failed; ``wait()`` for the end."""

    def __init__(self, targets: dict[tuple[str, str], list[dict[str, Any]]], threads: int) -> None:
        self.targets = targets
        self.warmed: list[tuple[str, str, float]] = []  # (function, signature, seconds)
        self.skipped: list[tuple[str, str, str]] = []  # (function, signature, why)
        self.failed: list[tuple[str, str, str]] = []  # (function, signature, error)
        self.threads = threads
        self._queue: collections.deque[tuple[str, Any, dict[str, Any]]] = collections.deque()
        self._running = 0  # worker threads alive; each one ends when the queue is empty
        self._pending = 0  # compiles queued or running
        self._started: set[tuple[str, str]] = set()
        self._lock = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until every compile queued so far is done; True if all finished in time."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout)

    def stop(self) -> None:
        """Stops warming functions made from now on; compiles already queued still run."""
        from shapewatch._monitor import jit as _jit

        if self._on_create in _jit.on_create:
            _jit.on_create.remove(self._on_create)

    def _submit(self, function: str, jitted: Any, entry: dict[str, Any]) -> None:
        with self._lock:
            self._queue.append((function, jitted, entry))
            self._pending += 1
            if self._running < self.threads:
                self._running += 1
                threading.Thread(target=self._work, name=f"shapewatch-warm-{self._running}").start()

    def _work(self) -> None:
        """Compiles from the queue until it is empty, then ends (no idle thread outlives the work)."""
        while True:
            with self._lock:
                if not self._queue:
                    self._running -= 1
                    return
                function, jitted, entry = self._queue.popleft()
            try:
                self._compile(function, jitted, entry)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._lock.notify_all()

    def _on_create(self, fun: Any, jitted: Any) -> None:
        try:
            from shapewatch._monitor.jit_site import code_key_of

            _, qualname, module, _ = code_key_of(fun)
            signatures = self.targets.get((module, qualname))
            with self._lock:
                if not signatures or (module, qualname) in self._started:
                    return
                self._started.add((module, qualname))
            for sig in signatures:
                self._submit(qualname, jitted, sig)
        except Exception as e:  # never break the program's own jit
            self.failed.append(("?", "?", repr(e)))

    def _compile(self, function: str, jitted: Any, entry: dict[str, Any]) -> None:
        text = entry.get("text") or "?"
        try:
            args, kwargs = abstract_arguments(entry["signature"])
        except ValueError as e:
            self.skipped.append((function, text, str(e)))
            return
        start = time.perf_counter()
        try:
            jitted.lower(*args, **kwargs).compile()
        except Exception as e:  # a signature this version of the program no longer accepts
            self.failed.append((function, text, f"{type(e).__name__}: {str(e)[:200]}"))
            return
        self.warmed.append((function, text, time.perf_counter() - start))


def _literal_tree(treedef: str) -> Any:
    """The tree a ``PyTreeDef(...)`` repr describes, with ``0`` at each leaf (containers only)."""
    inner = treedef[len("PyTreeDef("):-1] if treedef.startswith("PyTreeDef(") else treedef
    out, quote = [], None
    for ch in inner:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "*":
            ch = "0"
        out.append(ch)
    try:
        return ast.literal_eval("".join(out))
    except (ValueError, SyntaxError):
        raise ValueError(f"its tree {treedef[:80]} is not made of dicts, lists, tuples and None") from None


def abstract_arguments(sig: dict[str, Any] | None) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments of ``jax.ShapeDtypeStruct`` leaves for a manifest signature.

    Raises:
      ValueError: naming what cannot be rebuilt.
    """
    import jax
    import numpy as np

    if sig is None:
        raise ValueError("its signature was not readable")
    arrays = {a["path"]: a for a in sig["arrays"]}
    statics = {s["path"]: s["value"] for s in sig.get("statics", [])}
    args, kwargs = [], {}
    for name, treedef in sig["structure"].items():
        if name in sig.get("defaults", []):
            continue
        if treedef == "static":
            try:
                value = ast.literal_eval(statics[name])
            except (ValueError, SyntaxError, KeyError):
                raise ValueError(f"its static argument {name}={statics.get(name)} is not a Python literal") from None
        else:
            tree = _literal_tree(treedef)
            leaves, structure = jax.tree_util.tree_flatten_with_path(tree)
            built = []
            for path, _ in leaves:
                a = arrays.get(name + jax.tree_util.keystr(path))
                if a is None:
                    raise ValueError(f"its leaf {name}{jax.tree_util.keystr(path)} is not in the signature")
                try:
                    dtype = np.dtype(a["dtype"])
                except TypeError:  # a Ref's ("Ref float32") or a high-level value's ("Variable float32")
                    raise ValueError(f"its leaf {a['path']} is a {a['dtype']}, not an array it can rebuild") from None
                built.append(jax.ShapeDtypeStruct(tuple(a["shape"]), dtype, weak_type=bool(a.get("weak_type"))))
            value = jax.tree_util.tree_unflatten(structure, built)
        if name in sig.get("keywords", []):
            kwargs[name] = value
        else:
            args.append(value)
    return args, kwargs


def warm(manifest: str | os.PathLike[str] | dict[str, Any], *, threads: int = 2) -> Warmup:
    """Compiles an earlier run's signatures ahead of time, in background threads.

    Call it before the program's watched functions are made (at the top of the
    program, or through ``shapewatch run --warm``): each one is warmed as soon as it
    exists; functions that exist already are found through their module.

    Args:
      manifest: a run manifest's path, or its loaded dict.
      threads: compiles at once (each compile also uses XLA's own threads).

    Returns:
      A :class:`Warmup`: ``wait()``, ``warmed``, ``skipped``, ``failed``, ``stop()``.

    Raises:
      ManifestError: if the manifest cannot be read.
      ValueError: for ``threads`` < 1.
    """
    from shapewatch._monitor import jit as _jit
    from shapewatch._reports.manifest import load_manifest

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"[shapewatch] warm(threads={threads!r}): use an integer >= 1.")
    data = manifest if isinstance(manifest, dict) else load_manifest(manifest)
    if not isinstance(data.get("functions"), list):
        raise ManifestError("[shapewatch] warm(): the manifest has no \"functions\" list")
    targets = {(f["module"], f["qualname"]): list(f.get("signatures", [])) for f in data["functions"]}
    warmup = Warmup(targets, threads)
    _jit.on_create.append(warmup._on_create)
    _existing(warmup)
    return warmup


def _existing(warmup: Warmup) -> None:
    """Warms the manifest's functions that already exist as module attributes."""
    import sys

    from shapewatch._monitor.jit import is_watched

    for module, qualname in warmup.targets:
        obj: Any = sys.modules.get(module)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if obj is not None and is_watched(obj) and hasattr(obj, "lower"):
            warmup._on_create(obj.__wrapped__, obj)
