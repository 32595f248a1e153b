"""The live progress line on a terminal (issue 25): never wider than the terminal's
columns - 1 (a full row wraps, and each redraw then stacks a new line), the least
important fields dropped first, drawn over the last line with ``\\r`` and clear-to-end,
and the loss shown where one is known."""

from __future__ import annotations

import io
import logging
import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import accelkit  # noqa: F401 - sets the logger up
from accelkit.utils import log

logger = logging.getLogger("accelkit")
CLEAR = "\x1b[K"
# The text by which each field of the line is found, least important first (as dropped).
FIELD_MARKS = {
    "elapsed": re.compile(r" elapsed"),
    "ms/step": re.compile(r" ms/step"),
    "share": re.compile(r"\(\d+%\)"),
    "name": re.compile(r"^accelkit: "),
    "samples/s": re.compile(r" samples/s"),
    "eta": re.compile(r"ETA "),
    "loss": re.compile(r"loss "),
}

finite = st.floats(0, 1e12, allow_nan=False, allow_infinity=False)


@st.composite
def progresses(draw) -> log.Progress:
    step = draw(st.integers(0, 10**9))
    total = draw(st.none() | st.integers(1, 10**9).map(lambda more: step + more))
    return log.Progress(
        step=step,
        total=total,
        samples_per_s=draw(finite),
        step_s=draw(st.floats(0, 1e6, allow_nan=False)),
        elapsed_s=draw(st.floats(0, 1e9, allow_nan=False)),
        loss=draw(st.none() | st.floats()),  # NaN and infinities: a diverging run
    )


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@given(progress=progresses(), columns=st.integers(20, 300))
def test_the_line_never_exceeds_the_width_and_keeps_the_step(progress, columns) -> None:
    line = progress.fit(columns)
    assert len(line) <= columns - 1
    assert line.startswith(("accelkit: step ", "step "))
    if len(str(progress)) < columns:  # the whole line fits: nothing is dropped
        assert line == str(progress)


@given(progress=progresses(), columns=st.integers(20, 300))
def test_the_least_important_fields_go_first(progress, columns) -> None:
    line = progress.fit(columns)
    whole = str(progress)
    present = [name for name, mark in FIELD_MARKS.items() if mark.search(line)]
    offered = [name for name, mark in FIELD_MARKS.items() if mark.search(whole)]
    if present:  # every field more important than one kept is kept too
        first = list(FIELD_MARKS).index(present[0])
        assert [n for n in offered if list(FIELD_MARKS).index(n) >= first] == present


@given(
    progresses=st.lists(progresses(), min_size=1, max_size=4),
    columns=st.lists(st.integers(20, 300), min_size=4, max_size=4),
)
def test_each_redraw_fits_the_terminal_of_that_moment_and_clears_the_rest(
    progresses, columns
) -> None:
    terminal = Terminal()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stderr", terminal)
        for progress, width in zip(progresses, columns, strict=False):
            patch.setenv("COLUMNS", str(width))  # the terminal is resized between redraws
            logger.info("%s", progress, extra={log.PROGRESS: progress})
        log.end_progress_line()
    output = terminal.getvalue()
    assert output.endswith(CLEAR + "\n") and output.count("\n") == 1
    draws = output[:-1].split("\r")[1:]
    assert len(draws) == len(progresses)
    for draw, width in zip(draws, columns, strict=False):
        assert draw.endswith(CLEAR)
        assert len(draw) - len(CLEAR) <= width - 1


def test_the_line_shows_the_loss_and_keeps_it_when_narrow() -> None:
    progress = log.Progress(120, 600, 1234.5, 0.0123, 34.2, loss=0.4321)
    assert "loss 0.4321" in str(progress)
    assert log.Progress(120, 600, 1234.5, 0.0123, 34.2).fit(300).count("loss") == 0
    assert progress.fit(30) == "step 120/600  loss 0.4321"


def test_an_80_column_terminal_gets_at_most_79_characters() -> None:
    # The defect: 81-102 characters wrapped in an 80-column terminal.
    line = log.progress_text(123456, 600000, 12345.6, 0.0123, 3725.0, loss=2.5, columns=80)
    assert len(line) <= 79
    assert line == "accelkit: step 123456/600000 (21%)  loss 2.5  12,345.6 samples/s  ETA 1:37:41"


def test_a_width_below_one_is_refused_naming_the_valid_values() -> None:
    with pytest.raises(ValueError, match=r"columns=0 must be >= 1"):
        log.Progress(1, None, 1.0, 1.0, 1.0).fit(0)
