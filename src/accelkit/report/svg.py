"""Inline SVG charts for the HTML report: lines over time, stacked bars, plain bars.

No library and no script: each chart is one ``<svg>`` element, drawn at a fixed
size and scaled by the browser. Axes carry round ticks (1, 2, 2.5 or 5 times a power of
ten) with grid lines, a chart of several series a legend, and every text its own colour
chosen for contrast with what it is drawn on (WCAG AA: 4.5:1 at least, `contrast`).
Every drawn series carries its numbers in a ``data-values`` attribute (Python's `repr`
of each float, ``null`` for a gap), so a reader, or a test, can take them back exactly.
"""

from __future__ import annotations

import html
import math
import sys
from collections.abc import Callable, Sequence

WIDTH, HEIGHT = 640, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 12, 40
# Blue, orange, grey, green, purple, red: each takes white or `INK` text at 4.5:1.
COLORS = ("#1f77b4", "#ff7f0e", "#666666", "#2ca02c", "#7b4fa8", "#d62728")
INK, MUTED, GRID, WHITE = "#222222", "#555555", "#e4e4e4", "#ffffff"
_CHAR_W = 7.0  # about the width of a 12 px character (`FONT`), for laying out text
FONT = 'font-family="system-ui, sans-serif" font-size="12"'  # every chart's text

Values = Sequence[float | None]


def data_values(values: Values) -> str:
    """The numbers of a series as a ``data-values`` attribute holds them."""
    return ",".join("null" if v is None else repr(float(v)) for v in values)


def contrast(a: str, b: str) -> float:
    """The WCAG 2 contrast ratio of two ``#rrggbb`` colours, from 1 to 21.

    Example:
        >>> round(contrast("#222222", "#ffffff"), 1)
        15.9
    """
    light, dark = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def _luminance(color: str) -> float:
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def ink_on(color: str) -> str:
    """White or `INK`, whichever reads better on `color`."""
    return WHITE if contrast(WHITE, color) >= contrast(INK, color) else INK


def ticks(top: float, count: int = 5) -> list[float]:
    """Round ticks from 0 up to the first at or past `top`, about `count` of them.

    Example:
        >>> ticks(387.3), ticks(1.0), ticks(0.0)
        ([0.0, 100.0, 200.0, 300.0, 400.0], [0.0, 0.2, 0.4, 0.6, 0.8, 1.0], [0.0, 1.0])
    """
    if not top > 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    if raw < sys.float_info.min:  # subnormal (or 0 by underflow): no round steps below it;
        return [0.0, 2 * top]  # 2x: a tick at `top` itself is labelled (rounded) below it
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return [float(f"{i * step:.12g}") for i in range(math.ceil(top / step - 1e-9) + 1)]


def _range_ticks(low: float, high: float) -> list[float]:
    """Round ticks inside [`low`, `high`] (an x axis that does not start at 0)."""
    span = high - low
    if span <= 0:
        return [low]
    step = ticks(span)[1]
    first = math.ceil(low / step - 1e-9) * step
    return [float(f"{first + i * step:.12g}") for i in range(int((high - first) / step + 1e-9) + 1)]


def _fmt(value: float) -> str:
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:,.4g}"


def _text(x: float, y: float, text: str, *, anchor: str = "start", color: str = MUTED) -> str:
    """One text element; its colour as a style, which outranks the page's stylesheet. A
    centred text that would run off the chart's right edge ends at it instead."""
    if anchor == "middle" and x + _CHAR_W * len(text) / 2 > WIDTH:
        x, anchor = float(WIDTH - 2), "end"
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" style="fill:{color}">'
        f"{html.escape(text)}</text>"
    )


def _open(chart_id: str, title: str, height: int = HEIGHT) -> str:
    """The opening tag of a chart's svg element."""
    esc = html.escape
    return (
        f'<svg id="{esc(chart_id)}" class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{esc(title)}" {FONT}>'
    )


def _frame(
    chart_id: str,
    title: str,
    body: list[str],
    y_ticks: list[float],
    x_span: tuple[float, float],
    labels: tuple[str, str],
    legend: Sequence[str] = (),
) -> str:
    """The svg element: grid lines and ticks on both axes, the axis labels, `body`, and a
    legend under the chart naming each series of `legend` in `COLORS`, when several."""
    bottom, right = HEIGHT - _BOTTOM, WIDTH - _RIGHT
    top = y_ticks[-1] or 1.0
    parts = []
    for tick in y_ticks:
        y = bottom - tick / top * (bottom - _TOP)
        parts.append(
            f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" '
            f'stroke="{GRID}"/>' + _text(_LEFT - 6, y + 4, _fmt(tick), anchor="end")
        )
    x0, x1 = x_span
    for tick in _range_ticks(x0, x1):
        x = _LEFT + (tick - x0) / ((x1 - x0) or 1.0) * (right - _LEFT)
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}"/>'
            + _text(x, bottom + 16, _fmt(tick), anchor="middle")
        )
    x_label, y_label = labels
    parts += [
        f'<line class="axis" x1="{_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
        _text((_LEFT + right) / 2, HEIGHT - 6, x_label, anchor="middle", color=INK),
        (
            f'<text x="14" y="{(_TOP + bottom) / 2}" text-anchor="middle" style="fill:{INK}" '
            f'transform="rotate(-90 14 {(_TOP + bottom) / 2})">{html.escape(y_label)}</text>'
        ),
    ]
    key, height = _legend(legend, COLORS, top=HEIGHT + 12) if len(legend) > 1 else ("", HEIGHT)
    return "\n".join([_open(chart_id, title, height), *parts, *body, key, "</svg>"])


def line_chart(
    chart_id: str,
    title: str,
    x: Values,
    lines: Sequence[tuple[str, Values]],
    *,
    x_label: str,
    y_label: str,
    y_max: float | None = None,
    marks: Sequence[float] = (),
    marks_name: str = "",
    dots: bool = False,
) -> str:
    """Lines over a shared x axis (gaps where a value is None); the y axis from 0 to a
    round tick past the largest value, or to `y_max` (100 for a percentage) when no
    value passes it. `marks` are x positions drawn as dashed vertical lines (in the
    legend as `marks_name`, in the colour after the lines'); `dots` puts a dot on each
    point, for series of a few points that a line alone would not show."""
    known = [v for _, ys in lines for v in ys if v is not None]
    top = max(known, default=0.0)
    y_ticks = ticks(y_max) if y_max is not None and top <= y_max else ticks(top)
    xs = [v for v in x if v is not None]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    span, y_top = (x1 - x0) or 1.0, y_ticks[-1]

    def point(a: float, b: float) -> str:
        px = _LEFT + (a - x0) / span * (WIDTH - _LEFT - _RIGHT)
        py = HEIGHT - _BOTTOM - b / y_top * (HEIGHT - _BOTTOM - _TOP)
        return f"{px:.1f},{py:.1f}"

    body = [f'<g class="x" data-values="{data_values(x)}"></g>']
    for n, (name, ys) in enumerate(lines):
        points = " ".join(
            point(a, b) for a, b in zip(x, ys, strict=False) if a is not None and b is not None
        )
        body.append(
            f'<polyline class="series" data-name="{html.escape(name)}" '
            f'data-values="{data_values(ys)}" fill="none" stroke="{COLORS[n % len(COLORS)]}" '
            f'stroke-width="2" points="{points}"><title>{html.escape(name)}</title>'
            f"</polyline>"
        )
        if dots:
            body.append(_dots(points, COLORS[n % len(COLORS)]))
    legend = [n for n, _ in lines]
    if marks:
        body.append(_marks(marks, lambda a: point(a, 0.0), COLORS[len(lines) % len(COLORS)]))
        legend.append(marks_name)
    labels = (x_label, y_label)
    return _frame(chart_id, title, body, y_ticks, (x0, x1), labels, legend)


def _dots(points: str, color: str) -> str:
    """A dot at each "x,y" of `points`."""
    circles = "".join(
        f'<circle cx="{x}" cy="{y}" r="3.5"/>' for x, y in (p.split(",") for p in points.split())
    )
    return f'<g class="dots" fill="{color}">{circles}</g>'


def _marks(xs: Sequence[float], at: Callable[[float], str], color: str) -> str:
    """Dashed vertical lines from the x axis to the plot's top at each of `xs`; `at` gives
    the "x,y" of a value on the x axis."""
    lines = []
    for x in xs:
        px = at(x).split(",")[0]
        lines.append(
            f'<line x1="{px}" y1="{_TOP}" x2="{px}" y2="{HEIGHT - _BOTTOM}" stroke="{color}" '
            f'stroke-width="1.5" stroke-dasharray="4 3"/>'
        )
    return f'<g class="marks" data-values="{data_values(xs)}">{"".join(lines)}</g>'


def histogram(
    chart_id: str,
    title: str,
    edges: Sequence[float],
    counts: Sequence[int],
    *,
    x_label: str,
    y_label: str,
    lines: Sequence[tuple[str, float]] = (),
) -> str:
    """Vertical bars, one per bin between neighbouring `edges` (one more than `counts`),
    on a value axis from the first edge to the last; `lines` are (name, value) drawn as
    vertical lines (percentiles, a mean), each named in the legend after "bars" (the
    bars' name is `y_label`). The bars carry their counts in ``data-values``, the edges
    in the x group's, each line its value in ``data-value``."""
    y_ticks = ticks(float(max(counts, default=0)))
    values = [v for _, v in lines]
    x0, x1 = min([edges[0], *values]), max([edges[-1], *values])
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _BOTTOM - _TOP
    scale, y_top = plot_w / ((x1 - x0) or 1.0), y_ticks[-1]
    rects = []
    for count, left, right in zip(counts, edges, edges[1:], strict=False):
        height = count / y_top * plot_h
        rects.append(
            f'<rect x="{_LEFT + (left - x0) * scale:.2f}" y="{HEIGHT - _BOTTOM - height:.2f}" '
            f'width="{max((right - left) * scale - 1, 0.5):.2f}" height="{height:.2f}"/>'
        )
    body = [
        f'<g class="x" data-values="{data_values(edges)}"></g>',
        (
            f'<g class="series" data-name="{html.escape(y_label)}" '
            f'data-values="{data_values(counts)}" fill="{COLORS[0]}">{"".join(rects)}</g>'
        ),
    ]
    for n, (name, value) in enumerate(lines, start=1):
        px = _LEFT + (value - x0) * scale
        body.append(
            f'<line class="mark" data-name="{html.escape(name)}" data-value="{value!r}" '
            f'x1="{px:.2f}" y1="{_TOP}" x2="{px:.2f}" y2="{HEIGHT - _BOTTOM}" '
            f'stroke="{COLORS[n % len(COLORS)]}" stroke-width="2">'
            f"<title>{html.escape(name)}</title></line>"
        )
    legend = [y_label, *(name for name, _ in lines)]
    return _frame(chart_id, title, body, y_ticks, (x0, x1), (x_label, y_label), legend)


def stacked_bars(
    chart_id: str,
    title: str,
    x: Values,
    parts: Sequence[tuple[str, Values]],
    *,
    x_label: str,
    y_label: str,
) -> str:
    """One bar per window, its `parts` stacked from the bottom in the order given, and a
    legend naming them. `x` holds each window's end: a bar spans from the window before's
    end (the first, as wide as the second) to its own, on a time axis. The columns pair
    up by index (the schema checks their lengths); a window without its end is not drawn."""
    totals = [sum(ys[i] or 0.0 for _, ys in parts if i < len(ys)) for i in range(len(x))]
    y_ticks = ticks(max(totals, default=0.0))
    spans = _windows(x)
    x0 = min((a for a, _ in spans.values()), default=0.0)
    x1 = max((b for _, b in spans.values()), default=1.0)
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _BOTTOM - _TOP
    scale, y_top = plot_w / ((x1 - x0) or 1.0), y_ticks[-1]
    base = [0.0] * len(x)
    body = [f'<g class="x" data-values="{data_values(x)}"></g>']
    for n, (name, ys) in enumerate(parts):
        rects = []
        for i, value in enumerate(ys[: len(x)]):
            if value and i in spans:
                start, end = spans[i]
                height = value / y_top * plot_h
                top = HEIGHT - _BOTTOM - (base[i] / y_top * plot_h) - height
                rects.append(
                    f'<rect x="{_LEFT + (start - x0) * scale:.2f}" y="{top:.2f}" '
                    f'width="{max((end - start) * scale - 1, 0.5):.2f}" height="{height:.2f}"/>'
                )
                base[i] += value
        body.append(
            f'<g class="series" data-name="{html.escape(name)}" '
            f'data-values="{data_values(ys)}" fill="{COLORS[n % len(COLORS)]}">'
            f"<title>{html.escape(name)}</title>{''.join(rects)}</g>"
        )
    labels = (x_label, y_label)
    return _frame(chart_id, title, body, y_ticks, (x0, x1), labels, [n for n, _ in parts])


def _windows(ends: Values) -> dict[int, tuple[float, float]]:
    """Each window's (start, end) by its index, from the windows' ends: a window starts
    where the one before it ended; the first is as long as the second (or 1)."""
    known = [(i, e) for i, e in enumerate(ends) if e is not None]
    spans = {}
    for n, (i, end) in enumerate(known):
        first = end - ((known[1][1] - end) if len(known) > 1 else 1.0)
        start = known[n - 1][1] if n else first
        spans[i] = (min(start, end), end)
    return spans


_NAMES = 124  # the room left of a `bars` chart for the bars' names


def bars(
    chart_id: str,
    title: str,
    items: Sequence[tuple[str, float]],
    *,
    unit: str,
    colors: Sequence[str] = COLORS,
) -> str:
    """Horizontal bars, one per (name, value): the name left of the bar, the value with
    `unit` after its end (inside it, in the colour that reads on it, where the bar
    leaves no room), a round scale in `unit` under them."""
    x_ticks = ticks(max((v for _, v in items), default=0.0), 4)
    plot_w, top = WIDTH - _NAMES - _RIGHT, x_ticks[-1]
    row = 34
    bottom = _TOP + row * len(items)
    body = []
    for tick in x_ticks:
        x = _NAMES + tick / top * plot_w
        body.append(
            f'<line class="grid" x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{bottom}" '
            f'stroke="{GRID}"/>' + _text(x, bottom + 16, _fmt(tick), anchor="middle")
        )
    for n, (name, value) in enumerate(items):
        y, color = _TOP + n * row + 5, colors[n % len(colors)]
        length = value / top * plot_w
        text = f"{_fmt(value)} {unit}"
        inside = length + 8 + _CHAR_W * len(text) > plot_w
        place = (
            _text(_NAMES + length - 6, y + 16, text, anchor="end", color=ink_on(color))
            if inside
            else _text(_NAMES + length + 6, y + 16, text, color=INK)
        )
        body.append(
            f'<g class="bar" data-name="{html.escape(name)}" data-value="{value!r}">'
            + _text(_NAMES - 8, y + 16, name, anchor="end", color=INK)
            + f'<rect x="{_NAMES}" y="{y:.1f}" width="{length:.1f}" height="24" fill="{color}"/>'
            + f"{place}</g>"
        )
    body += [
        f'<line class="axis" x1="{_NAMES}" y1="{_TOP}" x2="{_NAMES}" y2="{bottom}"/>',
        _text(_NAMES + plot_w / 2, bottom + 32, unit, anchor="middle", color=INK),
    ]
    return "\n".join([_open(chart_id, title, bottom + 40), *body, "</svg>"])


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
        _text(_LEFT, bottom + 14, "0"),
        _text(WIDTH - _RIGHT, bottom + 14, f"{_fmt(whole)} {unit}", anchor="end"),
    ]
    legend, height = _legend(texts, colors, top=bottom + 34)
    return "\n".join([_open(chart_id, title, height), *body, legend, "</svg>"])


def _part(
    name: str, value: float, share: str, text: str, span: tuple[float, float], color: str
) -> str:
    """One part of a `parts_bar` at `span` (x, length): its rectangle, its `share` inside
    when it fits, and its whole label, `text`, as the tooltip."""
    x, length = span
    inside = (
        _text(x + length / 2, _TOP + _BAR / 2 + 4, share, anchor="middle", color=ink_on(color))
        if length >= 8 * len(share) + 8
        else ""
    )
    return (
        f'<g class="part" data-name="{html.escape(name)}" data-value="{value!r}">'
        f'<rect x="{x:.2f}" y="{_TOP}" width="{length:.2f}" height="{_BAR}" fill="{color}"/>'
        f"{inside}<title>{html.escape(text)}</title></g>"
    )


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
            f'fill="{colors[n % len(colors)]}"/>' + _text(x + 14, y, text, color=INK)
        )
        x += width + 18
    return f'<g class="legend">{"".join(keys)}</g>', int(y + 8)
