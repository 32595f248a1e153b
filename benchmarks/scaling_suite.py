"""Every data-parallel scaling configuration of issue 15, each in its own torchrun, in a
time budget: GPT-2 small at 16 and 32 per GPU, ResNet-50 at 64 and 256 per GPU, eager
and compiled, the DDP levers off (plain DDP) and on (accelkit's defaults and tune).

    PYTHONPATH=src python benchmarks/scaling_suite.py --gpus 4 --out $OUT/h200x4 --budget 480
    PYTHONPATH=src python benchmarks/scaling_suite.py --gpus 4 --only compiled \\
        --out $OUT/h200x4 --budget 540
    PYTHONPATH=src python benchmarks/scaling_suite.py --smoke --gpus 2 --out /tmp/suite  # CPU

The order puts what the issue's targets need first (eager before compiled, ResNet-50
at 64 per GPU first); a configuration that would start past the budget is listed as
skipped, so a budget that runs out still leaves the most important rows. The "off" run
of each model, batch and mode also trains on rank 0 alone, for the single-device
reference; the other runs of that group are compared with it (same model, batch, mode).
One more run, ``off, untimed`` (ACCELKIT_COMM_TIMING=0: DDP without any hook), for the
eager ResNet-50 at 64 per GPU, and benchmarks/comm_hook_overhead.py after the eager
groups (plain DDP, the hook, the timed hook in paired rounds) give the timing's cost.

Writes OUT/<name>.json (benchmarks/scaling.py's result) for each run, OUT/suite.json
with one row per configuration, and prints the rows as a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_compare import run_child, write_json

SCRIPT = str(Path(__file__).resolve().with_name("scaling.py"))
OVERHEAD = str(Path(__file__).resolve().with_name("comm_hook_overhead.py"))
GPU_GROUPS = [("resnet50", 64), ("gpt2", 16), ("resnet50", 256), ("gpt2", 32)]
SMOKE_GROUPS = [("mlp", 32)]
# Steps per run: the "on" runs add tune's trials (at most 5 candidates x 10 optimizer
# steps here: the baseline, bf16 gradients, 100 MB buckets, a static graph, no buffer
# broadcast; the bench fixes the fused optimizer and compile) and WARMUP after them,
# leaving 40 steady steps as the "off" runs have 30.
STEPS = {"off": 40, "on": 110}
WARMUP = 10
LONGEST_RUN_S = 240.0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2, help="processes per run (torchrun)")
    parser.add_argument("--out", required=True, help="folder for the JSON files")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for all runs")
    parser.add_argument("--only", choices=("eager", "compiled"), help="one mode only")
    parser.add_argument("--smoke", action="store_true", help="a tiny MLP on the CPU (gloo)")
    return parser.parse_args(argv)


def configurations(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """The runs in the order they are worth: eager groups (off, on, and the untimed
    control for the first), the hook's cost, then the compiled groups."""
    modes = (
        ["eager"] if args.smoke else [m for m in ("eager", "compiled") if args.only in (None, m)]
    )
    groups = SMOKE_GROUPS if args.smoke else GPU_GROUPS
    for mode in modes:
        for model, batch in groups:
            group = f"{model}_b{batch}_{mode}"
            runs = [("off", True), ("on", True)]
            if mode == "eager" and (model, batch) == groups[0]:
                runs.append(("off", False))
            for levers, timed in runs:
                yield {
                    "name": f"{group}_{levers}" + ("" if timed else "_untimed"),
                    "group": group,
                    "model": model,
                    "batch": batch,
                    "mode": mode,
                    "levers": levers,
                    "timed": timed,
                }
        if mode == "eager":
            yield _overhead(*groups[0])


def _overhead(model: str, batch: int) -> dict[str, Any]:
    return {
        "name": f"hook_overhead_{model}_b{batch}",
        "group": "overhead",
        "model": model,
        "batch": batch,
        "mode": "eager",
        "levers": "overhead",
        "timed": True,
    }


def command(config: dict[str, Any], args: argparse.Namespace, single: float | None) -> list[str]:
    """``python -m torch.distributed.run ... benchmarks/scaling.py ...`` for one run."""
    where = ["-m", "torch.distributed.run", "--nproc-per-node", str(args.gpus), "--standalone"]
    out = str(Path(args.out) / f"{config['name']}.json")
    if config["levers"] == "overhead":
        rounds = ["--steps", "10" if args.smoke else "30"]
        return [
            *where,
            OVERHEAD,
            "--model",
            config["model"],
            "--batch-size",
            str(config["batch"]),
            *rounds,
            "--repeats",
            "3",
            "--out",
            out,
            *(["--channels-last"] if config["model"] == "resnet50" else []),
        ]
    steps = STEPS[config["levers"]]
    if args.smoke:
        steps = {"off": 12, "on": 60}[config["levers"]]
    line = [
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(args.gpus),
        "--standalone",
        SCRIPT,
        "--model",
        config["model"],
        "--batch-size",
        str(config["batch"]),
        "--steps",
        str(steps),
        "--warmup",
        str(3 if args.smoke else WARMUP),
        "--levers",
        config["levers"],
        "--json",
        "--out",
        str(Path(args.out) / f"{config['name']}.json"),
    ]
    if config["levers"] == "on":
        line.append("--tune")
    if config["mode"] == "compiled":
        line.append("--compile")
    if single:
        line += ["--single-device", str(single)]
    return line


@contextlib.contextmanager
def _environment(timed: bool) -> Iterator[None]:
    saved = os.environ.get("ACCELKIT_COMM_TIMING")
    if not timed:
        os.environ["ACCELKIT_COMM_TIMING"] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("ACCELKIT_COMM_TIMING", None)
        else:
            os.environ["ACCELKIT_COMM_TIMING"] = saved


def row(config: dict[str, Any], result: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One line of the table from a run's result (or its error)."""
    out = {k: config[k] for k in ("name", "model", "batch", "mode", "levers", "timed")}
    out["seconds"] = round(seconds, 1)
    if "error" in result:
        out["error"] = result["error"][-600:]
        return out
    if config["levers"] == "overhead":
        out.update(
            median_step_ms={k: v * 1e3 for k, v in result["median_step_s"].items()},
            ratio_to_plain=result.get("ratio_to_plain"),
            timer_host_us_per_step=result.get("timer_host_us_per_step"),
            bookkeeping_us_per_bucket=result.get("bookkeeping_us_per_bucket_alone"),
            buckets=result.get("buckets"),
        )
        return out
    ranks = result.get("ranks") or []
    waits = [r["communication_s"] for r in ranks if r.get("communication_s") is not None]
    shares = [r["communication_share"] for r in ranks if r.get("communication_share") is not None]
    steps = [r["step_time_s"] for r in ranks if r.get("step_time_s")]
    tuning = result.get("tuning") or {}
    out.update(
        world_size=result.get("world_size"),
        scaling_efficiency=result.get("scaling_efficiency"),
        global_samples_per_second=(result.get("global") or {}).get("samples_per_second"),
        single_device_samples_per_second=(result.get("single_device") or {}).get(
            "samples_per_second"
        ),
        step_ms=max(steps) * 1e3 if steps else None,
        all_reduce_wait_ms=[round(w * 1e3, 3) for w in waits],
        all_reduce_wait_share=[round(s, 4) for s in shares],
        hook_host_us=(result.get("communication") or {}).get("hook_host_us"),
        ddp=result.get("ddp"),
        tune_kept=tuning.get("chosen"),
        tune_candidates=[
            (c["name"], c["status"], c.get("step_seconds")) for c in tuning.get("candidates", [])
        ],
    )
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as the table docs/benchmarks.md holds."""
    head = (
        "| model | batch per GPU | mode | levers | GPUs | one GPU samples/s | all samples/s | "
        "scaling efficiency | step ms | all-reduce wait (min-max share) | tune kept |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        if r["levers"] == "overhead" and "median_step_ms" in r:
            ms, ratio = r["median_step_ms"], r["ratio_to_plain"]
            lines.append(
                f"| {r['model']} | {r['batch']} | eager | the timing's cost | - | - | - | "
                f"plain {ms['plain']:.2f} ms, no DDP x{ratio['module']:.4f}, hook "
                f"x{ratio['hook']:.4f}, timed x{ratio['timed']:.4f} | - | "
                f"{r['timer_host_us_per_step']:.1f} us/step "
                "bookkeeping | - |"
            )
            continue
        if "error" in r or "skipped" in r:
            why = r.get("skipped") or "error: " + r["error"].splitlines()[-1][:80]
            lines.append(
                f"| {r['model']} | {r['batch']} | {r['mode']} | {r['levers']} | - | - | - | "
                f"{why} | - | - | - |"
            )
            continue
        shares = r["all_reduce_wait_share"]
        wait = f"{min(shares):.1%}-{max(shares):.1%}" if shares else "not timed"
        efficiency = r["scaling_efficiency"]
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['mode']} | {r['levers']}"
            f"{'' if r['timed'] else ', untimed'} | {r['world_size']} | "
            f"{_num(r['single_device_samples_per_second'])} | "
            f"{_num(r['global_samples_per_second'])} | "
            f"{'-' if efficiency is None else f'{efficiency:.1%}'} | "
            f"{_num(r['step_ms'], '{:.2f}')} | {wait} | {r['tune_kept'] or '-'} |"
        )
    return "\n".join(lines)


def host() -> dict[str, Any]:
    """This host's GPUs and links as NVML reports them, and what `nccl_settings` decides
    for them (the decision the runs' plans applied; docs/distributed.md)."""
    import accelkit
    from accelkit.planning.distribution import nccl_settings

    hardware = accelkit.detect()
    return {
        "gpus": [gpu.name for gpu in hardware.gpus],
        "all_nvlink": hardware.all_nvlink,
        "all_peers_reachable": hardware.all_peers_reachable,
        "links": [
            {
                "a": link.a,
                "b": link.b,
                "p2p": link.p2p,
                "nvlink": link.nvlink,
                "level": link.common_ancestor,
            }
            for link in hardware.links
        ],
        "infiniband": hardware.infiniband,
        "nccl_settings": [
            {"key": s.key.value, "value": s.value, "reason": s.reason}
            for s in nccl_settings(hardware)
        ],
        "notes": list(hardware.notes),
    }


def _num(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    singles: dict[str, float] = {}
    rows: list[dict[str, Any]] = []
    for config in configurations(args):
        left = args.budget - (time.perf_counter() - started)
        if left < 30:
            rows.append({**config, "skipped": f"budget of {args.budget:.0f} s spent"})
            continue
        begun = time.perf_counter()
        with _environment(config["timed"]):
            result = run_child(
                command(config, args, singles.get(config["group"])),
                timeout=min(left - 5, LONGEST_RUN_S),
            )
        found = row(config, result, time.perf_counter() - begun)
        if found.get("single_device_samples_per_second") and config["levers"] == "off":
            singles.setdefault(config["group"], found["single_device_samples_per_second"])
        rows.append(found)
        state = "error" if "error" in found else f"{found['seconds']:.0f} s"
        print(f"  {config['name']}: {state}", file=sys.stderr, flush=True)
        write_json(str(Path(args.out) / "suite.json"), {"rows": rows, "gpus": args.gpus})
    suite = {
        "gpus": args.gpus,
        "budget_s": args.budget,
        "seconds": round(time.perf_counter() - started, 1),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "host": host(),
        "rows": rows,
    }
    write_json(str(Path(args.out) / "suite.json"), suite)
    print(markdown(rows))
    print(json.dumps({"suite": str(Path(args.out) / "suite.json")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
