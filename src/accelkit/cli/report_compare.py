"""`accelkit report --compare BASE.json NEW.json`: two saved runs side by side, and a
regression guard for CI (``--fail-if-slower 5%``).

Exit codes: 0 done (and, with ``--fail-if-slower``, not slower beyond it); 1 NEW's step
time is slower than BASE's by more than the percentage given and beyond the runs' noise;
2 bad input: a file that cannot be read or is not a run report (the field named), a
percentage that is not one, a step time that one of the runs did not measure.
"""

from __future__ import annotations

import argparse
import math
import sys

from accelkit.cli.common import emit_json
from accelkit.report.comparison import Comparison, Verdict, compare, load
from accelkit.report.comparison.html import render_comparison_html
from accelkit.report.comparison.text import render_comparison
from accelkit.report.text import paragraph
from accelkit.utils.files import write_atomic

EXIT_SLOWER = 1
EXAMPLES = (
    "accelkit report --compare base.json new.json",
    "accelkit report --compare base.json new.json --fail-if-slower 5%",
    "accelkit report --compare base.json new.json --html compare.html",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--compare BASE.json NEW.json` and `--fail-if-slower PCT` on `accelkit report`."""
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("BASE.json", "NEW.json"),
        help="compare two saved reports: what differs in the set-up and what it did to "
        "each figure, beyond the runs' own noise or not (instead of RUN.json)",
    )
    parser.add_argument(
        "--fail-if-slower",
        metavar="PCT",
        help="with --compare: exit 1 when NEW's step time is slower than BASE's by more "
        "than PCT percent (5%% or 5) and beyond the runs' noise, else 0",
    )


def run(args: argparse.Namespace) -> int:
    """Compare the two reports of ``--compare``, print the result, and give the exit code
    of ``--fail-if-slower``."""
    given = [
        name
        for name, value in (
            ("RUN.json", args.path),
            ("--project", args.project),
            ("--price", args.price),
            ("--mfu", args.mfu is not None),
        )
        if value
    ]
    if given:
        raise ValueError(
            f"--compare takes BASE.json and NEW.json alone: leave out {', '.join(given)}"
        )
    share = None if args.fail_if_slower is None else percentage(args.fail_if_slower)
    base, new = args.compare
    try:
        comparison = compare(base, new)  # a bad file or field: ValueError naming both
    except OSError as error:
        raise ValueError(
            f"cannot read {error.filename or base}: {error.strerror or error}"
        ) from None
    if share is not None:
        _check_step_time(comparison)
    if args.html:
        _write_page(comparison, base, new, args.html)
    slower = share is not None and comparison.slower_by_more_than(share)
    if args.json:
        document = comparison.to_dict()
        if share is not None:
            document["fail_if_slower"] = {"share": share, "slower": slower}
        emit_json(document)
    else:
        print(render_comparison(comparison))
    if share is not None:
        print(
            paragraph(_conclusion(comparison, share, slower)),
            file=sys.stderr if args.json else sys.stdout,
        )
    return EXIT_SLOWER if slower else 0


def _write_page(comparison: Comparison, base: str, new: str, page: str) -> None:
    """The comparison's HTML page, with both runs' curves, written to `page`; where, on
    stderr (``--json``'s stdout holds the document alone)."""
    runs = [load(path)[0] for path in (base, new)]  # read already: compare() has
    try:
        write_atomic(page, render_comparison_html(comparison, *runs))
    except OSError as error:
        raise ValueError(f"cannot write {page}: {error}") from None
    print(f"accelkit: wrote the comparison's HTML page to {page}", file=sys.stderr)


def percentage(text: str) -> float:
    """``--fail-if-slower``'s percentage as a share: '5%' and '5' are 0.05.

    Example:
        >>> percentage("5%"), percentage("2.5")
        (0.05, 0.025)
        >>> percentage("five")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: --fail-if-slower 'five' is not a percentage: give it as 5% or 5 ...
    """
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(
            f"--fail-if-slower {text!r} is not a percentage: give it as 5% or 5 (or 2.5%), "
            "0 or more"
        )
    return value / 100


def _check_step_time(comparison: Comparison) -> None:
    """Raise ValueError unless both runs measured the step time the guard judges, saying
    which did not: a guard that cannot judge must not pass silently."""
    step = comparison.figure("step_time_s")
    if step is None or step.verdict is Verdict.NOT_COMPARED:
        why = step.why if step is not None else "not measured in either run"
        raise ValueError(f"--fail-if-slower judges the step time, which is {why}")


def _conclusion(comparison: Comparison, share: float, slower: bool) -> str:
    step = comparison.figure("step_time_s")
    assert step is not None  # _check_step_time has checked it
    change = f"{step.change:+.1%}" if step.change is not None else "changed"
    if slower:
        return (
            f"regression: NEW's step time is {change} against BASE, beyond the runs' noise "
            f"and over the {share:.1%} allowed (--fail-if-slower): exit {EXIT_SLOWER}"
        )
    return (
        f"no regression: NEW's step time is {change} against BASE ({step.verdict.value}; "
        f"--fail-if-slower allows {share:.1%} beyond the noise)"
    )
