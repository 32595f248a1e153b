"""Two runs compared: what changed in their set-up and what it did to the figures.

``accelkit.compare(base, new)`` and ``accelkit report --compare BASE.json NEW.json``:
the set-up items that differ (`changes`), every figure side by side with the spread of
each run's windows and a verdict beyond the runs' own noise or not (`figures`, which
states the rule), the advice that appeared or went away, and what cannot be compared.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from accelkit.profiling import report_schema
from accelkit.profiling.run_report import SCHEMA, RunReport
from accelkit.report.assemble import with_advice
from accelkit.report.comparison.changes import differences
from accelkit.report.comparison.figures import compare_figures, unknown_noise
from accelkit.report.comparison.types import (
    AdviceChange,
    Change,
    Comparison,
    FigureComparison,
    Verdict,
)

__all__ = [
    "AdviceChange",
    "Change",
    "Comparison",
    "FigureComparison",
    "Verdict",
    "compare",
    "load",
]

_SCHEMA_FAMILY = SCHEMA.rsplit("/", 1)[0] + "/"  # accelkit.run_report/


def compare(
    base: RunReport | str | os.PathLike[str], new: RunReport | str | os.PathLike[str]
) -> Comparison:
    """Compare the run `new` with the run `base`: set-up, figures, advice.

    Each figure gets a verdict (faster, slower, higher, lower, within noise) by the
    noise rule of `accelkit.report.comparison.figures`: a difference counts only where
    the runs' windows do not overlap and it is larger than the larger of their spreads.
    Reports of different frameworks, GPUs or schema versions are compared as far as
    they go; `Comparison.caveats` says what cannot be, and why.

    Args:
        base, new: `RunReport`s, or the paths of saved ones (`report.save`). A saved
            report is advised again by the current rules, as ``accelkit report`` does,
            so that a change of rules between versions does not read as a change of the
            run; a `RunReport` is compared with the advice it holds.

    Raises:
        OSError: a file cannot be read.
        ValueError: a file is not a run report, or a field is wrong (named).

    Example:
        >>> result = accelkit.compare("base.json", "new.json")  # doctest: +SKIP
        >>> result.figure("step_time_s").verdict  # doctest: +SKIP
        <Verdict.WITHIN_NOISE: 'within noise'>
    """
    base_run, base_name, base_notes = _report(base, "BASE")
    new_run, new_name, new_notes = _report(new, "NEW")
    before = {str(a.get("id")): str(a.get("title", "")) for a in base_run.advice}
    after = {str(a.get("id")): str(a.get("title", "")) for a in new_run.advice}
    return Comparison(
        base=base_name,
        new=new_name,
        changes=differences(base_run, new_run),
        figures=compare_figures(base_run, new_run),
        advice_appeared=tuple(AdviceChange(i, t) for i, t in after.items() if i not in before),
        advice_gone=tuple(AdviceChange(i, t) for i, t in before.items() if i not in after),
        caveats=(
            *base_notes,
            *new_notes,
            *_caveats(base_run, new_run),
            *unknown_noise(base_run, "BASE"),
            *unknown_noise(new_run, "NEW"),
        ),
    )


def load(path: str | os.PathLike[str]) -> tuple[RunReport, list[str]]:
    """The run report saved at `path`, checked field by field, and what reading it
    leaves out: a report of a later schema version is read as far as this version
    knows its fields (the others are left out, and said so).

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not a run report, or a field is wrong; names file and field.
    """
    data = report_schema.read_json(path)
    schema = data.get("schema") if isinstance(data, Mapping) else None
    if schema == SCHEMA or not (isinstance(schema, str) and schema.startswith(_SCHEMA_FAMILY)):
        return RunReport.load(path), []  # RunReport.load names what is wrong
    try:
        run = RunReport.from_dict(data)
    except ValueError as error:
        raise ValueError(f"{os.fspath(path)}: {error}") from None
    note = (
        f"{os.fspath(path)} is schema {schema!r}; this accelkit reads {SCHEMA!r}: the "
        "fields it does not know are not compared"
    )
    return run, [note]


def _report(run: RunReport | str | os.PathLike[str], role: str) -> tuple[RunReport, str, list[str]]:
    """The run, what to call it, and the caveats of reading it."""
    if isinstance(run, RunReport):
        return run, f"{run.model} ({run.framework}, {run.device})", []
    loaded, notes = load(run)
    with_advice(loaded)  # the current rules, as `accelkit report` gives them
    return loaded, os.fspath(run), [f"{role}: {note}" for note in notes]


def _caveats(base: RunReport, new: RunReport) -> list[str]:
    """What makes the figures of the two runs mean different things."""
    found = []
    if base.framework != new.framework:
        found.append(
            f"BASE ran {base.framework} and NEW {new.framework}: the figures are compared as "
            "measured, but FLOPs are counted by each framework's own counter"
        )
    if base.world_size != new.world_size:
        found.append(
            f"BASE ran on {base.world_size} device(s) and NEW on {new.world_size}: step "
            "time, samples/s and memory are per process; compare 'samples/s, all devices'"
        )
    if _gpu_names(base) != _gpu_names(new):
        found.append(
            "the runs had different GPUs (see hardware below): MFU is against each "
            "run's own peak, so MFU compares across them and step time does not"
        )
    if base.matmul_dtype != new.matmul_dtype and None not in (base.mfu, new.mfu):
        found.append(
            f"the matmuls ran in {base.matmul_dtype} in BASE and {new.matmul_dtype} in NEW: "
            "each MFU is against its own dtype's peak"
        )
    return found


def _gpu_names(run: RunReport) -> list[str]:
    gpus = run.hardware.get("gpus") or []
    return [str(gpu.get("name")) for gpu in gpus if isinstance(gpu, Mapping)]
