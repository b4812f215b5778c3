"""``Buckets.explain()``: a plan in words, and the percent and seconds formats the CLI
shares (private)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .buckets import Buckets

__all__ = ["explain", "fmt_pct", "fmt_seconds"]


def fmt_pct(fraction: float) -> str:
    """21% / 3.4% / 0.0%: two significant-ish digits."""
    pct = 100.0 * fraction
    return f"{pct:.0f}%" if abs(pct) >= 10 else f"{pct:.1f}%"


def fmt_seconds(seconds: float) -> str:
    """11 s / 3.1 s / 0.05 s / 1,234 s."""
    if abs(seconds) >= 10:
        return f"{seconds:,.0f} s"
    return f"{seconds:.2g} s"


def _noun(k: int) -> str:
    return f"{k} bucket" if k == 1 else f"{k} buckets"


def _cost_name(plan: Buckets) -> str:
    cost = plan.cost
    if callable(cost):
        return getattr(cost, "__qualname__", "custom") + " cost"
    return f"{cost} cost"


def explain(plan: Buckets, extended: Mapping[int, int] | None = None) -> str:
    """See :meth:`Buckets.explain`; ``extended``: the extended lengths a loader yielded under
    ``plan`` (a plan records none itself)."""
    k = len(plan.boundaries)
    extras = [plan.strategy, _cost_name(plan)]
    if plan.multiple_of > 1:
        extras.append(f"multiple_of={plan.multiple_of}")
    if plan.overflow != "error":
        extras.append(f"overflow={plan.overflow!r}")
    tail = f"boundaries {', '.join(map(str, plan.boundaries))} ({', '.join(extras)})"
    if extended:
        tail += f"; {len(extended)} extended shape(s) so far: {sorted(extended)}"
    stats = plan.stats
    if not stats:
        return f"{_noun(k)}: {tail}; no observed lengths recorded (see waste())"
    online = stats.get("online")
    if online:
        return _explain_online(k, tail, online)
    auto = stats.get("auto")
    if not auto:
        return (
            f"{_noun(k)}: padding {fmt_pct(stats['waste'])} over "
            f"{stats['n']:,} observed lengths\n{tail}"
        )
    rows = auto["rows"]
    chosen_total = rows[k][2]
    others = []
    lower = [j for j in rows if j < k]
    higher = [j for j in rows if j > k]
    for j in ([max(lower)] if lower else []) + ([min(higher)] if higher else []):
        _, waste_j, total_j = rows[j]
        others.append(
            f"vs {_noun(j)}: padding {fmt_pct(waste_j)}, +{fmt_seconds(total_j - chosen_total)}"
        )
    versus = f" ({'; '.join(others)} over {auto['steps']:,.0f} steps)" if others else ""
    head = (
        f"{_noun(k)}: {k} compile{'s' if k != 1 else ''} x {fmt_seconds(auto['compile_seconds'])}, "
        f"padding {fmt_pct(stats['waste'])}{versus}"
    )
    return f"{head}\n{tail}"


def _explain_online(k: int, tail: str, online: dict) -> str:
    """An online ``max_buckets="auto"`` plan: measured costs and the decisions so far."""
    compile_s = online.get("compile_seconds")
    model = online.get("step_model")
    measured = (f"measured compile {fmt_seconds(compile_s)}" if compile_s is not None
                else "no compile measured yet")
    if model is not None:
        a, beta, gamma = model
        measured += f", step {a:.3g} + {beta:.3g}*L + {gamma:.3g}*L^2 s"
        if online.get("measured"):
            measured += f" ({online['measured']})"
    lines = [f"{_noun(k)} (online auto, max_shapes={online['max_shapes']}; {measured}; "
             f"{online['remaining']:,.0f} still to come)", tail, "decisions:"]
    lines += [f"  {d}" for d in online["decisions"]]
    return "\n".join(lines)
