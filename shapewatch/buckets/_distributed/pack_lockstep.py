"""``group_by_length(..., strategy="pack")`` in step across the processes of a ``jax.distributed``
job: :class:`PackLockstep`, the agreement a packing loader owns.

The loader packs its own shard as it does alone (its buffer, its shuffled first-fit) and
holds batches made ready, each of one row length. Each round (see ``_distributed.lockstep``), every
process publishes how many batches it holds ready per row length and whether its shard is
settled (read to its end, every example in a batch made ready); all derive the same steps:
per row length, as many batches as every process still reading holds (all settled: as many
as the most any holds), in one seeded order. Where no row length has that, one step goes at
the row length with the most real rows across processes. At each step a process yields its
batch of that row length, or a batch of padding only (``segment_ids`` all 0): the same row
length, the same batch shape and the same number of steps everywhere, each process's
examples once. The first round agrees the row length when none was given: the longest of
each process's first buffer, rounded up, the most over processes.

This object holds no example, only the agreement (the session, the steps agreed and not
taken, the rounds so far): the loader calls it with what it holds, in numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import fail
from .lockstep import Session
from .schedulers import Taking, decode, encode

__all__ = ["PackLockstep"]


class PackLockstep:
    """The steps of one packing loader, agreed with the other processes of the job.

    Every method can be interrupted (a ``KeyboardInterrupt``) at any line of its own and called
    again: an exchange's records are kept until the round they belong to is agreed, so a call
    again takes them rather than exchanging once more (which would put this process a round
    ahead). Within the key-value store's own calls (``Session.exchange``) it cannot.

    Attributes:
        schedule: the row lengths of the steps agreed and not taken yet, next first (the same
            on every process).
        rounds: the rounds agreed so far (the steps' order of round ``r`` is drawn from
            ``(seed, r)``: the same on every process, and again after an interrupt).
        ended: every process is settled and holds nothing: the loader stops (on every process
            at the same step, and stays stopped without asking the others again).
    """

    def __init__(self, session: Session, seed: int, shuffle: bool) -> None:
        self.session = session
        self.schedule: list[int] = []
        self.rounds = 0
        self.ended = False
        self._seed = int(seed)
        self._shuffle = shuffle
        self._records: dict[str, list[dict[str, Any]]] = {}  # this round's exchanges so far

    @property
    def me(self) -> int:
        return self.session.me

    def fail(self, exc: BaseException) -> None:
        """This process's source (or an example) raised ``exc``: the others raise too. It raises
        while reading, before any exchange of a round: what this round exchanged already (before
        an interrupt) is kept, as the others keep theirs."""
        self.session.fail(exc)

    def _exchange(self, what: str, record: dict[str, Any]) -> list[dict[str, Any]]:
        """Every process's record of this round's ``what``: exchanged once, kept until agreed."""
        if what not in self._records:
            self._records = {**self._records, what: self.session.exchange(record)}
        return self._records[what]

    def row_length(self, choice: int | None, multiple_of: int) -> int:
        """The row length of every process: the most of the processes' ``choice`` (None: a
        process that read no example), ``multiple_of`` when none read any."""
        records = self._exchange("row_length", {"row_length": choice})
        return max((int(r["row_length"]) for r in records if r.get("row_length") is not None),
                   default=multiple_of)

    def agree(self, ready: list[tuple[int, int]], settled: bool, spec: Any) -> Any:
        """Publish what this process holds: ``ready``, its batches made ready as (row length, real
        rows), the next yielded first; ``settled``, its shard read to the end and every example in
        a batch made ready. Set :attr:`schedule` to the steps every process takes next (or
        :attr:`ended`). Returns the examples' structure: ``spec``, or (a process that read no
        example yet) the one that the lowest process holding one sends, to pad its batches."""
        counts: dict[str, int] = {}
        rows: dict[str, int] = {}
        for length, n in ready:
            counts[str(length)] = counts.get(str(length), 0) + 1
            rows.setdefault(str(length), int(n))
        records = self._exchange("ready", {"ready": counts, "rows": rows, "settled": bool(settled),
                                           "spec": spec is not None})
        if all(r["settled"] and not r["ready"] for r in records):
            self.ended, self._records = True, {}; return spec  # noqa: E702
        holders = [p for p, r in enumerate(records) if r["spec"]]
        if holders and len(holders) < len(records):  # a process that read no example pads with it
            mine = {"structure": encode(spec) if self.me == holders[0] else None}
            sent = self._exchange("structure", mine)[holders[0]]["structure"]
            if spec is None and sent is not None:
                spec = decode(sent)
        steps = self._steps(records)
        self.schedule, self.rounds, self._records = steps, self.rounds + 1, {}; return spec  # noqa: E702

    def _steps(self, records: list[dict[str, Any]]) -> list[int]:
        """The row lengths of the steps until the next round: the same on every process."""
        lengths = sorted({int(k) for r in records for k in r["ready"]})
        reading = [r for r in records if not r["settled"]]

        def held(r: dict[str, Any], length: int) -> int:
            return int(r["ready"].get(str(length), 0))

        if reading:  # the batches every process still reading holds; a settled one pads the rest
            need = {n: min(held(r, n) for r in reading) for n in lengths}
        else:  # nothing more to read anywhere: every batch left, at once
            need = {n: max(held(r, n) for r in records) for n in lengths}
        steps = [n for n in lengths for _ in range(need[n])]
        if self._shuffle and len(steps) > 1:
            order = np.random.default_rng([self._seed, 2, self.rounds]).permutation(len(steps))
            steps = [steps[i] for i in order]
        if steps:
            return steps
        return [max(lengths, key=lambda n: (sum(int(r["rows"].get(str(n), 0)) for r in records), -n))]

    def check_padding(self, spec: Any, length: int) -> None:
        """Raise when this process must yield padding only at ``length`` and never read an example."""
        if spec is None:
            raise fail(
                f"group_by_length(strategy='pack'): process {self.me} read no example yet and must "
                f"yield a batch of padding only (row length {length}) at step {self.session.steps}: "
                "the examples' structure could not be sent to it; fix: give every process at least one "
                "example, or examples that pickle")

    def take(self, taking: Taking) -> None:
        """The step agreed first leaves the schedule (one line; nothing where it left already: see
        ``_distributed.schedulers.Taking``)."""
        before = taking.before
        if "step" not in before:
            old = (self.schedule[0], self.session.steps)
            del self.schedule[0]; self.session.steps += 1; before["step"] = old  # noqa: E702

    def untake(self, taking: Taking) -> None:
        """The step :meth:`take` committed back at the head of the schedule."""
        old = taking.before.get("step")
        if old is not None:
            self.schedule[:0] = old[:1]; self.session.steps = old[1]; del taking.before["step"]  # noqa: E702

    # -- state (``state_dict()``'s ``"lockstep"``; checked by ``_loaders.loader_state``)
    def state_dict(self) -> dict[str, Any]:
        return {"processes": [self.me, self.session.count], "steps": self.session.steps,
                "schedule": list(self.schedule), "rounds": self.rounds, "ended": self.ended}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from a saved :meth:`state_dict` (checked whole by the loader's state check first)."""
        self.schedule, self.rounds, self.ended = list(state["schedule"]), state["rounds"], state["ended"]
        self.session.steps = state["steps"]

