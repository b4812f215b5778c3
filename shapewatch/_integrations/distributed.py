"""Divergent compiles across processes: ``check_hosts_agree``.

Every process of a ``jax.distributed`` job must compile the same programs with
the same shapes; a host whose data gives it a batch of 33 while the others have
32 compiles alone (at best) or hangs in a collective (at worst). The check runs
over JAX's own multi-process runtime, the key-value store of its coordination
service: each process publishes a fixed-size digest (SHA-256) of the
signatures its watched functions compiled, and reads the others'. Only when the
digests differ do the processes exchange the signatures themselves, so that
each can say which process compiled what, on which function, leaf and axis.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import threading
import warnings
from collections.abc import Iterable
from typing import Any

from shapewatch._monitor.errors import RecompileError, RecompileWarning
from shapewatch._monitor.records import COMPILING_KINDS
from shapewatch._monitor.registry import FunctionState, registry
from shapewatch.buckets._distributed.lockstep import loader_disagreements, loader_history

logger = logging.getLogger("shapewatch")
_calls = itertools.count()
_lock = threading.Lock()
_said_single = False
ON_DIVERGENCE = ("raise", "warn")
TIMEOUT_MS = 120_000


def _runtime() -> Any:
    """JAX's distributed state, or None when ``jax.distributed`` is not initialised."""
    from shapewatch._monitor.compat import distributed_state

    state = distributed_state()
    if state.client is None or (state.num_processes or 1) < 2:
        return None
    return state


def _function_id(state: FunctionState) -> str:
    # module:qualname (and #n for a second function of the same code): the same on every host,
    # whose paths may differ.
    return state.code.split("@", 1)[0] + state.key[len(state.code):]


def compiled_signatures(fns: Iterable[Any] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """{function: {signature key: signature dict}} of the compiles recorded in this process."""
    from shapewatch._reports.merge import across_processes

    if fns is not None:
        from shapewatch._monitor.access import state_of

        wanted = {id(state_of(f)) for f in fns}
    with registry.lock:
        states = [s for s in registry.functions.values() if fns is None or id(s) in wanted]
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for s in states:
            sigs = out.setdefault(_function_id(s), {})
            compiled = {m.signature: None for m in s.misses if m.kind in COMPILING_KINDS and m.signature is not None}
            for sig in compiled:
                d = across_processes(sig.to_dict())  # each process has its own devices
                sigs[json.dumps([d["arrays"], d["statics"]], sort_keys=True)] = d
    return out


def digest(signatures: dict[str, dict[str, dict[str, Any]]]) -> str:
    """A fixed-size digest of compiled signatures (order-independent)."""
    h = hashlib.sha256()
    for fn in sorted(signatures):
        for key in sorted(signatures[fn]):
            h.update(fn.encode() + b"\0" + key.encode() + b"\n")
    return h.hexdigest()


def _explain(everyone: dict[int, dict[str, dict[str, dict[str, Any]]]]) -> tuple[list[str], set[str]]:
    """A line per signature some processes compiled and others did not, and the kinds of
    difference named (``"shape"``, ``"placement"``, ``"static"``)."""
    from shapewatch._reports.merge import _describe, differences, processes

    lines: list[str] = []
    kinds: set[str] = set()
    procs = sorted(everyone)
    for fn in sorted({f for sigs in everyone.values() for f in sigs}):
        union: dict[str, dict[str, Any]] = {}
        for p in procs:
            union.update(everyone[p].get(fn, {}))
        for key, sig in union.items():
            have = [p for p in procs if key in everyone[p].get(fn, {})]
            lack = [p for p in procs if p not in have]
            if not lack:
                continue
            others = [s for p in lack for s in everyone[p].get(fn, {}).values()]
            found = differences(sig, others)
            kinds |= {kind for kind, _ in found} or {"shape"}
            text = "; ".join(t for _, t in found) if found else "no comparable signature"
            lines.append(f"  {fn}: {processes(have)} compiled ({_describe(sig)}) that "
                         f"{processes(lack)} did not; it differs in {text}")
    return lines, kinds or ({"shape"} if lines else set())


_FIXES = {
    "shape": "  fix: give every process batches of the same shapes (pad to fixed buckets; "
             "shard the data so that each host gets equal batch sizes).",
    "placement": "  fix: place each leaf the same way on every process: one mesh (the same shape and "
                 "axis names) and one PartitionSpec per leaf (jax.device_put with one NamedSharding, "
                 "or jit's in_shardings), committed alike.",
    "static": "  fix: pass the same static arguments on every process.",
    "loader": "  fix: make the loaders in the same order on every process, after jax.distributed.initialize(), "
              "without across_processes=False, so that they agree on every step's shapes.",
}


def _loaders_digest(loaders: dict[str, list[list[int]]]) -> str:
    """A digest of the shapes every loader of this process yielded (empty without loaders)."""
    if not loaders:
        return ""
    return hashlib.sha256(json.dumps(loaders, sort_keys=True).encode()).hexdigest()


def check_hosts_agree(fns: Iterable[Any] | None = None, *, on_divergence: str = "raise",
                      timeout_ms: int = TIMEOUT_MS) -> bool:
    """Checks that every process compiled the same signatures (a collective call).

    Call it at the same point in every process (after warm-up, or every N
    steps). Each process contributes a 64-character digest through JAX's
    coordination service; only if they differ are the signatures exchanged.

    Args:
      fns: watched functions to compare (default: all).
      on_divergence: ``"raise"`` (:class:`RecompileError`) or ``"warn"``
        (:class:`RecompileWarning`), on every process, naming the process,
        function, leaf and axis that differ.
      timeout_ms: how long to wait for the other processes.

    Returns:
      True when all processes agree (or there is only one process).

    Raises:
      ValueError: for an unknown ``on_divergence``.
      RecompileError: on divergence with ``on_divergence="raise"``.
    """
    global _said_single
    if on_divergence not in ON_DIVERGENCE:
        raise ValueError(f"[shapewatch] on_divergence={on_divergence!r} is not valid: use one of "
                         f"{', '.join(map(repr, ON_DIVERGENCE))}.")
    fns = list(fns) if fns is not None else None
    state = _runtime()
    if state is None:
        if not _said_single:
            _said_single = True
            logger.info("[shapewatch] check_hosts_agree: jax.distributed is not initialised; one process "
                        "agrees with itself, nothing to compare.")
        return True
    with _lock:
        n = next(_calls)
    me, count, client = state.process_id, state.num_processes, state.client
    mine = compiled_signatures(fns)
    loaders = loader_history()
    prefix = f"shapewatch/check/{n}"
    client.key_value_set(f"{prefix}/digest/{me}", digest(mine) + _loaders_digest(loaders))
    digests = {p: client.blocking_key_value_get(f"{prefix}/digest/{p}", timeout_ms) for p in range(count)}
    if len(set(digests.values())) == 1:
        return True
    client.key_value_set(f"{prefix}/signatures/{me}", json.dumps({"signatures": mine, "loaders": loaders}))
    everyone = {p: json.loads(client.blocking_key_value_get(f"{prefix}/signatures/{p}", timeout_ms))
                for p in range(count)}
    lines, kinds = _explain({p: e["signatures"] for p, e in everyone.items()})
    parted = loader_disagreements({p: e["loaders"] for p, e in everyone.items()})
    if parted:
        kinds.add("loader")
    what = "compiled different signatures" if lines else "took different batch shapes from their loaders"
    message = "\n".join([f"[shapewatch] processes {what} (seen from process {me} of {count}):", *lines, *parted,
                         *(fix for kind, fix in _FIXES.items() if kind in kinds)])
    if on_divergence == "raise":
        raise RecompileError(message)
    warnings.warn(message, RecompileWarning, stacklevel=2)
    return False
