"""`accelkit bench`: a built-in model on synthetic data through the profiled fit."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from accelkit import bench as built_in
from accelkit import specs
from accelkit.advisor.projection import project, to_json
from accelkit.cli.common import (
    JSON_HELP,
    add_command,
    add_framework,
    add_precision,
    emit_json,
    gpu_target,
    positive_int,
)
from accelkit.hardware import environment
from accelkit.hardware.what_if import UnknownGPUError
from accelkit.profiling import world
from accelkit.profiling.run_report import RunReport
from accelkit.report.render import render_projections
from accelkit.utils.imports import install_command, is_available

EXAMPLES = (
    "accelkit bench",
    "accelkit bench --model gpt --steps 100 --calibrate",
    "accelkit bench --model cnn --framework tensorflow --precision fp32 --json",
    "accelkit bench --model gpt2 --save run.json && accelkit report run.json",
    "accelkit bench --model gpt --steps 20 --project H200 --project H100-SXM:8",
    "torchrun --nproc-per-node 2 -m accelkit bench --model gpt2 --compare-single",
)
# Every built-in model, in the order the frameworks list them (one definition: bench).
MODELS = tuple(dict.fromkeys(built_in.TORCH_MODELS + built_in.KERAS_MODELS))


def add(commands: Any) -> None:
    parser = add_command(
        commands,
        "bench",
        "a built-in model on synthetic data through the profiled fit",
        EXAMPLES,
        f"Models: PyTorch {', '.join(built_in.TORCH_MODELS)}; "
        f"Keras {', '.join(built_in.KERAS_MODELS)}.",
    )
    parser.add_argument(
        "--model",
        choices=MODELS,
        default="mlp",
        help="the built-in model to train (default: mlp)",
    )
    add_framework(parser, "the framework to train with", "PyTorch when installed")
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=60,
        metavar="N",
        help="training steps, warm-up included (default 60)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="samples per step and device (default: the model's own)",
    )
    add_precision(parser)
    parser.add_argument(
        "--compile", action="store_true", help="compile the train step (torch.compile / XLA)"
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="also measure this device's matmul rate and report MFU against it",
    )
    _add_after_the_run(parser)
    parser.set_defaults(command=run)


def _add_after_the_run(parser: argparse.ArgumentParser) -> None:
    """The options about the reference, the projections and where the report goes."""
    parser.add_argument(
        "--compare-single",
        action="store_true",
        help="under torchrun: run the bench on rank 0's device alone first, "
        "then on every rank, and report the scaling efficiency "
        "(without a launcher: nothing to compare, a note says so)",
    )
    parser.add_argument(
        "--single-device",
        metavar="RUN.json|SAMPLES_PER_S",
        help="the single-device reference for the scaling efficiency: a "
        "saved report of the same bench on one device, or its samples/s",
    )
    parser.add_argument(
        "--project",
        action="append",
        default=[],
        metavar="NAME[:COUNT]",
        help="after the run, estimate its step and epoch time on COUNT (default 1) GPUs "
        "called NAME, with the estimate's assumptions (as `accelkit report --project`); "
        "repeat to rank several",
    )
    parser.add_argument(
        "--save", metavar="PATH", help="write the report as JSON (under torchrun: rank 0 only)"
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP)


def run(args: argparse.Namespace) -> int:
    if args.save:
        _check_writable(args.save)  # before the run, not after it
    # read (and check) a reference report before the run too; its errors name the field
    single = world.single_device_rate(_rate_or_path(args.single_device))
    _check_installed(args.framework)  # an install hint, not a traceback
    targets = [_target(text) for text in args.project]  # a wrong name before the run
    result = built_in.run(
        args.model,
        args.framework,
        steps=args.steps,
        batch_size=args.batch_size,
        precision=args.precision,
        compile=args.compile,
        calibrate=args.calibrate,
        progress=not args.json,
        compare_single=args.compare_single,
        single_device=single,
    )
    if environment.is_rank_zero():  # every rank holds the whole run's report; one prints it
        _show(result, targets, json=args.json)
    if args.save:
        try:
            result.save(args.save)
        except OSError as error:  # the result is printed: the run is not lost
            print(f"accelkit: could not save the report to {args.save}: {error}", file=sys.stderr)
            return 1
    return 0


def _target(text: str) -> tuple[str, int]:
    """A `--project` argument as (name, count); UnknownGPUError (exit 1), before the run, for a
    name without a datasheet row."""
    name, count = gpu_target(text)
    spec, _ = specs.resolve(name)
    if spec is None:
        raise UnknownGPUError(specs.unknown_message(name))
    return name, count


def _show(result: RunReport, targets: Sequence[tuple[str, int]], *, json: bool) -> None:
    """The run's report, then its projections onto `targets` (in the JSON document under
    ``projections``, as `accelkit report --project --json` writes them)."""
    projections = [project(result, name, count) for name, count in targets]
    if json:
        document = result.to_dict()
        if projections:
            document["projections"] = to_json(projections)
        emit_json(document)
        return
    print(result)
    if projections:
        print()
        print(render_projections(projections))


# The modules each framework's bench imports (the Keras bench: keras on TensorFlow).
_MODULES = {"torch": ("torch",), "tensorflow": ("tensorflow", "keras")}


def _check_installed(framework: str) -> None:
    """A ValueError (exit 2) with the install command when no framework the bench could
    train with is installed: `framework`, or for ``auto`` either one."""
    wanted = tuple(_MODULES) if framework == "auto" else (framework,)
    if any(all(map(is_available, _MODULES[name])) for name in wanted):
        return
    needs = (
        "torch or tensorflow, and neither is" if len(wanted) > 1 else f"{framework}, which is not"
    )
    commands = " or ".join(install_command(name) for name in wanted)
    raise ValueError(f"bench needs {needs} installed: {commands}")


def _check_writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--save {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--save {path}: the folder {folder} is not writable")


def _rate_or_path(text: str | None) -> float | str | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text
