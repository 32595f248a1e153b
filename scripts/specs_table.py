"""Regenerate the table in docs/specs.md from src/accelkit/specs/gpus.json.

python scripts/specs_table.py          # rewrite the table between the markers
python scripts/specs_table.py --check  # exit 1 if docs/specs.md is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from generated_table import rewrite  # same folder: sys.path[0] when run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from accelkit.specs import all_specs

DOC = ROOT / "docs" / "specs.md"
START, END = "<!-- table:start -->", "<!-- table:end -->"
COLUMNS = ("fp32", "tf32", "bf16", "fp16", "fp8")


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _links(source: str) -> str:
    urls = re.findall(r"https://\S+?(?=[;,)]?(?:\s|$))", source)
    return " ".join(f"[{i}]({url})" for i, url in enumerate(urls, 1))


def table() -> str:
    head = "| GPU | key | cc | memory GB | GB/s | " + " | ".join(COLUMNS) + " | source |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for spec in all_specs():
        cc = ".".join(map(str, spec.compute_capability))
        peaks = " | ".join(_number(spec.peak(dtype)) for dtype in COLUMNS)
        lines.append(
            f"| {spec.name} | `{spec.key}` | {cc} | {_number(spec.memory_gb)} | "
            f"{_number(spec.bandwidth_gbps)} | {peaks} | {_links(spec.source)} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return rewrite(DOC, (START, END), table(), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
