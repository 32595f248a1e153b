"""`accelkit plan`: the plan for this machine, or for GPUs you name."""

from __future__ import annotations

import argparse
from typing import Any

from accelkit.cli.common import (
    JSON_HELP,
    add_command,
    add_framework,
    add_precision,
    emit_json,
    gpus_in_one_server,
)
from accelkit.configure import plan_for
from accelkit.hardware import detect
from accelkit.hardware.what_if import MAX_GPUS_PER_NODE
from accelkit.planning import Request, plan

EXAMPLES = (
    "accelkit plan",
    'accelkit plan --gpu "NVIDIA H200" --count 8',
    "accelkit plan --gpu H100 --count 8",
    'accelkit plan --gpu "H100 PCIe" --count 2',
    "accelkit plan --gpu T4 --count 2 --framework tensorflow --json",
    "accelkit plan --gpu A100-SXM4-80GB --precision fp16 --compile",
)


def add(commands: Any) -> None:
    parser = add_command(
        commands,
        "plan",
        "the plan for this machine, or for GPUs you name (--gpu)",
        EXAMPLES,
        "Each setting comes with its reason. Nothing is applied.",
    )
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        help="GPU name or alias (see 'accelkit specs'; 'H100' or 'A100' is the most "
        "deployed variant, the SXM module, and the notes name the others); default: this "
        "machine's GPUs",
    )
    parser.add_argument(
        "--count",
        type=gpus_in_one_server,
        default=1,
        help=f"GPUs in the machine, 1 to {MAX_GPUS_PER_NODE} (with --gpu; default 1)",
    )
    add_framework(parser, "the framework to plan for", auto=None)
    add_precision(parser)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="plan to compile the train step (torch.compile; XLA under TensorFlow)",
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    request = {"precision": args.precision, "compile": args.compile}
    if args.gpu is not None and not args.gpu.strip():
        raise ValueError(
            "--gpu names no GPU; give a name from `accelkit specs`, or leave "
            "--gpu out to plan for this machine"
        )
    if args.gpu:
        result = plan_for(args.gpu, args.count, framework=args.framework, **request)
    else:
        result = plan(detect(), Request(framework=args.framework, **request))
    if args.json:
        emit_json(result.to_dict())
    else:
        print(result)
    return 0
