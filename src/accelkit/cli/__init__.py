"""The `accelkit` command: one module per subcommand over the public API.

With `--json`, stdout holds one JSON document and nothing else; messages go to stderr.
Tables fit the terminal (``COLUMNS`` first, else 100 columns off a terminal).
Exit codes: 0 success, 1 unknown GPU, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from accelkit import __version__
from accelkit.cli import bench, doctor, plan, report, specs
from accelkit.cli.common import (
    EXIT_UNKNOWN_GPU,
    EXIT_USAGE,
    examples_text,
    write_what_it_encodes,
)
from accelkit.hardware.what_if import UnknownGPUError

__all__ = ["EXIT_UNKNOWN_GPU", "EXIT_USAGE", "build_parser", "main"]

EXAMPLES = (
    "accelkit doctor",
    'accelkit plan --gpu "NVIDIA H200" --count 8',
    "accelkit specs --gpu l40s",
    "accelkit bench --model gpt --save run.json",
    "accelkit report run.json --html run.html",
    "accelkit COMMAND --help",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `accelkit` command with `argv` (default: the process's arguments).

    Returns:
        The exit code: 0 done, 1 unknown GPU, 2 bad arguments (argparse's own exit
        with 2 too, through SystemExit).

    Example:
        >>> main(["plan", "--gpu", "T4", "--json"])  # doctest: +ELLIPSIS
        {
          "framework": "torch",
          "precision": "fp16",
        ...
        0
    """
    write_what_it_encodes(sys.stdout)  # a model named Réseau, on an ASCII terminal
    args = build_parser().parse_args(argv)
    try:
        return int(args.command(args) or 0)
    except BrokenPipeError:  # `accelkit specs | head -1`: the reader left, nothing is wrong
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 0
    except UnknownGPUError as error:
        print(f"accelkit: {error}", file=sys.stderr)
        return EXIT_UNKNOWN_GPU
    except ValueError as error:
        print(f"accelkit: {error}", file=sys.stderr)
        return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    """The `accelkit` argument parser, one subparser per subcommand module."""
    parser = argparse.ArgumentParser(
        prog="accelkit",
        description="GPU-aware training settings and measurements.",
        epilog=examples_text(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"accelkit {__version__}")
    commands = parser.add_subparsers(
        dest="name",
        required=True,
        metavar="COMMAND",
        help="one of these; `accelkit COMMAND --help` shows its options and examples",
    )
    for command in (doctor, plan, specs, bench, report):
        command.add(commands)
    return parser
