"""`advise`: ranking, the Advice record, and advice attached to every RunReport."""

from __future__ import annotations

import json

import pytest

from accelkit import what_if
from accelkit.advisor import Advice, Severity, advise, rank
from accelkit.advisor.rules import RULES
from accelkit.profiling.run_report import RunReport
from accelkit.report.assemble import with_advice

from .helpers import ids, measured_on


def item(id_: str, severity: str, speedup=None) -> Advice:
    return Advice(id_, Severity(severity), id_, {}, "", None, speedup)


def test_rank_critical_then_gain_then_severity_then_no_gain() -> None:
    found = rank(
        [
            item("info_no_gain", "info"),
            item("warning_no_gain", "warning"),
            item("small_gain", "info", 1.1),
            item("big_gain", "warning", 3.0),
            item("critical", "critical"),
            item("tie_warning", "warning", 1.1),
        ]
    )
    assert ids(found) == [
        "critical",
        "big_gain",
        "tie_warning",
        "small_gain",
        "warning_no_gain",
        "info_no_gain",
    ]


def test_advice_round_trips_through_json() -> None:
    advice = Advice(
        "input_bound", Severity.WARNING, "t", {"input_wait_share": 0.3}, "do", "up to 1.43x", 1.43
    )
    assert Advice.from_dict(json.loads(json.dumps(advice.to_dict()))) == advice


def test_every_rule_says_how_its_gain_was_estimated() -> None:
    """Where a rule gives a speed-up, its expected_gain names the numbers it used."""
    a100 = what_if("A100-SXM4-80GB", 2)
    m = measured_on(
        a100,
        matmul_dtype="fp32",
        mfu=0.3,
        input_wait_share=0.3,
        gpu_utilization=50.0,
        step_time_s=0.004,
        peak_memory_bytes=int(10e9),
        facts={
            "batch_size": 30,
            "keras_policy": "mixed_float16",
            "keras_layers_off_policy": [{"name": "d", "type": "Dense", "compute_dtype": "float32"}],
            "layers": [
                {"name": "fc", "type": "Linear", "dims": {"in_features": 100, "out_features": 100}}
            ],
        },
    )
    found = advise(a100, None, m)
    assert {
        "input_bound",
        "precision",
        "memory_headroom",
        "alignment",
        "idle_gpus",
        "keras_policy",
    } <= set(ids(found))
    for advice in found:
        assert advice.evidence, advice.id
        assert advice.action, advice.id
        if advice.speedup is not None:
            assert advice.expected_gain and any(c.isdigit() for c in advice.expected_gain)


def test_custom_rules_replace_the_registry() -> None:
    def always(ctx):
        return item("custom", "info")

    assert ids(advise(None, None, {}, rules=[always], fallback=[])) == ["custom"]
    assert len(RULES) >= 10


def test_a_failing_advisor_leaves_a_note_not_an_error(monkeypatch) -> None:
    report = RunReport(
        framework="torch",
        model="m",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        input_wait_share=0.4,
    )

    def broken(ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr("accelkit.advisor.rules.RULES", [broken])
    monkeypatch.setattr("accelkit.advisor.RULES", [broken])
    with_advice(report)
    assert report.advice == [] and "boom" in report.notes["advice"]


def test_report_renders_evidence_action_and_gain() -> None:
    report = RunReport(
        framework="torch",
        model="m",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        input_wait_share=0.4,
        step_time_s=0.01,
        facts={"loader": {"type": "DataLoader", "num_workers": 0}},
    )
    with_advice(report)
    text = str(report)
    assert "advice:\n  1. [warning] input-bound: 40% of step time" in text
    assert "evidence: input_wait_share=0.4, step_time_ms=10" in text
    assert "do: DataLoader(dataset, batch_size=..., num_workers=" in text
    assert "gain: up to 1.67x: 1 / (1 - 0.400)" in text


def test_saved_report_keeps_facts_and_advice(tmp_path) -> None:
    report = RunReport(
        framework="torch",
        model="m",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        input_wait_share=0.4,
        facts={"batch_size": 32, "layers": []},
    )
    with_advice(report)
    path = tmp_path / "run.json"
    report.save(path)
    loaded = RunReport.load(path)
    assert loaded.facts == report.facts and loaded.advice == report.advice
    assert loaded.advice[0]["id"] == "input_bound"


@pytest.mark.parametrize("plan_given", [False, True])
def test_report_advise_uses_its_own_or_a_what_if_plan(plan_given) -> None:
    from accelkit import plan_for

    report = RunReport(
        framework="torch", model="m", device="cpu", precision="fp32", matmul_dtype="fp32"
    )
    found = advise(None, plan_for("Tesla T4", precision="fp32") if plan_given else None, report)
    assert ("precision" in ids(found)) is plan_given
