"""accelkit speaks through one logger: its default handler, level, rank filter, and the
live progress line as log records; only the CLI prints."""

from __future__ import annotations

import ast
import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import accelkit  # noqa: F401 - sets the logger up
from accelkit.hardware import environment
from accelkit.utils import log

SRC = Path(__file__).resolve().parents[1] / "src" / "accelkit"
logger = logging.getLogger("accelkit")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def level_kept():
    level = logger.level
    yield
    logger.setLevel(level)


def test_the_default_handler_shows_info_on_stderr_and_records_still_propagate(
    capsys, caplog
) -> None:
    assert log.default_handler() is not None
    assert logger.level == logging.INFO and logger.propagate
    with caplog.at_level(logging.INFO, logger="accelkit"):
        logger.info("accelkit: hello")
    assert capsys.readouterr().err == "accelkit: hello\n"
    assert [r.getMessage() for r in caplog.records] == ["accelkit: hello"]


def test_set_level_warning_silences_the_chatter(capsys) -> None:
    logger.setLevel(logging.WARNING)
    logger.info("accelkit: chatter")
    logger.warning("accelkit: a warning")
    assert capsys.readouterr().err == "accelkit: a warning\n"


def test_a_console_handler_of_the_application_takes_over(capsys) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("APP %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        logger.info("accelkit: once")
    finally:
        logging.getLogger().removeHandler(handler)
    assert capsys.readouterr().err == "APP accelkit: once\n"  # not twice


def test_other_ranks_keep_warnings_only(monkeypatch, caplog) -> None:
    monkeypatch.setenv("RANK", "1")
    with caplog.at_level(logging.DEBUG, logger="accelkit"):
        logger.info("accelkit: info from rank 1")
        logger.warning("accelkit: warning from rank 1")
    assert [r.getMessage() for r in caplog.records] == ["accelkit: warning from rank 1"]


@pytest.mark.parametrize(
    ("value", "level", "valid"),
    [
        (None, logging.INFO, False),
        ("", logging.INFO, False),
        ("DEBUG", logging.DEBUG, True),
        (" warning ", logging.WARNING, True),
        ("error", logging.ERROR, True),
        ("5", 5, True),
        ("loud", logging.INFO, False),
        ("-1", logging.INFO, False),
    ],
)
def test_log_level_variable(value, level, valid) -> None:
    found, note, was_set = environment.log_level(
        {} if value is None else {"ACCELKIT_LOG_LEVEL": value}
    )
    assert (found, was_set) == (level, valid)
    assert bool(note) == (value not in (None, "") and not valid)
    if note:
        assert "ACCELKIT_LOG_LEVEL" in note and "debug, info, warning" in note


@pytest.mark.parametrize(
    ("value", "expected"),
    [("DEBUG", "10"), ("loud", "20"), ("\u00b2", "20")],  # a superscript two: faults4 E09
)
def test_log_level_at_import(value, expected) -> None:
    code = "import logging, accelkit; print(logging.getLogger('accelkit').level)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env={"ACCELKIT_LOG_LEVEL": value, "PATH": ""},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
    assert ("is not valid" in done.stderr) == (expected == "20")


def test_progress_is_redrawn_in_place_on_a_terminal(monkeypatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert log.live_terminal()
    logger.info("accelkit: step 10", extra={log.PROGRESS: True})
    logger.info("accelkit: step 20", extra={log.PROGRESS: True})
    logger.warning("accelkit: something")  # ends the line first
    logger.info("accelkit: step 30", extra={log.PROGRESS: True})
    log.end_progress_line()
    log.end_progress_line()  # nothing open: nothing written
    assert terminal.getvalue() == (
        "\raccelkit: step 10\x1b[K\raccelkit: step 20\x1b[K\naccelkit: something\n"
        "\raccelkit: step 30\x1b[K\n"
    )


@pytest.mark.torch
def test_a_torch_fits_progress_line_arrives_as_log_records(caplog) -> None:
    pytest.importorskip("torch")
    from tests.helpers.torch_data import train

    with caplog.at_level(logging.INFO, logger="accelkit"):
        train(progress=True, window=8, epochs=1)
    progress = [r for r in caplog.records if getattr(r, log.PROGRESS, False)]
    assert progress and progress[0].levelno == logging.INFO
    assert progress[0].getMessage().startswith("accelkit: step 11/32 ")  # 3 warm-up + 8, of 32


def _prints(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
    ]


def test_only_the_cli_prints() -> None:
    found = {
        str(p.relative_to(SRC)): _prints(p)
        for p in SRC.rglob("*.py")
        if "cli" not in p.relative_to(SRC).parts
    }
    assert {path: lines for path, lines in found.items() if lines} == {}
