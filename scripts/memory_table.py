"""Regenerate the what-if memory table in docs/planning.md ("Models that do not fit
one GPU"): 1B / 8B / 70B-class models on 1 and 8 GPUs, from the planner itself
(`accelkit.plan_for(gpu, count, params=...)`, what `accelkit plan --params` prints).

python scripts/memory_table.py          # rewrite the table between the markers
python scripts/memory_table.py --check  # exit 1 if docs/planning.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

from generated_table import rewrite  # same folder: sys.path[0] when run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from accelkit import plan_for

DOC = ROOT / "docs" / "planning.md"
START, END = "<!-- memory-table:start -->", "<!-- memory-table:end -->"
# parameter counts of the class's best-known model: Llama 3.2 1B, Llama 3 8B and 70B
# (Meta's model cards; The Llama 3 Herd of Models, 2024)
MODELS = (("1B", 1.24e9), ("8B", 8.03e9), ("70B", 70.6e9))
GPUS = (
    ("H100 80GB", "H100 SXM"),
    ("H200 141GB", "H200 SXM"),
    ("A100 40GB", "A100-SXM4-40GB"),
    ("A100 80GB", "A100-SXM4-80GB"),
)
COUNTS = (1, 8)


def _gb(count: int | None) -> str:
    return "—" if count is None else f"{count / 1e9:,.1f}"


def row(model: str, params: float, label: str, gpu: str, count: int) -> str:
    memory = plan_for(gpu, count, params=params).memory
    assert memory is not None
    needed = "—" if memory.gpus_needed is None else str(memory.gpus_needed)
    return (
        f"| {model} | {count} x {label} | {_gb(memory.state_bytes)} | "
        f"{_gb(memory.per_gpu_bytes)} | {_gb(memory.usable_bytes)} | {memory.choice} | "
        f"{needed} | {memory.largest_params / 1e9:,.1f}B |"
    )


def table() -> str:
    head = (
        "| model | GPUs | state GB | per GPU GB | usable GB | choice | GPUs to shard | "
        "largest held |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for model, params in MODELS:
        for label, gpu in GPUS:
            lines += [row(model, params, label, gpu, count) for count in COUNTS]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return rewrite(DOC, (START, END), table(), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
