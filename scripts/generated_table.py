"""A generated table inside a docs page, between two markers: written, or checked.

The table scripts (`specs_table.py`, `memory_table.py`) build their table and hand it
here; ``--check`` exits 1 when the page is out of date (the tests run it).
"""

from __future__ import annotations

import sys
from pathlib import Path


def rewrite(doc: Path, markers: tuple[str, str], table: str, argv: list[str]) -> int:
    """Put `table` between `markers` in `doc`, or with ``--check`` in `argv` say whether
    it is there already (exit status 0) or not (1, with the command that updates it)."""
    start, end = markers
    text = doc.read_text(encoding="utf-8")
    before, rest = text.split(start, 1)
    _, after = rest.split(end, 1)
    updated = f"{before}{start}\n{table}\n{end}{after}"
    if "--check" in argv:
        if updated != text:
            print(f"{doc} is out of date: run python {sys.argv[0]}", file=sys.stderr)
            return 1
        return 0
    doc.write_text(updated, encoding="utf-8")
    return 0
