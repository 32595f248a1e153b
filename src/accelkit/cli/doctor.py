"""`accelkit doctor`: hardware, driver, framework versions and the plan auto_configure
would apply."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from accelkit import __version__, specs
from accelkit.cli.common import JSON_HELP, add_command, add_framework, emit_json
from accelkit.configure import auto_configure
from accelkit.hardware import detect
from accelkit.hardware.framework_builds import FRAMEWORKS, unusable_reason
from accelkit.report.render import describe_hardware, render_plan
from accelkit.report.text import paragraph, terminal_width
from accelkit.utils import versions

EXAMPLES = (
    "accelkit doctor",
    "accelkit doctor --framework tensorflow",
    "accelkit doctor --json > doctor.json",
)


def add(commands: Any) -> None:
    parser = add_command(
        commands,
        "doctor",
        "hardware, driver, framework versions and the plan auto_configure would apply",
        EXAMPLES,
        "Nothing is applied: the plan is a dry run.",
    )
    add_framework(
        parser, "the framework to plan for", "the one the script imports, as auto_configure decides"
    )
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    hardware = detect()
    result = auto_configure(
        framework=args.framework, dry_run=True, verbose=False, hardware=hardware
    )
    # A framework that cannot use the GPUs here, said before anything else it could hide in
    warnings = list(filter(None, (unusable_reason(hardware, f) for f in FRAMEWORKS)))
    document: dict[str, Any] = {
        "warnings": warnings,
        "accelkit": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "frameworks": _framework_versions(),
        "hardware": hardware.to_dict(),
        "gpu_specs": [_spec_or_none(gpu) for gpu in hardware.gpus],
        "plan": result.to_dict(),
    }
    if args.json:
        emit_json(document)
        return 0
    width = terminal_width()
    lines = [
        f"accelkit {__version__} on Python {document['python']} ({document['platform']})",
        "frameworks: " + ", ".join(f"{k} {v or '-'}" for k, v in document["frameworks"].items()),
        (
            f"driver {hardware.driver_version or '-'}, "
            f"CUDA driver {hardware.cuda_driver_version or '-'}, {hardware.cpu_count or '?'} "
            f"CPUs, InfiniBand {'yes' if hardware.infiniband else 'no'}"
        ),
        f"GPUs: {describe_hardware(hardware)}",
    ]
    for gpu, row in zip(hardware.gpus, document["gpu_specs"], strict=True):
        match = row["name"] if row else "no datasheet row (MFU will need calibrate=True)"
        memory = f"{gpu.memory_bytes / 2**30:.1f} GiB" if gpu.memory_bytes else "? GiB"
        power = f"{gpu.power_limit_w:.0f} W" if gpu.power_limit_w else "? W"
        lines.append(
            f"  [{gpu.index}] {gpu.name}: {memory}, {power}, MIG "
            f"{'on' if gpu.mig_enabled else 'off'} -> {match}"
        )
    lines += [f"note: {note}" for note in dict.fromkeys(hardware.notes)]
    lines += [f"WARNING: {warning}" for warning in warnings]
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()))
        print(paragraph(line, width, rest=indent + "  "))
    print()
    # The plan repeats the hardware's notes and the warnings; they are printed above already.
    print(render_plan(result, width, shown=(*hardware.notes, *warnings)))
    return 0


def _framework_versions() -> dict[str, str | None]:
    found = versions.versions("torch", "tensorflow")
    found["nvidia-ml-py"] = versions.installed("nvidia-ml-py")
    return {name: found[name] for name in ("torch", "tensorflow", "keras", "nvidia-ml-py")}


def _spec_or_none(gpu: Any) -> dict[str, Any] | None:
    spec = specs.for_gpu(gpu)
    return None if spec is None else spec.to_dict()
