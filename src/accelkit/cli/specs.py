"""`accelkit specs`: the GPU datasheet table, or one GPU's row."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from accelkit import specs
from accelkit.cli.common import JSON_HELP, add_command, emit_json
from accelkit.hardware.what_if import UnknownGPUError
from accelkit.report.text import paragraph, table, terminal_width

EXAMPLES = (
    "accelkit specs",
    'accelkit specs --gpu "NVIDIA H100 SXM"',
    "accelkit specs --gpu l40s --json",
)
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


def add(commands: Any) -> None:
    parser = add_command(
        commands,
        "specs",
        "the GPU datasheet table, or one GPU's row",
        EXAMPLES,
        "Dense peak TFLOP/s (no sparsity), memory and bandwidth, with the source of each "
        "row. A short name several rows share (H100, A100) shows its most deployed "
        "variant, naming the others. An unknown GPU exits 1 with the nearest names.",
    )
    parser.add_argument(
        "--gpu", metavar="NAME", help="GPU name or alias, e.g. 'H100 SXM', 'a10g', 'RTX 4090'"
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
    print(paragraph("dense peak TFLOP/s (no sparsity; fp16/bf16 with fp32 accumulate)", width))
    print(table(headers, body, width=width))
    return 0


def _peak(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
