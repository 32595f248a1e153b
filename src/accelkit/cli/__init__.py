"""The `accelkit` command: one function per subcommand over the public API.

With `--json`, stdout holds one JSON document and nothing else; messages go to stderr.
Exit codes: 0 success, 1 unknown GPU, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

from accelkit import __version__, specs
from accelkit.advisor.projection import project, ranked
from accelkit.configure import auto_configure, plan_for
from accelkit.hardware import detect, environment
from accelkit.hardware.what_if import MAX_GPUS, MAX_GPUS_PER_NODE, UnknownGPUError, check_count
from accelkit.planning import Framework, Precision, Request, plan
from accelkit.profiling import world
from accelkit.profiling.run_report import RunReport
from accelkit.report.assemble import with_advice
from accelkit.report.html import render_html
from accelkit.report.render import describe_hardware, render_projections, table
from accelkit.utils import versions

EXIT_UNKNOWN_GPU = 1
EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.command(args) or 0)
    except BrokenPipeError:  # `accelkit specs | head -1`: the reader left, nothing is wrong
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 0
    except UnknownGPUError as error:
        print(f"accelkit: {error}", file=sys.stderr)
        return EXIT_UNKNOWN_GPU
    except ValueError as error:
        print(f"accelkit: {error}", file=sys.stderr)
        return EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accelkit", description="GPU-aware training settings and measurements."
    )
    parser.add_argument("--version", action="version", version=f"accelkit {__version__}")
    commands = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")

    doctor = commands.add_parser(
        "doctor",
        help="hardware, driver, framework versions and the plan auto_configure would apply",
    )
    doctor.add_argument("--framework", choices=_values(Framework), default="auto")
    doctor.add_argument("--json", action="store_true", help="one JSON document on stdout")
    doctor.set_defaults(command=cmd_doctor)

    plan_cmd = commands.add_parser(
        "plan", help="the plan for this machine, or for GPUs you name (--gpu)"
    )
    plan_cmd.add_argument(
        "--gpu", help="GPU name or alias (see 'accelkit specs'); default: this machine"
    )
    plan_cmd.add_argument(
        "--count",
        type=_gpus_in_one_server,
        default=1,
        help=f"GPUs in the machine, 1 to {MAX_GPUS_PER_NODE}",
    )
    plan_cmd.add_argument("--framework", choices=("torch", "tensorflow"), default="torch")
    plan_cmd.add_argument("--precision", choices=_values(Precision), default="auto")
    plan_cmd.add_argument("--compile", action="store_true")
    plan_cmd.add_argument("--json", action="store_true", help="one JSON document on stdout")
    plan_cmd.set_defaults(command=cmd_plan)

    specs_cmd = commands.add_parser("specs", help="the GPU datasheet table, or one GPU's row")
    specs_cmd.add_argument("--gpu", help="GPU name or alias")
    specs_cmd.add_argument("--json", action="store_true", help="one JSON document on stdout")
    specs_cmd.set_defaults(command=cmd_specs)

    bench = commands.add_parser(
        "bench", help="a built-in model on synthetic data through the profiled fit"
    )
    bench.add_argument(
        "--model", default="mlp", help="torch: mlp, cnn, gpt, gpt2, resnet50; tensorflow: mlp, cnn"
    )
    bench.add_argument("--framework", choices=_values(Framework), default="auto")
    bench.add_argument("--steps", type=_positive_int, default=60, help="steps, warm-up included")
    bench.add_argument("--batch-size", type=_positive_int, default=None)
    bench.add_argument("--precision", choices=_values(Precision), default="auto")
    bench.add_argument("--compile", action="store_true", help="torch.compile / XLA")
    bench.add_argument(
        "--calibrate",
        action="store_true",
        help="also measure this device's matmul rate and report MFU against it",
    )
    bench.add_argument(
        "--compare-single",
        action="store_true",
        help="under torchrun: run the bench on rank 0's device alone first, "
        "then on every rank, and report the scaling efficiency "
        "(without a launcher: nothing to compare, a note says so)",
    )
    bench.add_argument(
        "--single-device",
        metavar="RUN.json|SAMPLES_PER_S",
        help="the single-device reference for the scaling efficiency: a "
        "saved report of the same bench on one device, or its samples/s",
    )
    bench.add_argument(
        "--save", metavar="PATH", help="write the report as JSON (under torchrun: rank 0 only)"
    )
    bench.add_argument("--json", action="store_true", help="one JSON document on stdout")
    bench.set_defaults(command=cmd_bench)

    report = commands.add_parser(
        "report", help="render a saved run report with its advice, and what-if projections"
    )
    report.add_argument("path", metavar="RUN.json")
    report.add_argument(
        "--project",
        action="append",
        default=[],
        metavar="NAME[:COUNT]",
        help=f"estimate step and epoch time on COUNT (default 1, at most "
        f"{MAX_GPUS:,}) GPUs called NAME at the run's MFU; repeat to "
        "rank several",
    )
    report.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="NAME=USD_PER_HOUR",
        help="price of one GPU-hour of NAME, for the cost per epoch",
    )
    report.add_argument(
        "--mfu",
        type=float,
        default=None,
        help="MFU to assume in projections (default: the run's own when it "
        "was measured on a GPU, else 0.4)",
    )
    report.add_argument("--json", action="store_true", help="one JSON document on stdout")
    report.add_argument(
        "--html",
        default=None,
        metavar="FILE",
        help="also write the report as one self-contained HTML page with charts",
    )
    report.set_defaults(command=cmd_report)
    return parser


def _values(choice: Any) -> list[str]:
    return [member.value for member in choice]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _gpu_count(text: str, maximum: int, what: str) -> int:
    """`text` as a GPU count from 1 to `maximum`; a ValueError naming the range."""
    try:
        count = int(text)
    except ValueError:
        count = None  # check_count names the valid range
    return check_count(text if count is None else count, maximum, what)


def _gpus_in_one_server(text: str) -> int:
    try:
        return _gpu_count(text, MAX_GPUS_PER_NODE, "--count")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _emit_json(document: Any) -> None:
    json.dump(document, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# -- doctor ------------------------------------------------------------------------


def _framework_versions() -> dict[str, str | None]:
    found = versions.versions("torch", "tensorflow")
    found["nvidia-ml-py"] = versions.installed("nvidia-ml-py")
    return {name: found[name] for name in ("torch", "tensorflow", "keras", "nvidia-ml-py")}


def cmd_doctor(args: argparse.Namespace) -> int:
    hardware = detect()
    result = auto_configure(
        framework=args.framework, dry_run=True, verbose=False, hardware=hardware
    )
    document = {
        "accelkit": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "frameworks": _framework_versions(),
        "hardware": hardware.to_dict(),
        "gpu_specs": [_spec_or_none(gpu) for gpu in hardware.gpus],
        "plan": result.to_dict(),
    }
    if args.json:
        _emit_json(document)
        return 0
    print(f"accelkit {__version__} on Python {document['python']} ({document['platform']})")
    print("frameworks: " + ", ".join(f"{k} {v or '-'}" for k, v in document["frameworks"].items()))
    print(
        f"driver {hardware.driver_version or '-'}, CUDA driver {hardware.cuda_driver_version or '-'}"
        f", {hardware.cpu_count or '?'} CPUs, InfiniBand {'yes' if hardware.infiniband else 'no'}"
    )
    print(f"GPUs: {describe_hardware(hardware)}")
    for gpu, row in zip(hardware.gpus, document["gpu_specs"]):
        match = row["name"] if row else "no datasheet row (MFU will need calibrate=True)"
        memory = f"{gpu.memory_bytes / 2**30:.1f} GiB" if gpu.memory_bytes else "? GiB"
        power = f"{gpu.power_limit_w:.0f} W" if gpu.power_limit_w else "? W"
        print(
            f"  [{gpu.index}] {gpu.name}: {memory}, {power}, MIG "
            f"{'on' if gpu.mig_enabled else 'off'} -> {match}"
        )
    for note in hardware.notes:
        print(f"note: {note}")
    print()
    print(result)
    return 0


def _spec_or_none(gpu: Any) -> dict[str, Any] | None:
    spec = specs.for_gpu(gpu)
    return None if spec is None else spec.to_dict()


# -- plan --------------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
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
        _emit_json(result.to_dict())
    else:
        print(result)
    return 0


# -- specs -------------------------------------------------------------------------


def cmd_specs(args: argparse.Namespace) -> int:
    if args.gpu:
        spec = specs.lookup(args.gpu)
        if spec is None:
            raise UnknownGPUError(specs.unknown_message(args.gpu))
        rows = [spec]
    else:
        rows = list(specs.all_specs())
    if args.json:
        _emit_json(rows[0].to_dict() if args.gpu else {"gpus": [r.to_dict() for r in rows]})
        return 0
    headers = ("gpu", "cc", "memory", "GB/s", "fp32", "tf32", "bf16", "fp16", "fp8", "source")
    body = [
        (
            r.name,
            f"{r.compute_capability[0]}.{r.compute_capability[1]}",
            "-" if r.memory_gb is None else f"{r.memory_gb:g} GB",
            _peak(r.bandwidth_gbps),
            *(_peak(r.peak(d)) for d in ("fp32", "tf32", "bf16", "fp16", "fp8")),
            r.source,
        )
        for r in rows
    ]
    print("dense peak TFLOP/s (no sparsity; fp16/bf16 with fp32 accumulate)")
    print(table(headers, body, wrap_last=60 if args.gpu else None))
    return 0


# -- bench / report ---------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from accelkit import bench

    if args.save:
        _check_writable(args.save)  # before the run, not after it
    # read (and check) a reference report before the run too; its errors name the field
    single = world.single_device_rate(_rate_or_path(args.single_device))
    result = bench.run(
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
        if args.json:
            _emit_json(result.to_dict())
        else:
            print(result)
    if args.save:
        try:
            result.save(args.save)
        except OSError as error:  # the result is printed: the run is not lost
            print(f"accelkit: could not save the report to {args.save}: {error}", file=sys.stderr)
            return 1
    return 0


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


def cmd_report(args: argparse.Namespace) -> int:
    try:
        result = RunReport.load(args.path)  # a bad file or field: ValueError, naming both
    except OSError as error:
        raise ValueError(f"cannot read {args.path}: {error}") from None
    with_advice(result)  # the current rules, on the saved figures and facts
    projections = _projections(result, args.project, args.price, args.mfu)
    if args.html:
        try:
            with open(args.html, "w", encoding="utf-8") as out:
                out.write(render_html(result))
        except OSError as error:
            raise ValueError(f"cannot write {args.html}: {error}") from None
    if args.json:
        document = result.to_dict()
        if projections:
            document["projections"] = [
                {**p.to_dict(), "rank_by_time": t, "rank_by_cost": c}
                for p, t, c in ranked(projections)
            ]
        _emit_json(document)
        return 0
    print(result)
    if projections:
        print()
        print(render_projections(projections))
    return 0


def _projections(
    report: RunReport, targets: Sequence[str], prices: Sequence[str], mfu: float | None
) -> list[Any]:
    """`--project NAME[:COUNT]` and `--price NAME=USD` as projections (prices by datasheet row)."""
    if not targets:
        if prices or mfu is not None:
            raise ValueError("--price and --mfu go with --project NAME")
        return []
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
    found = []
    for target in targets:
        name, _, count = target.rpartition(":") if ":" in target else (target, "", "1")
        spec = specs.lookup(name)
        if spec is None:
            raise UnknownGPUError(specs.unknown_message(name))
        number = _gpu_count(count, MAX_GPUS, f"--project {target!r}: COUNT")
        found.append(project(report, spec.key, number, by_key.get(spec.key), mfu=mfu))
    unused = set(by_key) - {p.key for p in found}
    if unused:
        raise ValueError(f"--price for {', '.join(sorted(unused))}, which no --project names")
    return found


def _peak(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
