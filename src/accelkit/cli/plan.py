"""`accelkit plan`: the plan for this machine, or for GPUs you name."""

from __future__ import annotations

import argparse
import decimal
import re
from typing import Any

from accelkit.cli.common import (
    JSON_HELP,
    add_command,
    add_framework,
    add_precision,
    emit_json,
    planned_gpus,
    values,
)
from accelkit.configure import plan_for
from accelkit.hardware import detect
from accelkit.hardware.what_if import MAX_GPUS
from accelkit.planning import Request, plan
from accelkit.planning.types import FrozenDtype, Optimizer

EXAMPLES = (
    "accelkit plan",
    'accelkit plan --gpu "NVIDIA H200" --count 8',
    "accelkit plan --gpu H100 --count 8",
    'accelkit plan --gpu "H100 PCIe" --count 2',
    "accelkit plan --gpu T4 --count 2 --framework tensorflow --json",
    "accelkit plan --gpu A100-SXM4-80GB --precision fp16 --compile",
    "accelkit plan --gpu H100 --count 8 --params 8e9",
    "accelkit plan --gpu A100-SXM4-40GB --count 8 --params 8B --activation-bytes 30GB --json",
    "accelkit plan --gpu H200 --params 70B --trainable-params 0.2B --optimizer adamw",
    "accelkit plan --gpu A100-SXM4-40GB --params 8B --trainable-params 20M --frozen-dtype bf16",
)

# A count's suffix: 8B = 8e9 parameters (the way model names give sizes), 25GB = 25e9 bytes.
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_BYTES = {
    "": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}


# Exact decimal arithmetic, so 0.3B is 300,000,000, not 300,000,000.00000006. A number
# this context cannot hold exactly (1e999999999 overflows, 1e-999999999 underflows to 0)
# raises instead of being rounded.
_EXACT = decimal.Context(
    prec=60, traps=[decimal.Inexact, decimal.Overflow, decimal.InvalidOperation]
)


def _exactly(number: str, scale: int) -> decimal.Decimal | None:
    """`number` (decimal digits, maybe an exponent) times `scale`; None when the
    result cannot be held exactly, far out of range either way."""
    try:
        return _EXACT.multiply(_EXACT.create_decimal(number), scale)
    except decimal.DecimalException:
        return None


def _count(text: str, suffixes: dict[str, int], *, zero: bool, what: str, example: str) -> int:
    """`text` as a whole number: digits, 8e9, 8_000_000_000, or a number and a suffix."""
    match = re.fullmatch(
        r"\s*([0-9][0-9_]*(?:\.[0-9_]*)?(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*", text.lower()
    )
    number = None
    if match and match.group(2) in suffixes:
        scaled = _exactly(match.group(1).replace("_", ""), suffixes[match.group(2)])
        # 1e20 and more is out of any range (Request's bounds)
        if scaled is not None and scaled < 10**20 and scaled == scaled.to_integral_value():
            number = int(scaled) if scaled > 0 or zero else None
    if number is None:
        names = ", ".join(k for k in suffixes if k)
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid; give {what} as a whole number {'>= 0' if zero else '> 0'} "
            f"({example}; suffixes {names})"
        )
    return number


def parameters(text: str) -> int:
    """`--params` / `--trainable-params`: 8e9, 8000000000, 8_000_000_000 or 8B."""
    return _count(
        text, _SCALE, zero=False, what="a parameter count", example="8e9, 8000000000 or 8B"
    )


def byte_count(text: str) -> int:
    """`--activation-bytes`: 30e9, 30000000000 or 30GB."""
    return _count(text, _BYTES, zero=True, what="bytes", example="30e9 or 30GB")


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
        type=planned_gpus,
        default=1,
        help=f"GPUs, 1 to {MAX_GPUS:,} (with --gpu; default 1); more than a server of the "
        "model holds (an HGX board's 8, a GB200 NVL72 tray's 4) span several",
    )
    add_framework(parser, "the framework to plan for", auto=None)
    add_precision(parser)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="plan to compile the train step (torch.compile; XLA under TensorFlow)",
    )
    _add_model_size(parser)
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(command=run)


def _add_model_size(parser: argparse.ArgumentParser) -> None:
    """The model's size, for the memory estimate: ``--params`` and what qualifies it."""
    parser.add_argument(
        "--params",
        type=parameters,
        metavar="N",
        help="the model's parameter count (8e9, 8000000000 or 8B): the plan adds the memory "
        "per GPU and chooses DDP, FSDP2, activation checkpointing or CPU offload from it",
    )
    parser.add_argument(
        "--trainable-params",
        type=parameters,
        metavar="N",
        help="parameters the optimizer updates (default: all; a LoRA's adapters, say 0.2B); "
        "frozen ones hold their weights only",
    )
    parser.add_argument(
        "--frozen-dtype",
        choices=values(FrozenDtype),
        help="how the frozen parameters are held (default: fp32, 4 bytes and a 16-bit "
        "autocast copy): bf16/fp16 as from_pretrained(torch_dtype=...) loads a LoRA's base, "
        "int8 or int4 quantised by bitsandbytes (QLoRA)",
    )
    parser.add_argument(
        "--optimizer",
        choices=values(Optimizer),
        default=Optimizer.ADAMW.value,
        help="whose state the memory counts (default: adamw, 8 bytes per trainable parameter)",
    )
    parser.add_argument(
        "--activation-bytes",
        type=byte_count,
        metavar="BYTES",
        help="activations one GPU holds at your micro-batch, measured (30e9 or 30GB); "
        "without it they are unknown and the plan prefers a layout that leaves them 20%% "
        "of usable memory",
    )


def run(args: argparse.Namespace) -> int:
    request = {"precision": args.precision, "compile": args.compile, **_model_size(args)}
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


def _model_size(args: argparse.Namespace) -> dict[str, Any]:
    """The model's size, for the memory estimate (none without ``--params``)."""
    given = {
        "params": args.params,
        "trainable_params": args.trainable_params,
        "optimizer": args.optimizer,
        "activation_bytes": args.activation_bytes,
        **({} if args.frozen_dtype is None else {"frozen_dtype": args.frozen_dtype}),
    }
    if args.params is None:
        for flag, name in (
            ("--trainable-params", "trainable_params"),
            ("--activation-bytes", "activation_bytes"),
            ("--frozen-dtype", "frozen_dtype"),
        ):
            if given.get(name) is not None:
                raise ValueError(f"{flag} needs --params (the model's parameter count) as well")
        return {"optimizer": args.optimizer}
    return given
