"""accelkit's one logger, ``logging.getLogger("accelkit")``, and how it reaches a terminal.

accelkit speaks only through this logger (the CLI alone prints). `setup`, called once
by ``import accelkit``, gives it:

- a level: INFO, or ``ACCELKIT_LOG_LEVEL`` (read by `accelkit.hardware.environment`);
  ``logging.getLogger("accelkit").setLevel(logging.WARNING)`` silences the chatter;
- a rank filter: under a launcher, INFO and DEBUG come from rank 0 only (warnings and
  errors from every rank, which name their rank where it matters);
- a default handler, as Lightning and transformers give their library loggers, so that
  what users saw before (the plan table, the live progress line) still shows with no
  logging configured. It writes to ``sys.stderr`` as it is at each record, the bare
  message, and steps aside for a record that a console handler on the root logger
  (``logging.basicConfig()``) shows already. Records still propagate, so an
  application's handlers (and pytest's ``caplog``) receive them all.

The live progress line is a record with ``extra={PROGRESS: progress}``, a `Progress`:
on a terminal the default handler fits it to the terminal's width at each redraw
(dropping the least important fields first), draws it over the last one (``\\r``, then
clear to the end of the line; no newline) and ends the line before the next record;
elsewhere, and in every other handler, it is an ordinary line with every field.

This module imports nothing of accelkit: the rank rule is handed to `setup`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import sys
from collections.abc import Callable

NAME = "accelkit"
PROGRESS = "accelkit_progress"  # the `extra` key of a live progress record
# The `extra` key of an INFO record every rank should say (about its own rank).
EVERY_RANK = "accelkit_every_rank"
# ANSI "erase to end of line" after a redraw. Windows' classic console prints escapes as
# text, so there the line is padded with spaces over the last one instead.
_CLEAR = "" if os.name == "nt" else "\x1b[K"

logger = logging.getLogger(NAME)


class RankZeroFilter(logging.Filter):
    """Lets INFO and DEBUG through on rank 0 only (unless marked `EVERY_RANK`); warnings
    and errors on every rank.

    Args:
        is_rank_zero: asked at each record (the launcher's variables may be set late).

    Example:
        >>> RankZeroFilter(lambda: False).filter(logging.makeLogRecord({"levelno": 20}))
        False
    """

    def __init__(self, is_rank_zero: Callable[[], bool]) -> None:
        super().__init__()
        self._is_rank_zero = is_rank_zero

    def filter(self, record: logging.LogRecord) -> bool:
        return (
            record.levelno >= logging.WARNING
            or getattr(record, EVERY_RANK, False)
            or self._is_rank_zero()
        )


class ConsoleHandler(logging.Handler):
    """accelkit's default handler: the bare message on the current ``sys.stderr``; a
    progress record redrawn in place on a terminal.

    Example:
        >>> logging.getLogger("accelkit").info("shown on stderr with no logging configured")
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))
        self._open_line: object = None  # the stream whose progress line is not ended
        self._open_width = 0  # that line's length, to blank what a shorter one leaves

    def emit(self, record: logging.LogRecord) -> None:
        if _console_taken(record.levelno):
            return
        try:
            stream = sys.stderr
            text = self.format(record)
            progress = getattr(record, PROGRESS, None)
            if progress and _is_terminal(stream):
                columns = terminal_columns(stream)
                text = progress.fit(columns) if isinstance(progress, Progress) else text
                text = text[: columns - 1]  # the last column would wrap on some terminals
                shown = self._open_width if self._open_line is stream else 0
                stream.write(_redraw(text, min(shown, columns - 1)))
                self._open_line, self._open_width = stream, len(text)
            else:
                self._end_line()
                stream.write(text + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's contract: report, never raise
            self.handleError(record)

    def end_line(self) -> None:
        """End an open progress line (a newline), so the next output starts clean."""
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            self._end_line()

    def live(self) -> bool:
        """True when a progress record would be redrawn in place: this handler shows it
        and stderr is a terminal."""
        return not _console_taken(logging.INFO) and _is_terminal(sys.stderr)

    def _end_line(self) -> None:
        stream, self._open_line = self._open_line, None
        if stream is not None and stream is sys.stderr:
            stream.write("\n")
            stream.flush()


def setup(
    is_rank_zero: Callable[[], bool],
    level: int = logging.INFO,
    note: str = "",
    level_set: bool = False,
) -> None:
    """Give the accelkit logger its rank filter, default handler and level (idempotent).

    Args:
        is_rank_zero: the one rank rule (`accelkit.hardware.environment.is_rank_zero`).
        level: the level to use where the user set none.
        note: why ``ACCELKIT_LOG_LEVEL`` was not used, logged as a warning.
        level_set: the level comes from the user (``ACCELKIT_LOG_LEVEL``): applied even
            over a level set on the logger before.

    Example:
        >>> setup(lambda: True, logging.DEBUG, level_set=True)
    """
    if not any(isinstance(f, RankZeroFilter) for f in logger.filters):
        logger.addFilter(RankZeroFilter(is_rank_zero))
    handler = default_handler()
    if handler is None:
        handler = ConsoleHandler()
        handler.addFilter(RankZeroFilter(is_rank_zero))  # records of child loggers too
        logger.addHandler(handler)
    if level_set or logger.level == logging.NOTSET:
        logger.setLevel(level)
    if note:
        logger.warning("accelkit: %s", note)


def default_handler() -> ConsoleHandler | None:
    """The handler `setup` installed, or None (removed by the application)."""
    return next((h for h in logger.handlers if isinstance(h, ConsoleHandler)), None)


def live_terminal() -> bool:
    """True when a progress record is redrawn in place on a terminal, so it may come as
    often as it changes; False when it becomes a line of a log (then say it seldom).

    Example:
        >>> live_terminal()  # under pytest, stderr is captured
        False
    """
    handler = default_handler()
    return handler is not None and handler.live()


def end_progress_line() -> None:
    """End the live progress line on a terminal, if one is open.

    Example:
        >>> end_progress_line()  # after the fit, before the report prints
    """
    handler = default_handler()
    if handler is not None:
        handler.end_line()


@dataclasses.dataclass(frozen=True)
class Progress:
    """What the live progress line says; `fit` shortens it to a terminal's width.

    Attributes:
        step: steps done.
        total: the run's length in steps, where known (then the share and the time left
            are shown).
        samples_per_s: throughput of the last window.
        step_s: step time of the last window.
        elapsed_s: time since the run started.
        loss: the last training loss read (None: none yet).

    Example:
        >>> progress = Progress(120, 600, 1234.5, 0.0123, 34.2, loss=0.4321)
        >>> len(str(progress))  # every field, as a log file gets it
        98
        >>> progress.fit(80)
        'accelkit: step 120/600 (20%)  loss 0.4321  1,234.5 samples/s  ETA 0:06'
        >>> progress.fit(40)
        'step 120/600  loss 0.4321  ETA 0:06'
    """

    step: int
    total: int | None
    samples_per_s: float
    step_s: float
    elapsed_s: float
    loss: float | None = None

    def __str__(self) -> str:
        return _joined(self._fields())

    def fit(self, columns: int) -> str:
        """The line for a terminal `columns` wide: at most ``columns - 1`` characters (a
        full row wraps on some terminals), the least important fields dropped first
        (`_DROPPED_FIRST`), then cut.

        Raises:
            ValueError: `columns` is below 1.
        """
        if columns < 1:
            raise ValueError(f"columns={columns} must be >= 1 (a terminal's width)")
        fields = self._fields()
        for name in _DROPPED_FIRST:
            if len(_joined(fields)) < columns:
                break
            fields = [field for field in fields if field[0] != name]
        return _joined(fields)[: columns - 1]

    def _fields(self) -> list[tuple[str, str, str]]:
        """(name, separator before it, text) in the order shown."""
        fields = [("name", "", "accelkit:"), ("step", " ", f"step {self.step}")]
        if self.total:
            fields[1] = ("step", " ", f"step {self.step}/{self.total}")
            fields.append(("share", " ", f"({min(self.step / self.total, 1.0):.0%})"))
        if self.loss is not None:
            fields.append(("loss", "  ", f"loss {self.loss:.4g}"))
        fields += [
            ("samples/s", "  ", f"{self.samples_per_s:,.1f} samples/s"),
            ("ms/step", "  ", f"{self.step_s * 1e3:.1f} ms/step"),
            ("elapsed", "  ", f"{clock(self.elapsed_s)} elapsed"),
        ]
        if self.total:
            left = max(self.total - self.step, 0) * self.step_s
            fields.append(("eta", "  ", f"ETA {clock(left)}"))
        return fields


# The fields a narrow terminal loses, least important first: the step count stays.
_DROPPED_FIRST = ("elapsed", "ms/step", "share", "name", "samples/s", "eta", "loss")


def progress_text(
    step: int,
    total: int | None,
    samples_per_s: float,
    step_s: float,
    elapsed_s: float,
    loss: float | None = None,
    columns: int | None = None,
) -> str:
    """The progress line as a terminal `columns` wide shows it (None: the width of the
    terminal on stderr, 80 when there is none): step (of `total` with its share, when
    known), loss, throughput, step time, time elapsed and, with `total`, the time left
    at `step_s` a step, the least important dropped first where the width is short
    (`Progress.fit`).

    Example:
        >>> progress_text(120, 600, 1234.5, 0.0123, 34.2, columns=100)
        'accelkit: step 120/600 (20%)  1,234.5 samples/s  12.3 ms/step  0:34 elapsed  ETA 0:06'
    """
    progress = Progress(step, total, samples_per_s, step_s, elapsed_s, loss)
    return progress.fit(terminal_columns(sys.stderr) if columns is None else columns)


def terminal_columns(stream: object) -> int:
    """The width of the terminal `stream` writes to, read at each call (it may be resized):
    the stream's own terminal, else ``shutil.get_terminal_size()`` (``COLUMNS``, else
    stdout's terminal, else 80).

    Example:
        >>> terminal_columns(None) >= 1
        True
    """
    try:
        columns = os.get_terminal_size(stream.fileno()).columns  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # no file descriptor, or not a terminal
        columns = 0
    return columns if columns > 0 else max(shutil.get_terminal_size().columns, 1)


def clock(seconds: float) -> str:
    """Seconds as a clock reads them: m:ss, or h:mm:ss from an hour.

    Example:
        >>> clock(65), clock(3725)
        ('1:05', '1:02:05')
    """
    if not math.isfinite(seconds):
        return "?:??"
    whole = max(round(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _joined(fields: list[tuple[str, str, str]]) -> str:
    return "".join(sep + text if i else text for i, (_, sep, text) in enumerate(fields))


def _redraw(text: str, shown: int) -> str:
    """`text` over the line on screen: back to its start, then clear what is left of a
    longer line (or, without the escape, spaces over its `shown` characters)."""
    return f"\r{text}{_CLEAR}" if _CLEAR else f"\r{text.ljust(shown)}"


def _console_taken(levelno: int) -> bool:
    """True when a handler on the root logger writes this record to the console already."""
    consoles = {
        id(s) for s in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__) if s is not None
    }
    return any(
        type(h) is logging.StreamHandler and id(h.stream) in consoles and h.level <= levelno
        for h in logging.getLogger().handlers
    )


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
