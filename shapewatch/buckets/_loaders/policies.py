"""The loaders' planning options as objects: ``FixedPlan``, ``LearnedPlan``, ``AutoPlan`` (the
plan policy, ``plan=``) and ``Costs`` (costs given by hand, ``costs=``), each checking its own
fields when made; and ``resolve_plan``, which turns either spelling (the objects, or the keywords
``buckets``, ``max_buckets``, ``prior``, ``max_shapes``, ``compile_records``, ``clock``,
``compile_seconds``, ``steps``, ``step_seconds``) into the objects, refusing what would be ignored,
and ``planning_keywords``, the objects back as the loaders' own arguments (one path for both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .._checks import PREFIX, check_callable, check_int, check_number, fail, fail_type, is_int
from .._plan.buckets import Buckets
from .loader_checks import (
    check_auto,
    check_buckets,
    check_ignored,
    check_max_buckets,
    check_max_shapes,
    check_prior_type,
)

__all__ = ["AutoPlan", "Costs", "FixedPlan", "LearnedPlan", "check_policy_types", "planning_keywords",
           "resolve_plan"]

#: The keywords the plan policy (``plan=``) covers, with their defaults.
PLAN_KEYWORDS: dict[str, Any] = {"buckets": None, "max_buckets": "auto", "prior": None, "max_shapes": None,
                                 "compile_records": None, "clock": None}
#: The keywords ``costs=`` covers (all default None).
COST_KEYWORDS = ("compile_seconds", "steps", "step_seconds")
#: Where each keyword lives among the objects (named in the error that refuses both spellings).
_FIELD_OF = {"buckets": "FixedPlan(buckets)", "max_buckets": "LearnedPlan(max_buckets)",
             "prior": "LearnedPlan(prior=) or AutoPlan(prior=)", "max_shapes": "AutoPlan(max_shapes=)",
             "compile_records": "AutoPlan(compile_records=)", "clock": "AutoPlan(clock=)",
             "compile_seconds": "Costs(compile_seconds=)", "steps": "Costs(steps=)",
             "step_seconds": "Costs(step_seconds=)"}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _within(owner: str, check: Callable[..., Any], *args: Any) -> Any:
    """Run a shared check; its error (same class, same text) says which object's field it is."""
    try:
        return check(*args)
    except ValueError as exc:  # an ArgumentTypeError (a TypeError too) stays one
        text = str(exc).removeprefix(f"{PREFIX} ")
        raise type(exc)(f"{PREFIX} {owner}: {text}") from None


def _repr(obj: Any, positional: tuple[str, ...] = ()) -> str:
    """``Name(first, key=value)``: the fields that differ from their defaults (positional ones always)."""
    parts = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        shown = _short(value) if f.name == "prior" else repr(value)  # a prior may be a whole report
        if f.name in positional:
            parts.append(shown)
        elif value is not f.default:
            parts.append(f"{f.name}={shown}")
    return f"{type(obj).__name__}({', '.join(parts)})"


@dataclass(frozen=True, repr=False)
class FixedPlan:
    """A plan given by hand: every batch pads to one of ``buckets``; nothing is planned or
    measured, so it takes no other planning option (and no ``costs=``).

    Attributes:
        buckets: a :class:`Buckets` (its ``overflow`` and ``multiple_of`` apply), or ascending
            positive boundaries (kept as a tuple of ints; the loader makes them a ``Buckets`` with
            its ``multiple_of`` and ``overflow="extend"``, as ``buckets=`` does).

    Example:
        >>> FixedPlan([4, 10])
        FixedPlan((4, 10))
    """

    buckets: Buckets | tuple[int, ...]

    def __post_init__(self) -> None:
        buckets = self.buckets
        if isinstance(buckets, Buckets):
            return
        if isinstance(buckets, str | bytes | bytearray | Mapping) or not hasattr(buckets, "__iter__"):
            raise fail_type(f"FixedPlan: buckets must be a Buckets or a sequence of ints; got "
                            f"{type(buckets).__name__} {_short(buckets)}")
        bounds = tuple(buckets)
        for b in bounds:
            if not is_int(b):
                raise fail_type(f"FixedPlan: buckets must be a Buckets or a sequence of ints; got "
                                f"{type(b).__name__} {b!r} in {_short(bounds)}")
        _within("FixedPlan", Buckets, bounds)  # the values: positive, ascending, at most 2**40
        object.__setattr__(self, "buckets", tuple(int(b) for b in bounds))

    def __repr__(self) -> str:
        return _repr(self, ("buckets",))


@dataclass(frozen=True, repr=False)
class LearnedPlan:
    """A plan made once with :func:`propose` from the first lengths read (``group_by_length``: the
    first buffer; ``bucketed``: the first ``warmup`` batches), with ``prior``'s lengths; nothing is
    measured, and the plan is kept.

    Attributes:
        max_buckets: the most buckets, an int >= 1; or ``"auto"``: as many as weigh best against
            the compile seconds of ``costs=`` (a :class:`Costs`, needed then; ``group_by_length``
            only).
        prior: None, a saved loader ``report()``, a ``LengthObserver`` (or either's dict, or a JSON
            file's path): its lengths are planned with the first ones.

    Example:
        >>> LearnedPlan(4)
        LearnedPlan(4)
    """

    max_buckets: int | str
    prior: Any = field(default=None, kw_only=True, hash=False)

    def __post_init__(self) -> None:
        _within("LearnedPlan", check_max_buckets, self.max_buckets, True)
        object.__setattr__(self, "max_buckets", "auto" if isinstance(self.max_buckets, str)
                           else int(self.max_buckets))
        _within("LearnedPlan", check_prior_type, self.prior)

    def __repr__(self) -> str:
        return _repr(self, ("max_buckets",))


@dataclass(frozen=True, repr=False, kw_only=True)
class AutoPlan:
    """Plan online from measured costs (the default: the README's "Auto-bucketing"): one bucket at
    the longest length to start, re-planned as compile and step seconds are measured.

    Attributes:
        max_shapes: the most distinct batch shapes ever yielded, an int >= 1; None: the linked
            step's budget (``compile_records``), else 16.
        prior: None, a saved loader ``report()`` or ``LengthObserver`` (or either's dict, or a JSON
            file's path): start from its lengths and measured costs.
        compile_records: None, or a callable returning the linked step's compile records, e.g.
            ``shapewatch.compile_records(step)``.
        clock: None (``time.perf_counter``, a new shape's compile timed by JAX's compile events),
            or a callable returning seconds, which times the compiles too.

    Example:
        >>> AutoPlan(max_shapes=8)
        AutoPlan(max_shapes=8)
    """

    max_shapes: int | None = None
    prior: Any = field(default=None, hash=False)
    compile_records: Callable[[], Any] | None = None
    clock: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        if self.max_shapes is not None:
            object.__setattr__(self, "max_shapes", _within("AutoPlan", check_int, "max_shapes", self.max_shapes, 1))
        _within("AutoPlan", check_prior_type, self.prior)
        _within("AutoPlan", check_callable, "compile_records", self.compile_records, True)
        _within("AutoPlan", check_callable, "clock", self.clock, True)

    def __repr__(self) -> str:
        return _repr(self)


@dataclass(frozen=True, repr=False, kw_only=True)
class Costs:
    """Costs given by hand, for ``plan=LearnedPlan("auto")``: the number of buckets that costs
    least, ``k * compile_seconds`` against the padding of ``steps`` steps of ``step_seconds``
    (:func:`propose`'s ``"auto"``). Each a finite number >= 0, kept as given.

    Example:
        >>> Costs(compile_seconds=2.0, steps=10_000, step_seconds=0.05)
        Costs(compile_seconds=2.0, steps=10000, step_seconds=0.05)
    """

    compile_seconds: float
    steps: float
    step_seconds: float

    def __post_init__(self) -> None:
        for name in COST_KEYWORDS:
            _within("Costs", check_number, name, getattr(self, name))

    def __repr__(self) -> str:
        return f"Costs({', '.join(f'{n}={getattr(self, n)!r}' for n in COST_KEYWORDS)})"


Plan = FixedPlan | LearnedPlan | AutoPlan


def _is_default(name: str, value: Any) -> bool:
    if name == "max_buckets":
        return isinstance(value, str) and value == "auto"
    return value is None


def check_policy_types(loader: str, plan: Any, costs: Any) -> None:
    """``plan=`` None or a plan policy, ``costs=`` None or a :class:`Costs`, else a TypeError."""
    if plan is not None and not isinstance(plan, FixedPlan | LearnedPlan | AutoPlan):
        hint = (" (boundaries: plan=FixedPlan(them))" if isinstance(plan, Buckets | tuple | list)
                else " (most buckets: plan=LearnedPlan(it))" if is_int(plan) else "")
        raise fail_type(f"{loader}: plan must be None, a FixedPlan, a LearnedPlan or an AutoPlan; got "
                        f"{type(plan).__name__} {_short(plan)}{hint}")
    if costs is not None and not isinstance(costs, Costs):
        raise fail_type(f"{loader}: costs must be None or a Costs; got {type(costs).__name__} {_short(costs)}")


def resolve_plan(loader: str, *, plan: Any, costs: Any, keywords: dict[str, Any], multiple_of: Any,
                 takes_costs: bool = True) -> tuple[Plan, Costs | None]:
    """The plan policy and the costs a loader was given, as objects, from ``plan=`` and ``costs=`` or
    from today's keywords (``keywords``: the six of :data:`PLAN_KEYWORDS` and, where ``takes_costs``,
    the three of :data:`COST_KEYWORDS`; their types already checked). Refuses both spellings at once,
    and an option the plan would ignore, naming them with the fix."""
    check_policy_types(loader, plan, costs)
    new = {k: v for k, v in (("plan", plan), ("costs", costs)) if v is not None}
    covered = [*PLAN_KEYWORDS, *COST_KEYWORDS] if plan is not None else list(COST_KEYWORDS) if costs is not None else []
    mixed = {k: keywords[k] for k in covered if k in keywords and not _is_default(k, keywords[k])}
    if mixed:
        objs = " and ".join(f"{k}={_short(v)}" for k, v in new.items())
        olds = ", ".join(f"{k}={_short(v)}" for k, v in mixed.items())
        where = "; ".join(f"{k}= is {_FIELD_OF[k]}" for k in mixed)
        raise fail(f"{loader}: {objs} and {olds} both say how to plan ({where}); fix: pass one spelling: "
                   f"the objects alone, or the keywords without {' and '.join(f'{k}=' for k in new)}")
    if plan is None:
        plan, numbers, label = _from_keywords(loader, keywords, multiple_of, takes_costs, costs is not None)
        costs = costs if numbers is None else numbers
    else:
        label = f"plan={plan!r}"
        if isinstance(plan, FixedPlan) and isinstance(plan.buckets, Buckets) and is_int(multiple_of) and (
                multiple_of != 1 and multiple_of != plan.buckets.multiple_of):
            raise fail(f"{loader}: multiple_of={multiple_of!r} would be ignored: {label} is a fixed plan: nothing "
                       f"is planned, and its Buckets' own multiple_of={plan.buckets.multiple_of} applies; fix: "
                       f"leave it out, or make the Buckets with multiple_of={multiple_of!r}")
    _check_costs(loader, plan, costs, label, takes_costs)
    return plan, costs


def _from_keywords(loader: str, keywords: dict[str, Any], multiple_of: Any, takes_costs: bool,
                   with_costs: bool) -> tuple[Plan, Costs | None, str]:
    """Today's keywords as a plan policy and the costs of its three numbers (those a mode would
    ignore refused as before), and the keywords that chose the plan (for a message)."""
    kw = {**PLAN_KEYWORDS, **dict.fromkeys(COST_KEYWORDS), **keywords}
    numbers = {k: kw[k] for k in COST_KEYWORDS} if takes_costs else {}
    online = {k: kw[k] for k in ("max_shapes", "compile_records", "clock")}
    check_ignored(loader, buckets=kw["buckets"], max_buckets=kw["max_buckets"], multiple_of=multiple_of,
                  numbers=numbers, online=online, prior=kw["prior"])
    # each keyword checked as before (the same messages, naming no object), then made an object
    if kw["buckets"] is not None:
        return FixedPlan(check_buckets(kw["buckets"], multiple_of)), None, f"buckets={_short(kw['buckets'])}"
    if not _is_default("max_buckets", kw["max_buckets"]):
        return LearnedPlan(kw["max_buckets"], prior=kw["prior"]), None, f"max_buckets={_short(kw['max_buckets'])}"
    if numbers and not check_auto("auto", None, numbers):  # all three numbers (some of them raises)
        return LearnedPlan("auto", prior=kw["prior"]), Costs(**numbers), "compile_seconds, steps and step_seconds"
    check_max_shapes(online["max_shapes"], online["compile_records"])
    given = {k: v for k, v in online.items() if v is not None}
    if with_costs and not given:  # costs= alone: the three numbers' mode, a plan made once from them
        return LearnedPlan("auto", prior=kw["prior"]), None, ""
    label = ", ".join(f"{k}={_short(v)}" for k, v in given.items())
    return AutoPlan(prior=kw["prior"], **online), None, label


def _check_costs(loader: str, plan: Plan, costs: Costs | None, label: str, takes_costs: bool) -> None:
    """Costs given by hand are read by ``LearnedPlan("auto")`` only, which needs them."""
    if isinstance(plan, LearnedPlan) and plan.max_buckets == "auto" and costs is None:
        if not takes_costs:
            raise fail(f"{loader}: {label} would choose the number of buckets from costs given by hand, which "
                       f"{loader} does not take; fix: LearnedPlan(k) for at most k buckets, or plan=AutoPlan() "
                       "to measure the costs online")
        raise fail(f"{loader}: {label} chooses the number of buckets from costs given by hand, and costs= is "
                   "missing; fix: pass costs=Costs(compile_seconds=..., steps=..., step_seconds=...), "
                   "LearnedPlan(k) for at most k buckets, or plan=AutoPlan() to measure the costs online")
    if costs is None or (isinstance(plan, LearnedPlan) and plan.max_buckets == "auto"):
        return
    if isinstance(plan, FixedPlan):
        mode, fix = f"{label} is a fixed plan: nothing is planned", "plan=LearnedPlan('auto') to plan once from them"
    elif isinstance(plan, LearnedPlan):
        mode = (f"{label} plans once with propose() for at most {plan.max_buckets} bucket(s), which reads no "
                "costs")
        fix = "LearnedPlan('auto') to choose the number of buckets from them"
    else:
        mode = (f"{label} plans online from measured costs" if label.startswith("plan=") else
                f"{label} {'is an option' if ',' not in label else 'are options'} of the online planner, "
                "which plans from measured costs")
        fix = "plan=LearnedPlan('auto') to plan once from costs given by hand"
    raise fail(f"{loader}: costs={costs!r} would be ignored: {mode}; fix: leave costs out, or {fix}")


def planning_keywords(plan: Plan, costs: Costs | None) -> dict[str, Any]:
    """The plan policy and costs as the loaders' own planning arguments (the keywords' values)."""
    out: dict[str, Any] = {**PLAN_KEYWORDS, **dict.fromkeys(COST_KEYWORDS)}
    if isinstance(plan, FixedPlan):
        out["buckets"] = plan.buckets
    elif isinstance(plan, LearnedPlan):
        out.update(max_buckets=plan.max_buckets, prior=plan.prior)
    else:
        out.update(prior=plan.prior, max_shapes=plan.max_shapes, compile_records=plan.compile_records,
                   clock=plan.clock)
    if costs is not None:
        out.update({k: getattr(costs, k) for k in COST_KEYWORDS})
    return out
