"""Regenerate the table in docs/specs.md from src/accelkit/specs/gpus.json.

python scripts/specs_table.py          # rewrite the table between the markers
python scripts/specs_table.py --check  # exit 1 if docs/specs.md is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

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
    text = DOC.read_text(encoding="utf-8")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    updated = f"{before}{START}\n{table()}\n{END}{after}"
    if "--check" in argv:
        if updated != text:
            print(f"{DOC} is out of date: run python scripts/specs_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
