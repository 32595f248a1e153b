"""`RunReport` is data: it saves whole to JSON, loads back equal, and says what it is."""

from __future__ import annotations

import json
import math
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.profiling.run_report import SCHEMA, RunReport
from accelkit.profiling.tuning import Trial, TuneResult
from accelkit.report.render import render_run


def _report(**figures) -> RunReport:
    return RunReport(
        framework="torch", model="m", device="cpu", precision="fp32", matmul_dtype="fp32", **figures
    )


def test_a_saved_report_loads_back_equal(tmp_path) -> None:
    report = _report(
        samples_per_second=12.5,
        steps=10,
        facts={"layers": [{"name": "fc"}]},
        advice=[{"id": "input_bound"}],
    )
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


@pytest.mark.parametrize(
    ("rank", "writes"),
    [
        (None, True),
        ("0", True),
        (" 0 ", True),
        ("", True),
        ("not-a-rank", True),
        ("1", False),
    ],
)
def test_only_the_process_that_speaks_for_the_run_saves(
    tmp_path, monkeypatch, rank, writes
) -> None:
    # One rank rule for the package (accelkit.hardware.environment.rank): unset, empty or
    # not an integer is a process alone, rank 0.
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    assert _report().save(tmp_path / "run.json") is writes
    assert (tmp_path / "run.json").exists() is writes
    assert _report().save(tmp_path / "every.json", every_rank=True) is True


def test_a_save_is_whole_or_nothing_and_leaves_no_temporary_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "run.json"
    _report(steps=1).save(path)
    before = path.read_text()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("accelkit.profiling.run_report.os.replace", disk_full)
    with pytest.raises(OSError, match="No space left"):
        _report(steps=2).save(path)
    assert path.read_text() == before and RunReport.load(path).steps == 1
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_numpy_values_and_non_finite_figures_save_as_strict_json(tmp_path) -> None:
    np = pytest.importorskip("numpy")
    report = _report(
        samples_per_second=float("nan"),
        step_time_s=np.float32(0.5),
        facts={np.int64(3): np.int64(7), "scale": [np.float64("inf"), 2.0]},
    )
    report.save(tmp_path / "run.json")
    text = (tmp_path / "run.json").read_text()
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert data["samples_per_second"] is None and data["step_time_s"] == 0.5
    assert data["facts"] == {"3": 7, "scale": [None, 2.0]}
    assert "samples_per_second" in data["notes"]["saved"]
    assert "facts.scale[0]" in data["notes"]["saved"]


def test_a_skipped_save_says_so(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv("RANK", "1")
    with caplog.at_level("INFO", logger="accelkit"):
        assert _report().save(tmp_path / "run.json") is False
    assert "not saved" in caplog.text and "rank 1" in caplog.text


finite_or_not = st.floats(allow_nan=True, allow_infinity=True)


@settings(max_examples=60, deadline=None)
@given(
    losses=st.lists(finite_or_not, max_size=4),
    eval_losses=st.lists(finite_or_not, max_size=3),
    history=st.dictionaries(st.sampled_from(["loss", "accuracy"]), st.lists(finite_or_not)),
)
def test_a_report_with_non_finite_losses_loads_back(
    tmp_path_factory, losses, eval_losses, history
) -> None:
    """Issue 25 D10: save writes NaN and infinity as null; load reads what save wrote."""
    path = tmp_path_factory.mktemp("diverged") / "run.json"
    _report(losses=losses, eval_losses=eval_losses, history=history).save(path)
    loaded = RunReport.load(path)

    def same(saved: list[float], read: list[float]) -> bool:
        return len(saved) == len(read) and all(
            a == b or not (math.isfinite(a) or math.isfinite(b))
            for a, b in zip(saved, read, strict=True)
        )

    assert same(losses, loaded.losses) and same(eval_losses, loaded.eval_losses)
    assert history.keys() == loaded.history.keys()
    assert all(same(history[key], loaded.history[key]) for key in history)


def test_a_save_keeps_the_mode_and_refuses_a_fifo(tmp_path) -> None:
    """Issue 25 D11: the umask's mode for a new report, the old mode for a replaced one,
    and an error rather than a regular file in place of a FIFO."""
    saved = os.umask(0o022)
    try:
        _report().save(tmp_path / "new.json")
        shared = tmp_path / "shared.json"
        shared.write_text("{}")
        shared.chmod(0o664)
        _report().save(shared)
    finally:
        os.umask(saved)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644
    assert stat.S_IMODE(shared.stat().st_mode) == 0o664
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        _report().save(tmp_path / "fifo")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)


def test_a_tuned_report_with_non_finite_figures_loads_and_renders(tmp_path) -> None:
    """Issue 25 D10, inside ``tuning``: the nulls save wrote load back, and render."""
    nan = float("nan")
    trial = Trial(name="eager", settings={}, status="baseline", step_seconds=nan, spread=[nan, 1.0])
    tuning = TuneResult("kept", (trial,), compile=False, optimizer="default", seconds=nan, steps=3)
    _report(tuning=tuning.to_dict()).save(tmp_path / "run.json")
    loaded = RunReport.load(tmp_path / "run.json")
    assert math.isnan(loaded.tuning["seconds"])
    assert math.isnan(loaded.tuning["candidates"][0]["spread"][0])
    assert loaded.tuning["candidates"][0]["step_seconds"] is None  # optional: null is null
    assert "tuning: kept" in render_run(loaded, width=100)
