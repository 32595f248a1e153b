"""Inline SVG charts for the HTML report: lines over time, stacked bars, plain bars.

No library and no script: each chart is one ``<svg>`` element, drawn at a fixed
size and scaled by the browser. Every drawn series carries its numbers in a
``data-values`` attribute (Python's `repr` of each float, ``null`` for a gap), so a
reader, or a test, can take them back exactly.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

WIDTH, HEIGHT = 640, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 12, 34
COLORS = ("#1f77b4", "#d62728", "#7f7f7f", "#2ca02c", "#9467bd", "#ff7f0e")
# Text drawn on a coloured bar: a style, since the page's stylesheet colours every svg
# text and outranks a fill attribute.
_ON_COLOR = "fill:#fff"

Values = Sequence[float | None]


def data_values(values: Values) -> str:
    """The numbers of a series as a ``data-values`` attribute holds them."""
    return ",".join("null" if v is None else repr(float(v)) for v in values)


def _fmt(value: float) -> str:
    return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:.3g}"


def _frame(
    chart_id: str,
    title: str,
    body: list[str],
    y_top: float,
    x_span: tuple[float, float],
    x_label: str,
    y_label: str,
    y_ticks: bool = True,
) -> str:
    """The svg element: axes, the extreme ticks, labels, and `body` inside."""
    esc = html.escape
    bottom, right = HEIGHT - _BOTTOM, WIDTH - _RIGHT
    parts = [
        _open(chart_id, title),
        f'<line class="axis" x1="{_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}"/>',
        *(
            [
                f'<text x="{_LEFT - 4}" y="{_TOP + 4}" text-anchor="end">{esc(_fmt(y_top))}</text>',
                f'<text x="{_LEFT - 4}" y="{bottom}" text-anchor="end">0</text>',
            ]
            if y_ticks
            else []
        ),
        f'<text x="{_LEFT}" y="{bottom + 14}">{esc(_fmt(x_span[0]))}</text>',
        f'<text x="{right}" y="{bottom + 14}" text-anchor="end">{esc(_fmt(x_span[1]))}</text>',
        (
            f'<text x="{(_LEFT + right) / 2}" y="{HEIGHT - 4}" text-anchor="middle">'
            f"{esc(x_label)}</text>"
        ),
        (
            f'<text x="12" y="{(_TOP + bottom) / 2}" text-anchor="middle" '
            f'transform="rotate(-90 12 {(_TOP + bottom) / 2})">{esc(y_label)}</text>'
        ),
    ]
    return "\n".join(parts + body + ["</svg>"])


def _top(values: list[float]) -> float:
    top = max(values, default=0.0)
    return top * 1.05 if top > 0 else 1.0


def line_chart(
    chart_id: str,
    title: str,
    x: Values,
    lines: Sequence[tuple[str, Values]],
    *,
    x_label: str,
    y_label: str,
    guides: Sequence[tuple[str, float]] = (),
) -> str:
    """Lines over a shared x axis (gaps where a value is None), with optional
    horizontal guide lines (a peak, a ceiling) labelled by name."""
    known = [v for _, ys in lines for v in ys if v is not None] + [g for _, g in guides]
    xs = [v for v in x if v is not None]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y_top = _top(known)
    span = (x1 - x0) or 1.0

    def px(value: float) -> float:
        return _LEFT + (value - x0) / span * (WIDTH - _LEFT - _RIGHT)

    def py(value: float) -> float:
        return HEIGHT - _BOTTOM - value / y_top * (HEIGHT - _BOTTOM - _TOP)

    body = [f'<g class="x" data-values="{data_values(x)}"></g>']
    for n, (name, ys) in enumerate(lines):
        color = COLORS[n % len(COLORS)]
        points = " ".join(
            f"{px(a):.1f},{py(b):.1f}"
            for a, b in zip(x, ys, strict=False)
            if a is not None and b is not None
        )
        body.append(
            f'<polyline class="series" data-name="{html.escape(name)}" '
            f'data-values="{data_values(ys)}" fill="none" stroke="{color}" '
            f'stroke-width="1.5" points="{points}"><title>{html.escape(name)}</title>'
            f"</polyline>"
        )
    for n, (name, value) in enumerate(guides):
        y = py(value)
        body.append(
            f'<line class="guide" data-name="{html.escape(name)}" '
            f'data-value="{value!r}" x1="{_LEFT}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" '
            f'y2="{y:.1f}" stroke="{COLORS[(n + 1) % len(COLORS)]}" '
            f'stroke-dasharray="4 3"/>'
            f'<text x="{WIDTH - _RIGHT}" y="{y - 3:.1f}" text-anchor="end">'
            f"{html.escape(name)} {_fmt(value)}</text>"
        )
    return _frame(chart_id, title, body, y_top, (x0, x1), x_label, y_label)


def stacked_bars(
    chart_id: str,
    title: str,
    x: Values,
    parts: Sequence[tuple[str, Values]],
    *,
    x_label: str,
    y_label: str,
    y_ticks: bool = True,
) -> str:
    """One bar per x, its `parts` stacked from the bottom in the order given."""
    totals = [sum(ys[i] or 0.0 for _, ys in parts) for i in range(len(x))]
    y_top = _top(totals)
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _BOTTOM - _TOP
    width = plot_w / max(1, len(x))
    base = [0.0] * len(x)
    body = [f'<g class="x" data-values="{data_values(x)}"></g>']
    for n, (name, ys) in enumerate(parts):
        rects = []
        for i, value in enumerate(ys):
            if value:
                height = value / y_top * plot_h
                top = HEIGHT - _BOTTOM - (base[i] / y_top * plot_h) - height
                rects.append(
                    f'<rect x="{_LEFT + i * width:.2f}" y="{top:.2f}" '
                    f'width="{max(width - 0.5, 0.5):.2f}" height="{height:.2f}"/>'
                )
                base[i] += value
        body.append(
            f'<g class="series" data-name="{html.escape(name)}" '
            f'data-values="{data_values(ys)}" fill="{COLORS[n % len(COLORS)]}">'
            f"<title>{html.escape(name)}</title>{''.join(rects)}</g>"
        )
    xs = [v for v in x if v is not None]
    span = (min(xs), max(xs)) if xs else (0.0, 1.0)
    return _frame(chart_id, title, body, y_top, span, x_label, y_label)


def bars(chart_id: str, title: str, items: Sequence[tuple[str, float]], *, unit: str) -> str:
    """Horizontal bars, one per (label, value), each labelled with its value."""
    y_top = _top([v for _, v in items])
    plot_w = WIDTH - _LEFT - _RIGHT - 120
    row = (HEIGHT - _BOTTOM - _TOP) / max(1, len(items))
    body = []
    for n, (label, value) in enumerate(items):
        y = _TOP + n * row + row * 0.15
        length = value / y_top * plot_w
        body.append(
            f'<g class="bar" data-name="{html.escape(label)}" data-value="{value!r}">'
            f'<rect x="{_LEFT}" y="{y:.1f}" width="{length:.1f}" '
            f'height="{row * 0.7:.1f}" fill="{COLORS[n % len(COLORS)]}"/>'
            f'<text {_bar_label_place(length, plot_w)} y="{y + row * 0.45:.1f}">'
            f"{html.escape(label)}: {html.escape(_fmt(value))} {html.escape(unit)}"
            f"</text></g>"
        )
    # the axis runs past the longest bar, to leave room for its label
    axis_end = y_top * (WIDTH - _RIGHT - _LEFT) / plot_w
    return _frame(chart_id, title, body, y_top, (0.0, axis_end), unit, "", y_ticks=False)


def _bar_label_place(length: float, plot_w: float) -> str:
    """A bar's label after its end, or inside it (right-aligned, white) when the bar
    is long enough that a label after it would run off the chart."""
    if length > plot_w / 2:
        return f'x="{_LEFT + length - 4:.1f}" text-anchor="end" style="{_ON_COLOR}"'
    return f'x="{_LEFT + length + 4:.1f}"'


_BAR = 34  # the height of a parts_bar's bar


def parts_bar(
    chart_id: str,
    title: str,
    parts: Sequence[tuple[str, float]],
    *,
    unit: str,
    total: float | None = None,
    colors: Sequence[str] = COLORS,
    number: str = "{:,.4g}",
) -> str:
    """One horizontal bar of `total` (default: the parts' sum) split into `parts`, left to
    right, each labelled inside with its share where it is wide enough; under it a scale
    and a legend naming each part with its value and share. Each part carries its
    number in ``data-value``; `colors` are the parts' in turn, `number` the format of
    the values in the legend.

    Example:
        >>> 'data-value="8.0"' in parts_bar("c", "time", [("a", 8.0), ("b", 2.0)], unit="s")
        True
    """
    whole = max(total or 0.0, sum(v for _, v in parts)) or 1.0
    body, texts, x = [], [], float(_LEFT)
    for n, (name, value) in enumerate(parts):
        share = f"{value / whole:.0%}"
        texts.append(f"{name} {number.format(value)} {unit} ({share})")
        length = value / whole * (WIDTH - _LEFT - _RIGHT)
        body.append(_part(name, value, share, texts[-1], (x, length), colors[n % len(colors)]))
        x += length
    bottom = _TOP + _BAR + 4
    body += [
        f'<line class="axis" x1="{_LEFT}" y1="{bottom}" x2="{WIDTH - _RIGHT}" y2="{bottom}"/>',
        f'<text x="{_LEFT}" y="{bottom + 14}">0</text>',
        (
            f'<text x="{WIDTH - _RIGHT}" y="{bottom + 14}" text-anchor="end">'
            f"{html.escape(_fmt(whole))} {html.escape(unit)}</text>"
        ),
    ]
    legend, height = _legend(texts, colors, top=bottom + 34)
    return "\n".join([_open(chart_id, title, height), *body, legend, "</svg>"])


def _open(chart_id: str, title: str, height: int = HEIGHT) -> str:
    """The opening tag of a chart's svg element."""
    esc = html.escape
    return (
        f'<svg id="{esc(chart_id)}" class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{esc(title)}">'
    )


def _part(
    name: str, value: float, share: str, text: str, span: tuple[float, float], color: str
) -> str:
    """One part of a `parts_bar` at `span` (x, length): its rectangle, its `share` inside
    when it fits, and its whole label, `text`, as the tooltip."""
    x, length = span
    inside = (
        f'<text x="{x + length / 2:.1f}" y="{_TOP + _BAR / 2 + 4:.1f}" '
        f'text-anchor="middle" style="{_ON_COLOR}">{html.escape(share)}</text>'
        if length >= 8 * len(share) + 8
        else ""
    )
    return (
        f'<g class="part" data-name="{html.escape(name)}" data-value="{value!r}">'
        f'<rect x="{x:.2f}" y="{_TOP}" width="{length:.2f}" height="{_BAR}" fill="{color}"/>'
        f"{inside}<title>{html.escape(text)}</title></g>"
    )


_CHAR_W = 6.5  # about the width of an 11 px character, for laying out a legend


def _legend(texts: Sequence[str], colors: Sequence[str], *, top: float) -> tuple[str, int]:
    """A colour key per text (`colors` in turn), as many to a line as fit; the legend and
    the chart height that holds it."""
    keys, x, y = [], float(_LEFT), top
    for n, text in enumerate(texts):
        width = 14 + _CHAR_W * len(text)
        if x > _LEFT and x + width > WIDTH - _RIGHT:
            x, y = float(_LEFT), y + 16
        keys.append(
            f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" '
            f'fill="{colors[n % len(colors)]}"/>'
            f'<text x="{x + 14:.1f}" y="{y:.1f}">{html.escape(text)}</text>'
        )
        x += width + 18
    return f'<g class="legend">{"".join(keys)}</g>', int(y + 8)
