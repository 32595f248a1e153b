"""A real `accelkit.torch.fit` in an 80-column pseudo-terminal (issue 25): its progress
line is redrawn in place, so the screen holds one progress row, never a stack of them
(the line was 81-102 characters and wrapped at each redraw), and it shows the loss."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[2]
# Two epochs of 32 batches, a window of 4: about 15 redraws, the second epoch's with the
# first epoch's loss.
FIT = """
from tests.helpers.torch_data import train
train(progress=True, window=4, warmup=1, epochs=2)
"""
ESCAPE_OR_CHAR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|.", re.DOTALL)


def run_in_terminal(code: str, columns: int, rows: int = 24) -> str:
    """What `code`, run by this Python in a pseudo-terminal `columns` wide, writes there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child has gone and the terminal is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        child.wait(timeout=300)
    assert child.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def screen_rows(output: str, columns: int) -> list[str]:
    """The rows a terminal `columns` wide shows for `output`: carriage return, newline,
    clear-to-end-of-line, and a wrap when a character falls past the last column."""
    rows: list[str] = []
    row: list[str] = []
    column = 0
    for token in ESCAPE_OR_CHAR.findall(output):
        if token == "\r":
            column = 0
        elif token == "\n":
            rows.append("".join(row))
            row, column = [], 0
        elif token == "\x1b[K":
            del row[column:]
        elif token.startswith("\x1b"):
            continue
        else:
            if column == columns:  # the cursor was past the last column: wrap
                rows.append("".join(row))
                row, column = [], 0
            row[column : column + 1] = [token]
            column += 1
    return [*rows, "".join(row)]


def test_a_fit_in_an_80_column_terminal_keeps_one_progress_row_with_the_loss() -> None:
    pytest.importorskip("torch")
    output = run_in_terminal(FIT, columns=80)
    draws = output.count("accelkit: step")
    assert draws >= 5, output  # it was redrawn, not drawn once
    progress_rows = [row for row in screen_rows(output, 80) if "step " in row]
    assert len(progress_rows) == 1, progress_rows
    [row] = progress_rows
    assert row.startswith("accelkit: step 64/64 (100%)  loss "), row
    assert len(row.rstrip()) <= 79
