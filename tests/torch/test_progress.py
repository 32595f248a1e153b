"""The live progress line of `accelkit.torch.fit`: step k/N and the time left when the
run's length is known (``steps=``, or ``len(loader)`` x epochs), a plain count when not;
redrawn in place on a terminal without leaving a longer line's tail behind. Its width on
a terminal: tests/utils/test_progress_line.py and test_progress_tty.py."""

from __future__ import annotations

import logging
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.utils import log

pytestmark = pytest.mark.torch
STEP = re.compile(r"^accelkit: step (\d+)(?:/(\d+) \((\d+)%\))? ")
ETA = re.compile(r"  ETA (\d+):(\d\d)(?::(\d\d))?$")
LOSS = re.compile(r"  loss ([0-9.e+-]+)  ")


def _progress_lines(caplog, **fit) -> list[str]:
    pytest.importorskip("torch")
    from tests.helpers.torch_data import train

    with caplog.at_level(logging.INFO, logger="accelkit"):
        train(progress=True, window=4, warmup=1, **fit)
    return [r.getMessage() for r in caplog.records if getattr(r, log.PROGRESS, False)]


@pytest.mark.parametrize(("epochs", "steps", "total"), [(2, None, 2 * 32), (3, 10, 10)])
def test_the_line_says_step_k_of_n_and_the_time_left(caplog, epochs, steps, total) -> None:
    lines = _progress_lines(caplog, epochs=epochs, steps=steps)
    assert lines
    for line in lines:
        k, n, share = STEP.match(line).groups()
        assert int(n) == total and 1 <= int(k) <= total
        assert int(share) == round(100 * int(k) / total)
        assert ETA.search(line), line


def test_a_loader_without_a_length_gives_a_plain_count(caplog) -> None:
    pytest.importorskip("torch")
    from tests.helpers.torch_data import separable

    batches = iter(list(separable(n=320)))  # an iterator: no len()
    lines = _progress_lines(caplog, loader=batches, epochs=1)
    assert lines
    for line in lines:
        assert STEP.match(line).group(2) is None and "ETA" not in line


@given(
    step=st.integers(1, 10**7),
    more=st.integers(0, 10**7),
    step_s=st.floats(1e-6, 60, allow_nan=False),
    elapsed=st.floats(0, 10**6, allow_nan=False),
)
def test_the_time_left_is_the_steps_left_at_the_step_time(step, more, step_s, elapsed) -> None:
    total = step + more
    line = str(log.Progress(step, total, 123.4, step_s, elapsed))  # every field
    assert line.startswith(f"accelkit: step {step}/{total} (")
    h_or_m, m_or_s, s = ETA.search(line).groups()
    seconds = (
        int(h_or_m) * 3600 + int(m_or_s) * 60 + int(s) if s else int(h_or_m) * 60 + int(m_or_s)
    )
    assert abs(seconds - more * step_s) <= 0.5 + 1e-9 * more * step_s


def test_without_a_length_there_is_no_eta() -> None:
    line = str(log.Progress(7, None, 10.0, 0.1, 3.0))
    assert line == "accelkit: step 7  10.0 samples/s  100.0 ms/step  0:03 elapsed"


def test_a_shorter_redraw_clears_the_longer_lines_tail(monkeypatch) -> None:
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    logger = logging.getLogger("accelkit")
    logger.info("accelkit: step 9/10  ETA 1:00", extra={log.PROGRESS: True})
    logger.info("accelkit: step 10/10", extra={log.PROGRESS: True})
    log.end_progress_line()
    shown = terminal.getvalue().split("\r")[-1]
    assert shown == "accelkit: step 10/10\x1b[K\n"  # clear to the end of the line


def test_a_single_epoch_fit_shows_its_running_loss(caplog) -> None:
    # Regression (issue 25): the line showed the last finished epoch's loss only, so a
    # one-epoch run (most fine-tuning) never showed one. The epoch's mean so far is read
    # at the window boundary; it must be a finite number the first line already has.
    lines = _progress_lines(caplog, epochs=1)
    assert lines
    losses = [float(m.group(1)) for m in map(LOSS.search, lines) if m]
    assert len(losses) == len(lines), lines
    assert all(math.isfinite(loss) and loss > 0 for loss in losses)
