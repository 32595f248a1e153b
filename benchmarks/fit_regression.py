"""Did a change slow `accelkit.torch.fit`? The same fit from two source trees, in one run.

Runs `gpu_compare.py`'s `accelkit` variant (auto_configure + accelkit.torch.fit,
measuring included; optionally `accelkit_compile`) once with this tree's `src`
and once with a baseline tree's, alternating, `--rounds` times, each in its own
process. Reports, per variant, the median step time of each tree and the ratio
candidate / baseline of every round, with its median and spread.

    git archive <commit> src | tar -x -C /tmp/baseline
    PYTHONPATH=src python benchmarks/fit_regression.py --baseline-src /tmp/baseline/src \\
        --model gpt2 --rounds 3 --out benchmarks/results/h200_fit_regression_gpt2.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import gpu_compare  # same folder: the variants' command line

HERE = Path(__file__).resolve().parent


def _one(src: str, variant: str, args: argparse.Namespace) -> list[float]:
    """Step times (s) of one child process running `variant` from the tree at `src`."""
    command = [sys.executable, str(HERE / "gpu_compare.py")]
    command += gpu_compare.variant_arguments(args, variant)
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=args.timeout,
        check=False,
        env={**os.environ, "PYTHONPATH": src},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{variant} from {src} failed:\n{(done.stderr or done.stdout)[-2000:]}")
    return list(json.loads(lines[-1])["step_s"])


def compare(args: argparse.Namespace) -> dict[str, Any]:
    trees = {"candidate": os.path.abspath(args.src), "baseline": os.path.abspath(args.baseline_src)}
    results: dict[str, Any] = {}
    for variant in args.variants:
        rounds = []
        for index in range(args.rounds):
            # Alternate which tree goes first, so a drift in clocks or heat favours neither.
            order = list(trees) if index % 2 == 0 else list(reversed(trees))
            steps = {name: statistics.median(_one(trees[name], variant, args)) for name in order}
            rounds.append({**steps, "ratio": steps["candidate"] / steps["baseline"]})
            print(
                f"  {variant} round {index + 1}: ratio {rounds[-1]['ratio']:.4f}",
                file=sys.stderr,
                flush=True,
            )
        ratios = [r["ratio"] for r in rounds]
        results[variant] = {
            "candidate_step_ms": statistics.median(r["candidate"] for r in rounds) * 1e3,
            "baseline_step_ms": statistics.median(r["baseline"] for r in rounds) * 1e3,
            "ratio_median": statistics.median(ratios),
            "ratio_spread": [min(ratios), max(ratios)],
            "rounds": rounds,
        }
    return {
        "benchmark": "fit_regression",
        "model": args.model,
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "trees": trees,
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", required=True, help="the baseline tree's src folder")
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the candidate's src")
    parser.add_argument("--model", default="gpt2")
    parser.add_argument(
        "--variants", nargs="+", default=["accelkit"], choices=["accelkit", "accelkit_compile"]
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating pairs of processes")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="repeats inside each process")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds} must be >= 1")
    result = compare(args)
    print(f"{result['model']}: accelkit.torch.fit, candidate / baseline step time")
    print(f"{'variant':<18}{'candidate ms':>14}{'baseline ms':>13}{'ratio':>8}{'spread':>17}")
    for variant, row in result["results"].items():
        low, high = row["ratio_spread"]
        print(
            f"{variant:<18}{row['candidate_step_ms']:>14.2f}{row['baseline_step_ms']:>13.2f}"
            f"{row['ratio_median']:>8.4f}{f'{low:.4f}-{high:.4f}':>17}"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
