"""A comparison of two runs as text that fits the terminal (`accelkit.report.text`):
the figures first, then what differs in the set-up, the advice, and the caveats."""

from __future__ import annotations

from collections.abc import Callable

from accelkit.report.comparison.figures import BY_NAME
from accelkit.report.comparison.types import AdviceChange, Comparison, FigureComparison, Verdict
from accelkit.report.text import paragraph, printable, table, terminal_width
from accelkit.utils import units

_UNITS: dict[str, Callable[[float], str]] = {
    "seconds": units.duration,
    "rate": units.per_second,
    "tflops": units.flop_rate,
    "share": lambda v: f"{v:.1%}",
    "bytes": units.gigabytes,
    "percent": lambda v: f"{v:.0f}%",
    "watts": lambda v: f"{v:,.0f} W",
    "mhz": lambda v: f"{v:,.0f} MHz",
}


def render_comparison(comparison: Comparison, width: int | None = None) -> str:
    """The comparison as text: a head naming both runs, the figures side by side, what
    differs, the advice that appeared or went away, and what cannot be compared.

    Args:
        comparison: `accelkit.compare`'s result.
        width: columns to fit (default: the terminal's, else 100).
    """
    width = terminal_width(width)
    parts = [
        paragraph(f"accelkit compare: BASE {printable(comparison.base)}", width),
        paragraph(f"                  NEW  {printable(comparison.new)}", width),
        "",
        paragraph(
            "Figures (±: how far the run's windows stray from its figure; verdicts "
            "count beyond that)",
            width,
        ),
        table(
            ("figure", "BASE", "NEW", "change", "verdict"),
            [figure_row(f) for f in comparison.figures] or [("-", "-", "-", "-", "-")],
            width=width,
        ),
    ]
    parts += ["", _changes(comparison, width)]
    advice = _advice("appeared in NEW", comparison.advice_appeared, width) + _advice(
        "went away in NEW", comparison.advice_gone, width
    )
    if advice:
        parts += ["", *advice]
    if comparison.caveats:
        parts += ["", "What cannot be compared, and why:"]
        parts += [paragraph(printable(c), width, "  - ", "    ") for c in comparison.caveats]
    return "\n".join(parts)


def figure_text(name: str, value: float | None) -> str:
    """A figure of `BY_NAME` in its unit; '-' where it was not measured.

    Example:
        >>> figure_text("step_time_s", 0.0123), figure_text("mfu", 0.4)
        ('12.30 ms', '40.0%')
    """
    return "-" if value is None else _UNITS[BY_NAME[name].unit](value)


def figure_row(figure: FigureComparison) -> tuple[str, str, str, str, str]:
    """A figure's row as the table and the HTML page show it: its label, each run's value
    with its spread (``12.30 ms ±1.2%``), the change, and the verdict (the reason, where
    it is not compared)."""
    base = _with_spread(figure_text(figure.name, figure.base), figure.base_spread)
    new = _with_spread(figure_text(figure.name, figure.new), figure.new_spread)
    change = "-" if figure.change is None else change_text(figure.change)
    verdict = figure.verdict.value
    if figure.verdict is Verdict.NOT_COMPARED:
        verdict = printable(figure.why)
    return figure.label, base, new, change, verdict


def change_text(change: float) -> str:
    """A relative change as a signed percentage; past 10,000% with an exponent, so that a
    report's absurd figure (2e-277 samples/s) keeps the line a line.

    Example:
        >>> change_text(0.123), change_text(-0.05), change_text(4.1e280)
        ('+12.3%', '-5.0%', '+4.10e+282%')
    """
    if abs(change) < 100:
        return f"{change:+.1%}"
    return f"{change * 100:+.2e}%"


def _with_spread(text: str, spread: float | None) -> str:
    return text if spread is None else f"{text} {spread_text(spread)}"


def spread_text(spread: float) -> str:
    """A run's spread as the table writes it beside its figure.

    Example:
        >>> spread_text(0.0123)
        '±1.2%'
    """
    return f"±{spread:.1%}"


def _changes(comparison: Comparison, width: int) -> str:
    if not comparison.changes:
        return "Set-up: nothing differs (hardware, software, plan, tune, shapes, model)"
    rows = [
        (c.group, printable(c.name), printable(c.base or "-"), printable(c.new or "-"))
        for c in comparison.changes
    ]
    return "What differs in the set-up:\n" + table(
        ("group", "item", "BASE", "NEW"), rows, width=width
    )


def _advice(what: str, items: tuple[AdviceChange, ...], width: int) -> list[str]:
    if not items:
        return []
    return [f"Advice that {what}:"] + [
        paragraph(printable(f"{a.id}: {a.title}"), width, "  - ", "    ") for a in items
    ]
