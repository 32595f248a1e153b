"""``examples/project_cost.py --smoke`` prints rows that differ where the hardware does,
or "not projected" with the reason, and no cost in an exponent (issue 37: it printed
four identical rows and $3e-6 an epoch)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ..distributed.torch_launch import environment, run

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "project_cost.py"


@pytest.mark.torch
def test_the_smoke_rows_differ_with_the_hardware() -> None:
    done = run([sys.executable, str(SCRIPT), "--smoke"], environment(), 300)
    assert done.returncode == 0, done.explain()
    table = done.stdout.split("\n\n")[1].split("\n\n")[0]
    rows = {
        gpu: rest.split()
        for gpu, rest in re.findall(r"^8 x (NVIDIA [^\n]+?)\s{2,}(\S.*)$", table, re.MULTILINE)
    }
    assert len(rows) == 4, table
    for gpu, cells in rows.items():  # step, epoch, samples/s, $/epoch; or the reason
        assert cells[:2] == ["not", "projected:"] or cells[-1].startswith(("$", "<")), gpu
    assert rows["NVIDIA L4"] != rows["NVIDIA H100 SXM5 80GB"], table
    assert not re.search(r"\$\s*[\d.]+e-\d", done.stdout), done.stdout
