"""The bounds on tune's trials that the docs and `accelkit.torch.tune`'s docstring state
are the registry's (`accelkit.torch.tuning.registry.trial_units`): case E14 found the
docs promising at most 50 optimizer steps where the trials took up to 76, and a lever
added to the registry without its count would make every table wrong again."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("torch")

from accelkit.torch import fitting
from accelkit.torch.tuning import registry

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _table(path: Path, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line that starts with `heading`."""
    text = path.read_text(encoding="utf-8")
    after = text[text.index(heading) :]
    table = after[after.index("\n|") :].split("\n\n", 1)[0]
    rows = [line.strip("|").split("|") for line in table.strip().splitlines()]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # no header, no rule


def _fit_scope(label: str) -> dict[str, bool]:
    """`trial_steps`' arguments for a row of profiling.md's table ("GPU under DDP, SDPA
    candidate")."""
    return {
        "cuda": label.startswith("GPU"),
        "data_parallel": "under DDP" in label,
        "attention": "SDPA" in label,
        "float8": "float8" in label,
    }


def test_profiling_table_is_the_fits_bound() -> None:
    rows = _table(DOCS / "profiling.md", "How many steps the trials take at most")
    assert len(rows) >= 8
    for label, candidates, steps in rows:
        arguments = _fit_scope(label)
        assert registry.trial_steps(1, **arguments) == int(steps), label
        units = 6 + 18 * (int(candidates) - 1)
        assert units == int(steps), f"{label}: {candidates} candidates are {units} units"


def test_integrations_table_is_the_trainers_bound() -> None:
    rows = {row[0]: row[1:] for row in _table(DOCS / "integrations.md", "The trials take at most")}
    lightning = 2  # kinds of code compiled in turn: the training_step, then the children's
    for codes, column in ((1, 0), (lightning, 1)):
        for label, scopes in (
            ("CPU (DDP or not)", [{"cuda": False}, {"cuda": False, "under_ddp": True}]),
            ("GPU", [{}]),
            ("GPUs under DDP", [{"under_ddp": True}]),
        ):
            for scope in scopes:
                bound = registry.trial_units(registry.Scope(compile_codes=codes, **scope))
                assert bound == int(rows[label][column]), (label, column)
        gpu = registry.trial_units(registry.Scope(compile_codes=codes))
        for label, lever in (
            ("with the SDPA candidate", "attention"),
            ("with the float8 candidate", "float8"),
        ):
            more = registry.trial_units(registry.Scope(compile_codes=codes, **{lever: True})) - gpu
            assert rows[label][column] == f"{more} more", (label, column)


@pytest.mark.parametrize("where", ["docstring", "profiling.md"])
def test_tune_docstring_and_docs_state_the_fits_bound(where: str) -> None:
    source = (
        inspect.getdoc(fitting.tune)
        if where == "docstring"
        else (DOCS / "profiling.md").read_text(encoding="utf-8")
    )
    text = " ".join(str(source).split())
    steps = registry.trial_steps
    stated = (
        f"{steps(1, cuda=False)} on the CPU, {steps(1)} on a GPU, "
        f"{steps(1, cuda=False, data_parallel=True)} on the CPU and "
        f"{steps(1, data_parallel=True)} on a GPU under DDP, and "
        f"{steps(1, attention=True) - steps(1)} more each for the SDPA and the float8 "
    )
    assert stated in text
    assert steps(1, float8=True) - steps(1) == steps(1, attention=True) - steps(1)


@given(
    cuda=st.booleans(),
    under_ddp=st.booleans(),
    ddp_levers=st.booleans(),
    compile_codes=st.integers(0, 3),
    attention=st.booleans(),
    float8=st.booleans(),
)
def test_every_lever_counts_its_candidates(**fields: bool | int) -> None:
    scope = registry.Scope(**fields)  # type: ignore[arg-type]
    counts = [entry.most(scope) for entry in registry.LEVERS]
    assert all(isinstance(n, int) and n >= 0 for n in counts)
    assert registry.trial_units(scope) == 6 + 18 * sum(counts)
    # A run with a lever's condition is never bounded below the same run without it.
    for field in ("cuda", "ddp_levers", "attention", "float8"):
        more = registry.trial_units(dataclasses.replace(scope, **{field: True}))
        assert more >= registry.trial_units(dataclasses.replace(scope, **{field: False}))
