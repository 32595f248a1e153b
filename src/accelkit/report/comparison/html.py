"""Two runs compared on one self-contained HTML page: the differences first (the
figures side by side with their verdicts, what differs in the set-up, the advice that
came and went, what cannot be compared), then the runs' curves overlaid, BASE and NEW
in a legend (`accelkit.report.comparison.curves`). No script and nothing from the
network, as the single-run page (`accelkit.report.html`, whose stylesheet it shares).

``accelkit report --compare BASE.json NEW.json --html FILE`` writes what
`render_comparison_html` returns.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from accelkit.report.comparison.curves import ROLES, Overlay, draw, overlays
from accelkit.report.comparison.text import change_text, figure_row, figure_text, spread_text
from accelkit.report.comparison.types import (
    AdviceChange,
    Comparison,
    FigureComparison,
    Verdict,
)
from accelkit.report.html import _STYLE
from accelkit.report.svg import COLORS

if TYPE_CHECKING:
    from accelkit.profiling.run_report import RunReport

# A verdict's colour in the table: red for a slower run, green for a faster one, each
# 4.5:1 or more on white (WCAG AA, as `svg.contrast` measures); the others in the text's.
_STYLE_COMPARE = """
#compare-figures td { overflow-wrap: break-word; }
#compare-figures td:first-child { white-space: normal; }
.spread, .change { white-space: nowrap; }
@media (max-width: 40em) { #compare-figures { font-size: .85em; }
  #compare-figures td, #compare-figures th { padding: .3em .3em; } }
.verdict-slower { color: #b3261e; font-weight: 600; }
.verdict-faster { color: #1a7f37; font-weight: 600; }
.missing { color: #555; } .missing strong { color: #222; }
.key { display: inline-block; width: .8em; height: .8em; margin: 0 .3em 0 .8em; }
"""


def render_comparison_html(comparison: Comparison, base: RunReport, new: RunReport) -> str:
    """The whole page for `comparison` of the runs `base` and `new` (whose curves it
    draws): the step time's verdict in a sentence, the figures, the set-up that differs,
    the advice that came and went, the caveats, then the curves of both runs.

    Example:
        >>> from accelkit.report.comparison import compare, load
        >>> base, new = load("base.json")[0], load("new.json")[0]  # doctest: +SKIP
        >>> result = compare("base.json", "new.json")  # doctest: +SKIP
        >>> page = render_comparison_html(result, base, new)  # doctest: +SKIP
    """
    esc = html.escape
    title = "accelkit compare: BASE against NEW"
    sections = [
        f"<h1>{esc(title)}</h1>",
        _runs(comparison, base, new),
        _summary(comparison),
        "<h2>Figures</h2>",
        _figures(comparison),
        "<h2>What differs in the set-up</h2>",
        _changes(comparison),
        "<h2>Advice</h2>",
        _advice(comparison),
        *_caveats(comparison),
        "<h2>Curves</h2>",
        _legend(),
        *(_chart(overlay) for overlay in overlays(base, new)),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{_STYLE}{_STYLE_COMPARE}</style>\n</head>\n"
        "<body>\n" + "\n".join(s for s in sections if s) + "\n</body>\n</html>\n"
    )


def _runs(comparison: Comparison, base: RunReport, new: RunReport) -> str:
    """Each run's name (its file) and what it ran."""
    esc = html.escape
    lines = [
        f"<strong>{role}</strong> {esc(name)}: {esc(r.model)} on {esc(r.device)} "
        f"({esc(r.framework)}, precision {esc(r.precision)}, {r.steps} steps)"
        for role, name, r in (("BASE", comparison.base, base), ("NEW", comparison.new, new))
    ]
    return f'<p class="sub" id="runs">{"<br>".join(lines)}</p>'


def _summary(comparison: Comparison) -> str:
    """The step time's verdict in a sentence, where both runs measured it."""
    step = comparison.figure("step_time_s")
    if step is None or step.verdict is Verdict.NOT_COMPARED or step.change is None:
        return ""
    beyond = (
        "within the runs' noise"
        if step.verdict is Verdict.WITHIN_NOISE
        else f"{step.verdict.value}, beyond the runs' noise"
    )
    return (
        f'<p id="summary">NEW\'s step time is <strong>{change_text(step.change)}</strong> against '
        f"BASE's: {html.escape(beyond)}.</p>"
    )


def _figures(comparison: Comparison) -> str:
    """Every figure either run measured, side by side, with its verdict."""
    esc = html.escape
    rows = []
    for figure in comparison.figures:
        label, _, _, change, verdict = figure_row(figure)
        name = figure.verdict.name.lower().replace("_", "-")
        rows.append(
            f'<tr data-figure="{esc(figure.name)}"><td>{esc(label)}</td>{_values(figure)}'
            f'<td class="change">{esc(change)}</td>'
            f'<td class="verdict verdict-{name}">{esc(verdict)}</td></tr>'
        )
    if not rows:
        return "<p>Neither run measured a figure to compare.</p>"
    return (
        '<table id="compare-figures"><tr><th>figure</th><th>BASE</th><th>NEW</th>'
        f"<th>change</th><th>verdict</th></tr>{''.join(rows)}</table>"
        '<p class="sub">±: how far the run\'s windows stray from its figure. A verdict '
        "counts a difference only where the runs' windows do not overlap and it is larger "
        "than the larger spread; otherwise it is within noise.</p>"
    )


def _values(figure: FigureComparison) -> str:
    """BASE's and NEW's cells: the figure, and its spread where known (a line of its own
    on a narrow screen)."""
    cells = []
    for value, spread in ((figure.base, figure.base_spread), (figure.new, figure.new_spread)):
        more = "" if spread is None else f' <span class="spread">{spread_text(spread)}</span>'
        cells.append(f"<td>{html.escape(figure_text(figure.name, value))}{more}</td>")
    return "".join(cells)


def _changes(comparison: Comparison) -> str:
    if not comparison.changes:
        return "<p>Nothing differs (hardware, software, plan, tune, shapes, model).</p>"
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(c.group)}</td><td>{esc(c.name)}</td><td>{esc(c.base or '-')}</td>"
        f"<td>{esc(c.new or '-')}</td></tr>"
        for c in comparison.changes
    )
    return (
        '<table id="compare-changes"><tr><th>group</th><th>item</th><th>BASE</th>'
        f"<th>NEW</th></tr>{rows}</table>"
    )


def _advice(comparison: Comparison) -> str:
    parts = [
        _advice_list("advice-appeared", "Appeared in NEW", comparison.advice_appeared),
        _advice_list("advice-gone", "Went away in NEW", comparison.advice_gone),
    ]
    found = "".join(parts)
    return found or "<p>The same advice for both runs: none came or went.</p>"


def _advice_list(list_id: str, heading: str, items: tuple[AdviceChange, ...]) -> str:
    if not items:
        return ""
    esc = html.escape
    entries = "".join(f"<li><strong>{esc(a.id)}</strong>: {esc(a.title)}</li>" for a in items)
    return f'<h3>{heading}</h3><ul class="notes" id="{list_id}">{entries}</ul>'


def _caveats(comparison: Comparison) -> list[str]:
    if not comparison.caveats:
        return []
    entries = "".join(f"<li>{html.escape(c)}</li>" for c in comparison.caveats)
    return ["<h2>What cannot be compared, and why</h2>", f'<ul class="notes">{entries}</ul>']


def _legend() -> str:
    """BASE and NEW in their colours, once for every chart below."""
    keys = "".join(
        f'<span class="key" style="background:{COLORS[n]}"></span>{role}'
        for n, role in enumerate(ROLES)
    )
    return f'<p id="compare-legend">Each chart draws both runs:{keys}</p>'


def _chart(overlay: Overlay) -> str:
    """An overlay with its caption and, under it, which run lacks the series and why; or,
    where neither has it, the chart's id with both reasons."""
    esc = html.escape
    missing = "".join(
        f'<p class="missing" data-run="{role}"><strong>{role}</strong> has no '
        f"{esc(overlay.series)}: {esc(why.rstrip('.'))}.</p>"
        for role, why in overlay.missing
    )
    heading = f"<h3>{esc(overlay.series[:1].upper() + overlay.series[1:])}</h3>"
    chart = draw(overlay)
    if chart is None:
        return (
            f'{heading}<figure id="{overlay.chart_id}-figure" class="empty"><p '
            f'id="{overlay.chart_id}" class="chart empty">No chart: neither run has it.</p>'
            f"{missing}</figure>"
        )
    return (
        f'{heading}<figure id="{overlay.chart_id}-figure">{chart}'
        f"<figcaption>{esc(overlay.caption)}</figcaption>{missing}</figure>"
    )
