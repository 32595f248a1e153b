"""`RunReport` is data: it saves whole to JSON, loads back equal, and says what it is."""

from __future__ import annotations

import json

import pytest

from accelkit.profiling.run_report import SCHEMA, RunReport


def _report(**figures) -> RunReport:
    return RunReport(framework="torch", model="m", device="cpu", precision="fp32",
                     matmul_dtype="fp32", **figures)


def test_a_saved_report_loads_back_equal(tmp_path) -> None:
    report = _report(samples_per_second=12.5, steps=10, facts={"layers": [{"name": "fc"}]},
                     advice=[{"id": "input_bound"}])
    report.note("mfu", "no GPU")
    assert report.save(tmp_path / "run.json") is True
    loaded = RunReport.load(tmp_path / "run.json")
    assert loaded == report
    assert json.loads((tmp_path / "run.json").read_text())["schema"] == SCHEMA


def test_notes_accumulate_per_field() -> None:
    report = _report()
    report.note("mfu", "no GPU")
    report.note("mfu", "no FLOP count")
    assert report.notes["mfu"] == "no GPU; no FLOP count"


def test_a_file_that_is_not_a_report_is_refused(tmp_path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"schema": "something/1"}))
    with pytest.raises(ValueError, match="not an accelkit run report"):
        RunReport.load(path)


def test_unknown_keys_of_a_newer_report_are_ignored() -> None:
    data = {**_report(steps=3).to_dict(), "a_future_field": 1}
    assert RunReport.from_dict(data).steps == 3


@pytest.mark.parametrize(("rank", "writes"), [
    (None, True), ("0", True), (" 0 ", True), ("", True), ("not-a-rank", True), ("1", False),
])
def test_only_the_process_that_speaks_for_the_run_saves(tmp_path, monkeypatch, rank,
                                                        writes) -> None:
    # One rank rule for the package (accelkit.hardware.environment.rank): unset, empty or
    # not an integer is a process alone, rank 0.
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    assert _report().save(tmp_path / "run.json") is writes
    assert (tmp_path / "run.json").exists() is writes
    assert _report().save(tmp_path / "every.json", every_rank=True) is True
