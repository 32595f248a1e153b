"""Data-parallel scaling of a built-in model: N GPUs against one, through accelkit.bench.

Under torchrun, rank 0 first trains the model alone on its GPU (the others
wait), then every rank trains it with DistributedDataParallel, the same batch
per GPU (weak scaling); the table gives each rank's and the global throughput,
tokens/s, MFU and the scaling efficiency = global / (N x single). Without
torchrun it is the single-GPU counterpart (one run, no comparison).

    PYTHONPATH=src torchrun --nproc-per-node 2 benchmarks/scaling.py --model gpt2 --steps 30 \\
        --out benchmarks/results/h200x2_scaling_gpt2.json
    PYTHONPATH=src python benchmarks/scaling.py --model gpt2 --steps 30 \\
        --out benchmarks/results/h200x1_gpt2.json
    # against a saved single-GPU run instead of re-measuring it on rank 0:
    PYTHONPATH=src torchrun --nproc-per-node 2 benchmarks/scaling.py --model gpt2 --steps 30 \\
        --single-device benchmarks/results/h200x1_gpt2.report.json
    # CPU check (gloo): torchrun --nproc-per-node 2 benchmarks/scaling.py --model gpt --steps 4

The DDP levers (`accelkit.torch.tuning.levers`), one configuration per run:

    --levers off      plain DDP: DistributedDataParallel's defaults (no bucket views); the
                      all-reduce is timed (ACCELKIT_COMM_TIMING=0 in the environment
                      takes the hook away, to measure its cost)
    --levers on       accelkit.torch.fit's defaults: gradients as bucket views (the default)
    --tune            and tune measuring bf16 gradients (bf16 plans), 100 MB buckets, a
                      static graph and no buffer broadcast (models with buffers), keeping
                      what is clearly faster (add about 50 steps)
    --bf16-grads, --bucket-cap-mb N, --static-graph: fix one lever (not tuned)

Each rank's wait for the all-reduce (ms per step and share) is in the table and the
JSON; `--json` prints the result as one line on stdout (benchmarks/scaling_suite.py
runs every configuration that way).

accelkit sets only the NCCL variables its plan lists (never NCCL_NVLS_ENABLE);
the NCCL_* variables in force are recorded in the JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

if importlib.util.find_spec("accelkit") is None:  # a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", help="mlp, cnn, gpt, gpt2, resnet50")
    parser.add_argument("--steps", type=int, default=30, help="steps per run, warm-up included")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=None, help="per GPU")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument(
        "--calibrate", action="store_true", help="also MFU against a measured matmul rate"
    )
    parser.add_argument(
        "--levers",
        choices=("off", "on"),
        default="on",
        help="off: plain DDP; on: accelkit's defaults (see above)",
    )
    parser.add_argument("--tune", action="store_true", help="tune the DDP options (see above)")
    parser.add_argument("--bf16-grads", action="store_true", help="all-reduce in bf16 (fixed)")
    parser.add_argument("--bucket-cap-mb", type=float, help="DDP's bucket size (fixed)")
    parser.add_argument("--static-graph", action="store_true", help="DDP static_graph (fixed)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument(
        "--single-device",
        metavar="REPORT.json|SAMPLES_PER_S",
        help="the single-GPU reference (default: measured on rank 0 first)",
    )
    parser.add_argument(
        "--out",
        help="write the results as JSON (rank 0); the full report goes next to it as *.report.json",
    )
    return parser.parse_args(argv)


def _single(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def _tokens_per_sample(report: Any) -> float | None:
    if report.tokens_per_second and report.samples_per_second:
        return report.tokens_per_second / report.samples_per_second
    return None


def ddp_options(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """The ``fit(ddp=...)`` options and the tune flag of this configuration."""
    options: dict[str, Any] = {} if args.levers == "on" else {"gradient_as_bucket_view": False}
    if args.bf16_grads:
        options["compression"] = "bf16"
    if args.bucket_cap_mb is not None:
        options["bucket_cap_mb"] = args.bucket_cap_mb
    if args.static_graph:
        options["static_graph"] = True
    return options, args.tune


def summary(report: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The figures of the table, as plain data."""
    per_sample = _tokens_per_sample(report)

    def tokens(samples: float | None) -> float | None:
        return samples * per_sample if samples and per_sample else None

    ranks = [
        {
            **r,
            "tokens_per_second": r.get("tokens_per_second") or tokens(r.get("samples_per_second")),
        }
        for r in report.ranks
    ]
    achieved = [r.get("achieved_tflops") for r in ranks]
    mfus = [r.get("mfu") for r in ranks]
    single = report.single_device_samples_per_second
    return {
        "model": args.model,
        "steps": report.steps,
        "warmup": report.warmup_steps,
        "batch_size_per_device": report.batch_size,
        "precision": report.precision,
        "compile": args.compile,
        "levers": args.levers,
        "ddp": report.facts.get("ddp"),
        "communication": report.facts.get("communication"),
        "tuning": report.tuning,
        "comm_timing": os.environ.get("ACCELKIT_COMM_TIMING", "on"),
        "device": report.device,
        "world_size": report.world_size,
        "ranks": ranks,
        "global": {
            "samples_per_second": report.global_samples_per_second,
            "tokens_per_second": tokens(report.global_samples_per_second),
            "achieved_tflops": sum(achieved) if None not in achieved else None,
            "mfu": sum(mfus) / len(mfus) if mfus and None not in mfus else None,
        },
        "single_device": {"samples_per_second": single, "tokens_per_second": tokens(single)},
        "scaling_efficiency": report.scaling_efficiency,
        "slowest_rank": report.slowest_rank,
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "plan": [
            {k: s[k] for k in ("key", "value", "status", "detail")}
            for s in report.plan.get("settings", [])
        ],
        "notes": report.notes,
        "versions": report.versions,
    }


def _num(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def table(result: dict[str, Any]) -> str:
    from accelkit.report.render import table as render

    rows = [
        (
            str(r["rank"]),
            str(r.get("device", "-")),
            _num(r.get("samples_per_second")),
            _num(r.get("tokens_per_second"), "{:,.0f}"),
            _num(r.get("step_time_s") and r["step_time_s"] * 1e3, "{:.2f}"),
            _num(r.get("input_wait_share") and r["input_wait_share"] * 100, "{:.1f}%"),
            _wait(r),
            _num(r.get("mfu") and r["mfu"] * 100, "{:.1f}%"),
        )
        for r in result["ranks"]
    ]
    whole, single = result["global"], result["single_device"]
    rows.append(
        (
            f"all {result['world_size']}",
            "",
            _num(whole["samples_per_second"]),
            _num(whole["tokens_per_second"], "{:,.0f}"),
            "",
            "",
            "",
            _num(whole["mfu"] and whole["mfu"] * 100, "{:.1f}%"),
        )
    )
    rows.append(
        (
            "1 alone",
            "",
            _num(single["samples_per_second"]),
            _num(single["tokens_per_second"], "{:,.0f}"),
            "",
            "",
            "",
            "",
        )
    )
    efficiency = result["scaling_efficiency"]
    head = (
        f"{result['model']}: {result['world_size']} device(s), batch "
        f"{_num(result['batch_size_per_device'], '{:g}')} per device, precision "
        f"{result['precision']}, {'compiled' if result['compile'] else 'eager'}, levers "
        f"{result['levers']} (DDP {_options(result['ddp'])}); per-rank figures, then the "
        "whole run"
    )
    body = render(
        (
            "rank",
            "device",
            "samples/s",
            "tokens/s",
            "step ms",
            "input wait",
            "all-reduce wait",
            "MFU",
        ),
        rows,
    )
    tail = (
        f"scaling efficiency {_num(efficiency and efficiency * 100)}% "
        f"(slowest rank {result['slowest_rank']})"
        if efficiency is not None
        else f"scaling efficiency -: {result['notes'].get('scaling_efficiency', 'not measured')}"
    )
    kept = result["tuning"] and result["tuning"].get("chosen")
    return f"{head}\n{body}\n{tail}" + (f"; tune kept {kept}" if kept else "")


def _wait(rank: dict[str, Any]) -> str:
    """A rank's wait for the all-reduce: ms per step and share of the step."""
    wait = rank.get("communication_s")
    if wait is None:
        return "-"
    return f"{wait * 1e3:.2f} ms ({rank['communication_share'] * 100:.1f}%)"


def _options(ddp: dict[str, Any] | None) -> str:
    if not ddp:
        return "-"
    return ", ".join(f"{k}={v}" for k, v in ddp.items())


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    from accelkit import bench

    single = _single(args.single_device)
    options, tune = ddp_options(args)
    report = bench.run(
        args.model,
        "torch",
        steps=args.steps,
        batch_size=args.batch_size,
        precision=args.precision,
        compile=args.compile,
        calibrate=args.calibrate,
        warmup=args.warmup,
        compare_single=single is None,
        single_device=single,
        tune=tune,
        ddp=options,
    )
    if os.environ.get("RANK", "0") not in ("", "0"):
        return 0
    result = summary(report, args)
    result["advice"] = [a for a in report.advice if a["id"] == "scaling"]
    print(table(result), file=sys.stderr if args.json else sys.stdout)
    for advice in result["advice"]:
        print(
            f"advice: {advice['title']}\n  gain: {advice['expected_gain']}",
            file=sys.stderr if args.json else sys.stdout,
        )
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        report.save(out.with_suffix(".report.json"))
        print(f"wrote {out} and {out.with_suffix('.report.json')}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
