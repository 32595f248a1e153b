"""`accelkit report`: a saved run report with its advice, as text, JSON or an HTML page,
and what-if projections onto other GPUs."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from accelkit import specs
from accelkit.advisor.projection import project, to_json
from accelkit.cli import report_compare
from accelkit.cli.common import JSON_HELP, add_command, emit_json, gpu_target
from accelkit.hardware.what_if import MAX_GPUS, UnknownGPUError
from accelkit.profiling.run_report import RunReport
from accelkit.report.assemble import with_advice
from accelkit.report.html import render_html
from accelkit.report.render import render_projections
from accelkit.utils.files import write_atomic

EXAMPLES = (
    "accelkit report run.json",
    "accelkit report run.json --html run.html",
    'accelkit report run.json --project "H100 SXM" --project A100-SXM4-80GB:8',
    "accelkit report run.json --project H200:8 --price H200=3.50 --project L4 --price L4=0.80",
    "accelkit report run.json --json",
    *report_compare.EXAMPLES,
)


def add(commands: Any) -> None:
    parser = add_command(
        commands,
        "report",
        "render a saved run report with its advice, and what-if projections",
        EXAMPLES,
        "The advice is given again by the current rules, on the saved figures.",
    )
    parser.add_argument(
        "path",
        nargs="?",
        metavar="RUN.json",
        help="a report saved by `accelkit bench --save` or report.save()",
    )
    report_compare.add_arguments(parser)
    parser.add_argument(
        "--project",
        action="append",
        default=[],
        metavar="NAME[:COUNT]",
        help=f"estimate step and epoch time on COUNT (default 1, at most "
        f"{MAX_GPUS:,}) GPUs called NAME at the run's MFU, with the host time and the "
        "gradient all-reduce, or say why not (not projected); repeat to rank several",
    )
    parser.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="NAME=USD_PER_HOUR",
        help="price of one GPU-hour of NAME, for the cost per epoch",
    )
    parser.add_argument(
        "--mfu",
        type=float,
        default=None,
        help="MFU to assume in projections (default: the run's own when it "
        "was measured on a GPU, else 0.4)",
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.add_argument(
        "--html",
        default=None,
        metavar="FILE",
        help="also write the report as one self-contained HTML page with charts (with "
        "--compare: both runs on one page, the differences first, their curves overlaid)",
    )
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    if args.html:
        for source in args.compare or [args.path]:
            _refuse_replacing(source, args.html)
    if args.compare:
        return report_compare.run(args)
    if not args.path:
        raise ValueError("accelkit report needs RUN.json, or --compare BASE.json NEW.json")
    if args.fail_if_slower is not None:
        raise ValueError("--fail-if-slower goes with --compare BASE.json NEW.json")
    try:
        result = RunReport.load(args.path)  # a bad file or field: ValueError, naming both
    except OSError as error:
        raise ValueError(f"cannot read {args.path}: {error}") from None
    with_advice(result)  # the current rules, on the saved figures and facts
    projections = _projections(result, args.project, args.price, args.mfu)
    if args.html:
        try:
            write_atomic(args.html, render_html(result))
        except OSError as error:
            raise ValueError(f"cannot write {args.html}: {error}") from None
        # on stderr: --json's stdout holds the document alone
        print(f"accelkit: wrote the HTML page to {args.html}", file=sys.stderr)
    if args.json:
        document = result.to_dict()
        if projections:
            document["projections"] = to_json(projections)
        emit_json(document)
        return 0
    print(result)
    if projections:
        print()
        print(render_projections(projections))
    return 0


def _refuse_replacing(report: str | None, page: str) -> None:
    """Raise ValueError where ``--html`` names the report `report` (RUN.json, or BASE.json
    or NEW.json of --compare): the page would replace it."""
    if report and _same_file(report, page):
        root, suffix = os.path.splitext(report)
        other = root + ("-page.html" if suffix == ".html" else ".html")
        raise ValueError(
            f"--html {page} is the run report {report}: the page would replace "
            f"it; give the page a path of its own, e.g. --html {other}"
        )


def _same_file(report: str, page: str) -> bool:
    """Whether `page` names the file `report` does, however spelled (a symlink, a
    relative path, a hard link)."""
    try:
        return os.path.samefile(report, page)
    except OSError:  # one of them does not exist (yet): compare where they would be
        return os.path.realpath(report) == os.path.realpath(page)


def _projections(
    report: RunReport, targets: Sequence[str], prices: Sequence[str], mfu: float | None
) -> list[Any]:
    """`--project NAME[:COUNT]` and `--price NAME=USD` as projections (prices by datasheet row)."""
    if not targets:
        if prices or mfu is not None:
            raise ValueError("--price and --mfu go with --project NAME")
        return []
    by_key = _prices(prices)
    found = []
    for target in targets:
        name, number = gpu_target(target)
        spec = specs.lookup(name)
        if spec is None:
            raise UnknownGPUError(specs.unknown_message(name))
        found.append(project(report, spec.key, number, by_key.get(spec.key), mfu=mfu))
    unused = set(by_key) - {p.key for p in found}
    if unused:
        raise ValueError(f"--price for {', '.join(sorted(unused))}, which no --project names")
    return found


def _prices(prices: Sequence[str]) -> dict[str, float]:
    """`--price NAME=USD_PER_HOUR` items by datasheet key."""
    by_key: dict[str, float] = {}
    for item in prices:
        name, _, value = item.rpartition("=")
        if not name:
            raise ValueError(f"--price {item!r}: use NAME=USD_PER_HOUR")
        spec = specs.lookup(name)
        if spec is None:
            raise UnknownGPUError(f"--price {item!r}: {specs.unknown_message(name)}")
        try:
            by_key[spec.key] = float(value)
            if not math.isfinite(by_key[spec.key]) or by_key[spec.key] < 0:
                raise ValueError(value)
        except ValueError:
            raise ValueError(
                f"--price {item!r}: {value!r} is not a price in USD per hour"
            ) from None
    return by_key
