"""The pictures of the HTML report, drawn as inline SVG from the report's data.

Each function takes plain values (from the view that ``html.report_view`` builds)
and returns SVG text; every piece of text in it is escaped. Hovering an element
with ``data-hover`` shows its ``<title>`` in the page's tooltip.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from shapewatch._reports.render import seconds

WIDTH = 1060
PHASES = ("trace", "lower", "compile")


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def nice_ticks(hi: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``hi``."""
    if hi <= 0:
        return [0.0]
    raw = hi / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(hi / step - 1e-9)) + 1)]


def tick_label(s: float) -> str:
    if s == 0:
        return "0"
    return f"{s * 1e3:g} ms" if s < 1 else f"{s:g} s"


def cost_line(m: dict[str, Any]) -> str:
    return (f"{seconds(m['total_s'])} (trace {seconds(m['trace_s'])}, lower {seconds(m['lower_s'])}, "
            f"compile {seconds(m['compile_s'])})")


def _svg(height: float, body: list[str], label: str) -> str:
    return (f'<svg viewBox="0 0 {WIDTH} {_n(height)}" role="img" aria-label="{esc(label)}">'
            + "".join(body) + "</svg>")


def function_bars(functions: Sequence[dict[str, Any]]) -> str:
    """One row per function: stacked trace, lower and compile seconds, longest first."""
    label_w, right, row_h, top = 230, 150, 26, 6
    scale_max = max([f["total_s"] for f in functions] + [1e-9])
    ticks = nice_ticks(scale_max)
    scale = (WIDTH - label_w - right) / ticks[-1] if ticks[-1] else 0
    height = top + row_h * len(functions) + 22
    body = []
    for t in ticks:
        x = label_w + t * scale
        body.append(f'<line class="grid" x1="{_n(x)}" x2="{_n(x)}" y1="{top}" y2="{_n(height - 18)}"/>'
                    f'<text class="tick" x="{_n(x)}" y="{_n(height - 5)}" text-anchor="middle">{tick_label(t)}</text>')
    for i, f in enumerate(functions):
        y = top + i * row_h
        tip = (f"{f['function']}\n{f['compiles']} compiles, {f['signatures']} signatures, "
               f"{seconds(f['total_s'])} lost\ntrace {seconds(f['trace_s'])}, lower {seconds(f['lower_s'])}, "
               f"compile {seconds(f['compile_s'])}\ndefined at {f['location']}")
        parts = [f'<g class="fn-row" data-hover="1" data-function="{esc(f["function"])}"><title>{esc(tip)}</title>',
                 f'<text class="lbl" x="{label_w - 8}" y="{y + 17}" text-anchor="end">{esc(short(f["function"], 34))}</text>']
        x = float(label_w)
        for phase in PHASES:
            w = f[f"{phase}_s"] * scale
            parts.append(f'<rect class="seg seg-{phase}" data-phase="{phase}" x="{_n(x)}" y="{y + 4}" '
                         f'width="{_n(w)}" height="{row_h - 8}"/>')
            x += w
        parts.append(f'<text class="val" x="{_n(x + 6)}" y="{y + 17}">{esc(seconds(f["total_s"]))} \u00b7 '
                     f'{f["compiles"]} compile{"s" * (f["compiles"] != 1)}</text></g>')
        body.append("".join(parts))
    return _svg(height, body, "time lost per function: trace, lower and compile seconds")


def timeline(rows: Sequence[tuple[str, Sequence[dict[str, Any]]]], t0: float, t1: float) -> str:
    """One row per function, one mark per miss at its time in the run; hover for the details."""
    label_w, right, row_h, top = 200, 16, 24, 6
    span = max(t1 - t0, 1e-3)
    ticks = nice_ticks(span)
    scale = (WIDTH - label_w - right) / ticks[-1]
    height = top + row_h * len(rows) + 22
    body = []
    for i, (name, _) in enumerate(rows):
        y = top + i * row_h
        body.append(f'<rect class="lane" x="{label_w}" y="{y + 2}" width="{WIDTH - label_w - right}" height="{row_h - 4}"/>'
                    f'<text class="lbl" x="{label_w - 8}" y="{y + 16}" text-anchor="end">{esc(short(name, 30))}</text>')
    for t in ticks:
        x = label_w + t * scale
        body.append(f'<line class="grid" x1="{_n(x)}" x2="{_n(x)}" y1="{top}" y2="{_n(height - 18)}"/>'
                    f'<text class="tick" x="{_n(x)}" y="{_n(height - 5)}" text-anchor="middle">+{tick_label(t)}</text>')
    for i, (name, misses) in enumerate(rows):
        y = top + i * row_h
        for m in misses:
            x = label_w + (m["start"] - t0) * scale
            w = max(3.0, (m["end"] - m["start"]) * scale)
            tip = (f"#{m['seq']} {name} \u00b7 {m['kind']} at +{m['start'] - t0:.2f} s\n{m['explanation']}\n"
                   f"call site: {m['call_site']}\ncost: {cost_line(m)}")
            body.append(f'<rect class="mark kind-{esc(m["kind"])}" data-hover="1" data-seq="{m["seq"]}" '
                        f'x="{_n(x)}" y="{y + 5}" width="{_n(w)}" height="{row_h - 10}" rx="1.5">'
                        f'<title>{esc(tip)}</title></rect>')
    return _svg(height, body, "compiles over the run's wall time, one row per function")


def histogram(values: Sequence[int], counts: Sequence[int], boundaries: Sequence[int], unit: str = "miss") -> str:
    """The values an axis took, binned, with the proposed bucket boundaries drawn as dashed lines
    (``counts`` in ``unit``: ``"miss"``, or ``"call"`` where calls were counted)."""
    w, h, left, right, top, bottom = 460, 170, 34, 24, 18, 26
    lo = min(values)
    hi = max(list(values) + list(boundaries))
    nbins = min(40, hi - lo + 1)
    step = -(-(hi - lo + 1) // nbins)
    nbins = -(-(hi - lo + 1) // step)
    bins = [0] * nbins
    for v, c in zip(values, counts):
        bins[(v - lo) // step] += c
    ymax = max(bins) or 1
    sx = (w - left - right) / (nbins * step)
    sy = (h - top - bottom) / ymax

    def x_of(v: float) -> float:
        return left + (v - lo) * sx

    body = []
    boundaries = sorted(b for b in boundaries if b >= lo)
    edges = [lo] + [b + 1 for b in boundaries]
    edges += [hi + 1] if edges[-1] <= hi else []
    for i, (a, b) in enumerate(zip(edges, edges[1:])):
        body.append(f'<rect class="band{" odd" * (i % 2)}" x="{_n(x_of(a))}" y="{top}" '
                    f'width="{_n(max(0.0, x_of(b) - x_of(a)))}" height="{h - top - bottom}"/>')
    for i, n in enumerate(bins):
        if not n:
            continue
        a, b = lo + i * step, min(hi, lo + (i + 1) * step - 1)
        label = f"{a}" if a == b else f"{a}\u2013{b}"
        bh = n * sy
        body.append(f'<rect class="hbar" data-hover="1" data-count="{n}" x="{_n(x_of(a) + 0.5)}" '
                    f'y="{_n(h - bottom - bh)}" width="{_n(max(1.0, step * sx - 1))}" height="{_n(bh)}">'
                    f'<title>{label}: {n} {unit}{"es" * (n != 1) if unit == "miss" else "s" * (n != 1)}</title></rect>')
    for b in boundaries:
        x = x_of(b + 1)
        body.append(f'<line class="boundary" data-boundary="{b}" x1="{_n(x)}" x2="{_n(x)}" y1="{top - 4}" '
                    f'y2="{h - bottom}"/><text class="blabel" x="{_n(x)}" y="{top - 7}" text-anchor="middle">'
                    f'\u2264{b}</text>')
    base = h - bottom
    body.append(f'<line class="grid" x1="{left}" x2="{w - right}" y1="{base}" y2="{base}"/>'
                f'<text class="tick" x="{left}" y="{base + 15}" text-anchor="start">{lo}</text>'
                f'<text class="tick" x="{w - right}" y="{base + 15}" text-anchor="end">{hi}</text>'
                f'<text class="tick" x="{left - 5}" y="{top + 8}" text-anchor="end">{ymax}</text>'
                f'<text class="tick" x="{left - 5}" y="{base}" text-anchor="end">0</text>')
    return (f'<svg class="hist" viewBox="0 0 {w} {h}" role="img" aria-label="histogram of the values with '
            f'the proposed bucket boundaries">' + "".join(body) + "</svg>")
