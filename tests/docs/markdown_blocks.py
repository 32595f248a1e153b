"""The ```python blocks of README.md and docs/**/*.md, as the documentation tests see them.

A block is skipped when the line before its fence (blank lines aside) is an HTML
comment ``<!-- skip: why -->``: the reason is the test's skip reason.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)")
_SKIP = re.compile(r"^\s*<!--\s*skip:\s*(?P<reason>.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root, e.g. "docs/keras.md"
    line: int  # the opening fence, 1-based
    source: str
    skip: str | None  # the reason, from <!-- skip: reason -->

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(path: Path, root: Path = REPO) -> list[Block]:
    """The ```python blocks of one page, in order (other languages are not collected)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(root).as_posix()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = i + 1
        while end < len(lines) and not (
            lines[end].strip().startswith(fence) and lines[end].strip().strip(fence[0]) == ""
        ):
            end += 1
        if opening["info"].lower() in ("python", "py"):
            body = "\n".join(line[len(indent) :] for line in lines[i + 1 : end])
            found.append(Block(page, i + 1, textwrap.dedent(body) + "\n", _skip_reason(lines, i)))
        i = end + 1
    return found


def _skip_reason(lines: list[str], fence: int) -> str | None:
    for previous in reversed(lines[:fence]):
        if previous.strip():
            marker = _SKIP.match(previous)
            return marker["reason"] if marker else None
    return None
