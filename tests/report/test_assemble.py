"""`accelkit.report.assemble`: the figures from profiling, then the advice on them."""

from __future__ import annotations

from accelkit.hardware.what_if import what_if
from accelkit.planning import Request, plan
from accelkit.profiling.run_report import RunReport
from accelkit.report import assemble

T4_FP32 = plan(what_if("Tesla T4"), Request(precision="fp32"))


def _input_bound() -> RunReport:
    return RunReport(
        framework="torch",
        model="m",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        input_wait_share=0.6,
        step_time_s=0.1,
        samples_per_second=10.0,
        steady_steps=20,
        steady_seconds=2.0,
    )


def test_with_advice_puts_the_advisors_verdicts_in_the_report() -> None:
    report = assemble.with_advice(_input_bound())
    assert report.advice and report.advice[0]["id"] == "input_bound"
    assert "advice" not in report.notes


def test_with_advice_for_a_what_if_plan_advises_for_that_plan() -> None:
    plain = assemble.with_advice(_input_bound())
    what_if_t4 = assemble.with_advice(_input_bound(), plan=T4_FP32)
    assert "precision" in {a["id"] for a in what_if_t4.advice}
    assert "precision" not in {a["id"] for a in plain.advice}


def test_a_failing_advisor_leaves_a_note_never_an_error(monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a rule divided by zero")

    monkeypatch.setattr(assemble, "advise", broken)
    report = assemble.with_advice(_input_bound())
    assert report.advice == []
    assert "ZeroDivisionError: a rule divided by zero" in report.notes["advice"]
