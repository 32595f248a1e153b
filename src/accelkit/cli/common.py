"""What the subcommands share: exit codes, argument types, JSON output and `--help` pages
that end with examples."""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from accelkit.hardware.what_if import MAX_GPUS, check_count
from accelkit.planning import Framework, Precision

EXIT_UNKNOWN_GPU = 1
EXIT_USAGE = 2
JSON_HELP = "print one JSON document on stdout, nothing else (messages go to stderr)"


def add_command(
    commands: Any, name: str, summary: str, examples: Sequence[str], description: str = ""
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` starts with `summary` (and `description`) and ends
    with `examples`, one command line each.

    Example:
        >>> import argparse
        >>> commands = argparse.ArgumentParser(prog="accelkit").add_subparsers()
        >>> specs = add_command(commands, "specs", "the GPU datasheet table", ["accelkit specs"])
        >>> print(specs.format_help())  # doctest: +ELLIPSIS
        usage: accelkit specs [-h]
        <BLANKLINE>
        The GPU datasheet table.
        ...
        examples:
          accelkit specs
        <BLANKLINE>
    """
    return commands.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}."
        + (f"\n\n{description}" if description else ""),
        epilog=examples_text(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def examples_text(examples: Sequence[str]) -> str:
    """An epilog: 'examples:' then each command line indented."""
    return "examples:\n" + "\n".join(f"  {line}" for line in examples)


def add_framework(parser: argparse.ArgumentParser, what: str, auto: str | None) -> None:
    """`--framework`: the frameworks accelkit plans for, `what` it is for; with `auto`
    (what auto means, for the help) when given, else defaulting to torch."""
    default = Framework.AUTO if auto else Framework.TORCH
    parser.add_argument(
        "--framework",
        choices=values(Framework, leave_out=[] if auto else [Framework.AUTO]),
        default=default.value,
        help=f"{what} (default: {default.value}{f', {auto}' if auto else ''})",
    )


def add_precision(parser: argparse.ArgumentParser) -> None:
    """`--precision`: one of `Precision`, auto by default."""
    parser.add_argument(
        "--precision",
        choices=values(Precision),
        default=Precision.AUTO.value,
        help="mixed or full precision (default: auto, the best the GPU generation runs well)",
    )


def values(choices: Iterable[Any], leave_out: Iterable[Any] = ()) -> list[str]:
    """The values of a string enum (`Precision`, `Framework`), as `choices`."""
    skipped = set(leave_out)
    return [member.value for member in choices if member not in skipped]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def gpu_count(text: str, maximum: int, what: str) -> int:
    """`text` as a GPU count from 1 to `maximum`; a ValueError naming the range."""
    try:
        count = int(text)
    except ValueError:
        count = None  # check_count names the valid range
    return check_count(text if count is None else count, maximum, what)


def gpu_target(text: str, option: str = "--project") -> tuple[str, int]:
    """A ``NAME[:COUNT]`` argument as (name, count); the count 1 to `MAX_GPUS`, 1 when
    left out. A ValueError names the option and the valid range.

    Example:
        >>> gpu_target("H200:8"), gpu_target("A100-SXM4-80GB")
        (('H200', 8), ('A100-SXM4-80GB', 1))
    """
    name, _, count = text.rpartition(":") if ":" in text else (text, "", "1")
    return name, gpu_count(count, MAX_GPUS, f"{option} {text!r}: COUNT")


def planned_gpus(text: str) -> int:
    """``--count``: 1 to `MAX_GPUS`, as `accelkit.plan_for` takes (several servers where
    one of the model's holds fewer); an argparse error naming the range otherwise."""
    try:
        return gpu_count(text, MAX_GPUS, "--count")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def emit_json(document: Any) -> None:
    json.dump(document, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def write_what_it_encodes(stream: TextIO) -> None:
    r"""Make `stream` write a character its encoding lacks as an escape (``R\xe9seau``
    on an ASCII stdout: ``PYTHONIOENCODING=ascii``, ``LC_ALL=C``) rather than fail.

    A UnicodeEncodeError is a ValueError: it would end the command as "bad arguments",
    with nothing printed. Streams that are not text files (`io.StringIO`) and streams
    that already replace what they cannot encode are left as they are.

    Example:
        >>> stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
        >>> write_what_it_encodes(stream)
        >>> stream.write("Réseau"); stream.flush(); stream.buffer.getvalue()
        6
        b'R\\xe9seau'
    """
    if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape"):
        stream.reconfigure(errors="backslashreplace")
