"""Text that fits a terminal: the width to render at, wrapped paragraphs and tables.

The width is the terminal's as `shutil.get_terminal_size` reads it (``COLUMNS`` first,
then the terminal of stdout), else `DEFAULT_WIDTH` (100) where there is no terminal (a
pipe, a log file, a notebook), and never less than `MIN_WIDTH` (40). Prose (a reason, a
note, advice) wraps at `TEXT_WIDTH` (100) at most, however wide the terminal, so that it
stays readable.

Within that width no line is longer, with one exception: a word longer than the line
it would wrap into (a long URL) stands whole on a line of its own, so it can still be
clicked and copied; the terminal folds it.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Sequence

DEFAULT_WIDTH = 100  # where nothing says the width: a pipe, a file, a notebook
MIN_WIDTH = 40  # narrower is read as this
TEXT_WIDTH = 100  # prose wraps at this at most, however wide the terminal
MIN_TEXT = 30  # the wrapped column beside the others gets at least this, else goes under
INDENT = "    "  # the wrapped column under its row
_KEEP = "\N{NO-BREAK SPACE}"  # textwrap breaks at ASCII whitespace only
# C0 controls but the newline, DEL and C1 controls: what a terminal acts on (ESC, CSI)
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with each control character but the newline written as its escape
    (``\\x1b``), so that a string from a file (a model's name, a note) cannot send a
    terminal escape sequence: retitle the window, clear the screen, rewrite lines.

    Example:
        >>> printable("model\\x1b[2J")
        'model\\\\x1b[2J'
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def terminal_width(width: int | None = None) -> int:
    """`width`, or the terminal's (``COLUMNS`` first), else `DEFAULT_WIDTH`; at least
    `MIN_WIDTH`.

    Example:
        >>> terminal_width(20)
        40
    """
    if width is None:
        width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return max(MIN_WIDTH, width)


def paragraph(text: str, width: int | None = None, first: str = "", rest: str = "  ") -> str:
    """`text` wrapped at `width` (at most `TEXT_WIDTH`), `first` before its first line
    and `rest` before the others; words are never broken.

    Example:
        >>> print(paragraph("note: " + "word " * 12, 40))
        note: word word word word word word word
          word word word word word
    """
    return "\n".join(_wrap(text, min(terminal_width(width), TEXT_WIDTH), first, rest))


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, width: int | None = None
) -> str:
    """Left-aligned columns that fit `width`, the last column (a reason, a source, a
    value in words) wrapped.

    Three layouts, the first that fits: the last column beside the others, when that
    leaves it its longest word and `MIN_TEXT` columns (or all it needs, if less); the
    last column under each row, indented, when it is prose and the other columns fit;
    else one record per row: its first cell, then ``header: value`` for the others.

    Example:
        >>> print(table(("key", "reason"), [("a", "why a is set")], width=40))
        key  reason
        ---  ------
        a    why a is set
    """
    width = terminal_width(width)
    lead = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers[:-1])]
    lead_width = sum(lead) + 2 * len(lead)  # each column and the gap after it
    room = min(width - lead_width, TEXT_WIDTH)
    longest = max((len(word) for r in rows for word in r[-1].split()), default=0)
    whole = max([len(headers[-1]), *(len(r[-1]) for r in rows)])  # the column unwrapped
    if room >= max(min(MIN_TEXT, whole), longest):
        return _beside(headers, rows, lead, room)
    if whole > MIN_TEXT and lead_width - 2 <= width:
        return _under(headers, rows, lead, width)
    return _records(headers, rows, width, prose=whole > MIN_TEXT)


def _beside(
    headers: Sequence[str], rows: Sequence[Sequence[str]], lead: list[int], room: int
) -> str:
    pad = " " * (sum(lead) + 2 * len(lead))
    rule = [*("-" * w for w in lead), "-" * len(headers[-1])]
    lines = [_cells(headers, lead), _cells(rule, lead)]
    for row in rows:
        text = _wrap(row[-1], room) or [""]
        lines.append(_cells([*row[:-1], text[0]], lead))
        lines.extend(pad + more for more in text[1:])
    return "\n".join(lines)


def _under(
    headers: Sequence[str], rows: Sequence[Sequence[str]], lead: list[int], width: int
) -> str:
    text_width = min(width, TEXT_WIDTH)
    rule = ["-" * w for w in lead]
    lines = [_cells(headers[:-1], lead), INDENT + headers[-1], _cells(rule, lead)]
    for row in rows:
        lines.append(_cells(row[:-1], lead))
        lines += _wrap(row[-1], text_width, INDENT, INDENT)
    return "\n".join(lines)


def _records(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, prose: bool) -> str:
    """Each row as its first cell, then ``header: value`` pairs (a pair is not split
    over two lines where it fits on one), then the last column as a paragraph if it is
    `prose`, else as one more pair."""
    fits = width - len(INDENT)
    paired = len(headers) - 1 if prose else len(headers)
    lines: list[str] = []
    for row in rows:
        lines += _wrap(row[0], width, rest="  ") or ["-"]
        pairs = [f"{h}: {c}" for h, c in zip(headers[1:paired], row[1:paired], strict=True) if c]
        whole = "  ".join(p.replace(" ", _KEEP) if len(p) <= fits else p for p in pairs)
        lines += [line.replace(_KEEP, " ") for line in _wrap(whole, width, INDENT, INDENT)]
        if prose and row[-1]:
            text = f"{headers[-1]}: {row[-1]}"
            lines += _wrap(text, min(width, TEXT_WIDTH), INDENT, INDENT + "  ")
    return "\n".join(lines)


def _cells(cells: Sequence[str], widths: Sequence[int]) -> str:
    # the cells past `widths` (the wrapped column) are not padded
    padded = [c.ljust(w) for c, w in zip(cells, widths, strict=False)] + list(cells[len(widths) :])
    return "  ".join(padded).rstrip()


def _wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    return textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )
