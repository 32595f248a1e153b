"""`accelkit specs`: the GPU datasheet table, one row per GPU within 80 columns, or
every row with its source (`--long`, and one GPU's row: `--gpu`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from accelkit import specs
from accelkit.cli.common import JSON_HELP, add_command, emit_json
from accelkit.hardware.what_if import UnknownGPUError
from accelkit.report.text import paragraph, table, terminal_width

EXAMPLES = (
    "accelkit specs",
    "accelkit specs --long",
    'accelkit specs --gpu "NVIDIA H100 SXM"',
    "accelkit specs --gpu l40s --json",
)
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
ROW_WIDTH = 80  # the short table's lines, whatever the terminal
_VENDOR = "NVIDIA "  # every row's name starts with it: said once, in the title
_TITLE = "dense peak TFLOP/s (no sparsity; fp16/bf16 with fp32 accumulate)"


def add(commands: Any) -> None:
    parser = add_command(
        commands,
        "specs",
        "the GPU datasheet table, or one GPU's row",
        EXAMPLES,
        "Dense peak TFLOP/s (no sparsity), memory and bandwidth: one row per GPU within "
        "80 columns; --long (and --gpu) adds the source of each row. A short name several "
        "rows share (H100, A100) shows its most deployed variant, naming the others. An "
        "unknown GPU exits 1 with the nearest names.",
    )
    parser.add_argument(
        "--gpu", metavar="NAME", help="GPU name or alias, e.g. 'H100 SXM', 'a10g', 'RTX 4090'"
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="each GPU as a block with its datasheet source (the default with --gpu)",
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    variant = ""
    if args.gpu:
        spec, variant = specs.resolve(args.gpu)  # "H100": the most deployed variant, noted
        if spec is None:
            raise UnknownGPUError(specs.unknown_message(args.gpu))
        rows = [spec]
    else:
        rows = list(specs.all_specs())
    if variant:  # on stderr: --json's stdout holds the row alone
        print(f"accelkit: {variant}", file=sys.stderr)
    if args.json:
        emit_json(rows[0].to_dict() if args.gpu else {"gpus": [r.to_dict() for r in rows]})
        return 0
    if args.long or args.gpu:
        print(_long(rows))
    else:
        print(short(rows))
    return 0


def short(rows: Sequence[specs.GpuSpec]) -> str:
    """One line per GPU, none over `ROW_WIDTH` columns: the name (without "NVIDIA"),
    compute capability, memory (GB), bandwidth (GB/s) and the dense peaks, numbers right
    aligned; "-" where the chip has no such path or the figure is not known.

    Example:
        >>> print(short([specs.lookup("H200")]))  # doctest: +NORMALIZE_WHITESPACE
        NVIDIA GPUs, dense peak TFLOP/s (no sparsity; fp16/bf16 with fp32 accumulate)
        gpu             cc  GB GB/s fp32  tf32  bf16  fp16    fp8
        H200 SXM 141GB 9.0 141 4800 66.9 494.7 989.4 989.4 1978.9
    """
    headers = ("gpu", "cc", "GB", "GB/s", *DTYPES)
    body = [
        (
            r.name.removeprefix(_VENDOR),
            f"{r.compute_capability[0]}.{r.compute_capability[1]}",
            _peak(r.memory_gb),
            _peak(r.bandwidth_gbps),
            *(_peak(r.peak(d)) for d in DTYPES),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in (headers, *body)) for i in range(len(headers))]
    # a name too long for the row is cut, never a number
    widths[0] = min(widths[0], ROW_WIDTH - sum(widths[1:]) - len(widths[1:]))
    lines = [f"{_VENDOR.strip()} GPUs, {_TITLE}"]
    for full, *numbers in (headers, *body):
        name = full if len(full) <= widths[0] else full[: widths[0] - 1] + "~"
        cells = [name.ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(numbers, widths[1:], strict=True)]
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines)


def _long(rows: Sequence[specs.GpuSpec]) -> str:
    """Every row with its source, laid out for the terminal's width."""
    headers = ("gpu", "cc", "memory", "GB/s", *DTYPES, "source")
    body = [
        (
            r.name,
            f"{r.compute_capability[0]}.{r.compute_capability[1]}",
            "-" if r.memory_gb is None else f"{r.memory_gb:g} GB",
            _peak(r.bandwidth_gbps),
            *(_peak(r.peak(d)) for d in DTYPES),
            r.source,
        )
        for r in rows
    ]
    width = terminal_width()
    return paragraph(_TITLE, width) + "\n" + table(headers, body, width=width)


def _peak(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
