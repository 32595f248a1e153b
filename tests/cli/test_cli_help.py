"""`accelkit COMMAND --help` reads well: every option says what it is for, closed sets
are choices taken from their one definition, and each page ends with examples that
parse."""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex

import pytest

from accelkit import bench
from accelkit.cli import build_parser, main
from accelkit.planning import Framework, Precision


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"": parser, **sub.choices}


COMMANDS = _commands()
OPTIONS = [
    (name, action)
    for name, parser in COMMANDS.items()
    for action in parser._actions
    if not isinstance(action, argparse._SubParsersAction)
]
CHOICES = [(name, action) for name, action in OPTIONS if action.choices and action.option_strings]


def test_every_subcommand_of_the_design_is_there() -> None:
    assert {"doctor", "plan", "specs", "bench", "report"} <= set(COMMANDS)


@pytest.mark.parametrize(
    ("command", "action"), OPTIONS, ids=[f"{n or 'accelkit'} {a.dest}" for n, a in OPTIONS]
)
def test_every_option_has_help(command, action) -> None:
    assert action.help and action.help.strip() and action.help != argparse.SUPPRESS


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_help_page_ends_with_examples_that_parse(command) -> None:
    page = COMMANDS[command].format_help()
    head, _, examples = page.rpartition("\nexamples:\n")
    assert head and examples.strip(), page
    lines = examples.rstrip().splitlines()
    assert lines and all(line.startswith("  ") for line in lines)
    for line in lines:
        words = shlex.split(line)
        words = words[words.index("accelkit") + 1 :]  # after `accelkit` / `-m accelkit`
        for end in ("&&", ">", "|"):
            words = words[: words.index(end)] if end in words else words
        if words == ["COMMAND", "--help"]:
            continue
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(words)  # a SystemExit here fails the test
        if command:
            assert words[0] == command, line


def test_choices_come_from_their_one_definition() -> None:
    choices = {(n, a.dest): list(a.choices) for n, a in CHOICES}
    assert choices[("bench", "model")] == list(
        dict.fromkeys(bench.TORCH_MODELS + bench.KERAS_MODELS)
    )
    for command in ("doctor", "plan", "bench"):
        assert set(choices[(command, "framework")]) <= {f.value for f in Framework}
    for command in ("plan", "bench"):
        assert choices[(command, "precision")] == [p.value for p in Precision]


@pytest.mark.parametrize(
    ("command", "action"),
    CHOICES,
    ids=[f"{n} {a.option_strings[0]}" for n, a in CHOICES],
)
def test_a_bad_choice_exits_2_naming_the_valid_ones(command, action, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, action.option_strings[0], "no-such-value"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'no-such-value'" in error
    assert all(str(choice) in error for choice in action.choices)


def test_model_is_a_choice_and_no_longer_free_text(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--model", "resnet5", "--json"])
    assert exit_.value.code == 2
    assert "resnet50" in capsys.readouterr().err
