"""Small plots of a series, drawn here as inline SVG (no script, no build step, no
network): bars for counts, a line for rates and durations; a bucket with no value
leaves a gap. Attributes only, no ``style`` (the console's CSP allows no inline
style); every text escaped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from html import escape

__all__ = ["Plot", "PlotKind", "duration", "svg"]

_W, _H, _PAD_X, _PAD_TOP, _PAD_BOTTOM = 320, 96, 6, 16, 16
_COLOUR = {"bars": "#3b5bdb", "line": "#c92a2a"}


class PlotKind(StrEnum):
    BARS = "bars"
    LINE = "line"


@dataclass(frozen=True, slots=True)
class Plot:
    """``values``, one per bucket, oldest first (None: no value in that bucket);
    ``fmt`` writes a value for the labels; ``span`` names the x axis's length."""

    name: str
    values: Sequence[float | None]
    fmt: Callable[[float], str]
    kind: PlotKind = PlotKind.BARS
    span: str = "60 min"
    #: The top of the y axis at least (a rate's 10 %, so that a few failures do not
    #: fill it); else the largest value.
    top: float = 0.0


def duration(seconds: float) -> str:
    """``0.0042`` -> ``4.2 ms``, ``3.5`` -> ``3.50 s``, ``95`` -> ``1.6 min``."""
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _xy(plot: Plot, i: int, value: float, top: float) -> tuple[float, float]:
    step = (_W - 2 * _PAD_X) / max(len(plot.values), 1)
    inner = _H - _PAD_TOP - _PAD_BOTTOM
    return _PAD_X + i * step, _H - _PAD_BOTTOM - inner * (value / top if top else 0)


def _bars(plot: Plot, top: float) -> list[str]:
    step = (_W - 2 * _PAD_X) / max(len(plot.values), 1)
    out = []
    for i, v in enumerate(plot.values):
        if not v:
            continue
        x, y = _xy(plot, i, v, top)
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(step - 1, 1):.1f}" '
                   f'height="{_H - _PAD_BOTTOM - y:.1f}" fill="{_COLOUR["bars"]}">'
                   f'<title>{escape(plot.fmt(v))}</title></rect>')
    return out


def _line(plot: Plot, top: float) -> list[str]:
    step = (_W - 2 * _PAD_X) / max(len(plot.values), 1)
    out, run = [], list[str]()
    for i, v in enumerate([*plot.values, None]):
        if v is None:
            if len(run) > 1:
                out.append(f'<polyline points="{" ".join(run)}" fill="none" '
                           f'stroke="{_COLOUR["line"]}" stroke-width="1.5"/>')
            run = []
            continue
        x, y = _xy(plot, i, v, top)
        run.append(f"{x + step / 2:.1f},{y:.1f}")
        out.append(f'<circle cx="{x + step / 2:.1f}" cy="{y:.1f}" r="1.6" '
                   f'fill="{_COLOUR["line"]}"><title>{escape(plot.fmt(v))}</title></circle>')
    return out


def svg(plot: Plot) -> str:
    """``plot`` as one ``<svg>`` element: the axis's top value at its top left, the
    span under it, each bar or point with its value as a tooltip."""
    top = max([plot.top, *(v for v in plot.values if v is not None)])
    base = _H - _PAD_BOTTOM
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{_W}" '
             f'height="{_H}" viewBox="0 0 {_W} {_H}" role="img" '
             f'aria-label="{escape(plot.name)}">',
             f'<line x1="{_PAD_X}" y1="{base}" x2="{_W - _PAD_X}" y2="{base}" '
             'stroke="#adb5bd"/>',
             f'<line x1="{_PAD_X}" y1="{_PAD_TOP}" x2="{_W - _PAD_X}" y2="{_PAD_TOP}" '
             'stroke="#e9ecef" stroke-dasharray="3 3"/>',
             f'<text x="{_PAD_X}" y="{_PAD_TOP - 4}" class="axis">'
             f'{escape(plot.fmt(top)) if top else "no data"}</text>',
             f'<text x="{_PAD_X}" y="{_H - 3}" class="axis">−{escape(plot.span)}</text>',
             f'<text x="{_W - _PAD_X}" y="{_H - 3}" class="axis" text-anchor="end">now</text>']
    parts += _bars(plot, top) if plot.kind is PlotKind.BARS else _line(plot, top)
    parts.append("</svg>")
    return "".join(parts)
