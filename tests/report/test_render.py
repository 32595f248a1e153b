"""The terminal tables: every setting with its reason and outcome, a run's figures."""

from __future__ import annotations

from accelkit.hardware.what_if import what_if
from accelkit.planning import Request, plan
from accelkit.profiling.run_report import RunReport
from accelkit.report.render import render_plan, render_run

from .helpers import saved_report


def test_a_plan_table_lists_every_setting_with_its_status() -> None:
    result = plan(what_if("A100-SXM4-80GB", 2), Request(framework="tensorflow"))
    text = render_plan(result)
    assert str(result) == text
    for setting in result.settings:
        assert setting.key.value in text
        assert setting.status.value in text


def test_a_run_table_shows_the_figures_and_why_one_is_missing() -> None:
    report = RunReport(
        framework="torch",
        model="TinyNet",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        samples_per_second=1234.5,
        steady_steps=10,
    )
    report.note("mfu", "no GPU: CPUs have no datasheet peak here")
    text = render_run(report)
    assert str(report) == text
    assert "TinyNet" in text and "1,234.5" in text


def test_only_a_true_interrupted_flag_reads_as_interrupted() -> None:
    # A report edited by hand ("no" is truthy) must not print INTERRUPTED.
    for flag, shown in ((True, True), (False, False), ("no", False), (None, False)):
        report = RunReport(
            framework="torch",
            model="m",
            device="cpu",
            precision="fp32",
            matmul_dtype="fp32",
            interrupted=flag,
        )
        assert ("INTERRUPTED" in render_run(report)) is shown


def _row(text: str, figure: str) -> str | None:
    """The value of the table's row for `figure`, or None when it has none."""
    rows = [line for line in text.splitlines() if line.startswith(f"{figure}  ")]
    return rows[0][len(figure) :].strip() if rows else None


def _timed(**phases) -> RunReport:
    return RunReport.from_dict({**saved_report(), **phases})


def test_the_run_s_time_is_shown_by_phase_beside_the_training_figures() -> None:
    report = _timed(
        run_seconds=120.0,
        training_seconds=80.1,
        evaluation_seconds=30.2,
        other_seconds=9.7,
        evaluation_share=30.2 / 120.0,
    )
    text = render_run(report, 120)
    assert _row(text, "time") == (
        "120.0 s = training 80.1 s (67%), evaluation 30.2 s (25%), other 9.7 s (8%)"
    )
    assert text.index("time ") < text.index("samples/s")


def test_a_phase_that_took_no_time_is_left_out_and_an_unknown_one_is_not_added_up() -> None:
    whole = _timed(run_seconds=10.0, training_seconds=10.0, evaluation_seconds=0.0, other_seconds=0)
    assert _row(render_run(whole, 100), "time") == "10.0 s = training 10.0 s (100%)"
    partial = _timed(run_seconds=10.0, evaluation_seconds=4.0)
    assert _row(render_run(partial, 100), "time") == "10.0 s of which evaluation 4.0 s (40%)"


def test_a_report_from_before_the_phases_has_no_time_line() -> None:
    text = render_run(_timed(facts={"run_seconds": 50.0}), 100)
    assert _row(text, "time") is None
    assert "training" not in text and "evaluation" not in text


def test_the_evaluation_losses_follow_the_training_losses() -> None:
    text = render_run(_timed(losses=[2.0, 1.5, 1.0], eval_losses=[1.8, 1.6, 1.3]), 100)
    assert _row(text, "loss") == "2 -> 1.5 -> 1"
    assert _row(text, "evaluation loss") == "1.8 -> 1.6 -> 1.3"
    assert _row(render_run(_timed(losses=[2.0]), 100), "evaluation loss") is None
