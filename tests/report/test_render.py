"""The terminal tables: every setting with its reason and outcome, a run's figures."""

from __future__ import annotations

from accelkit.hardware.what_if import what_if
from accelkit.planning import Request, plan
from accelkit.profiling.run_report import RunReport
from accelkit.report.render import render_plan, render_run


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
