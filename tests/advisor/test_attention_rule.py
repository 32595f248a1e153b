"""The `sdpa_attention` rule: a transformers model trained with eager attention where
SDPA is available, the lever a run left unused (not tuned / dropped by tune's check /
timed faster but not kept), quiet where tune kept it or timed it no faster; plain data,
then a real fit of an eager GPT-2."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import what_if
from accelkit.advisor import Severity
from accelkit.advisor.context import Context
from accelkit.advisor.rules.attention import sdpa_attention
from accelkit.hardware.info import HardwareInfo

from .helpers import measured_on

H200 = what_if("H200")
CPU = HardwareInfo(source="cpu")
EAGER_GPT2 = [{"model": "GPT2LMHeadModel", "implementation": "eager", "sdpa": True}]


def candidate(name: str, status: str, step: float | None, **extra: Any) -> dict[str, Any]:
    settings = {"compile": False, "optimizer": "default", **extra.pop("settings", {})}
    return {"name": name, "settings": settings, "status": status, "step_seconds": step,
            "spread": None if step is None else [step * 0.98, step * 1.02], "steps": 10,
            **extra}  # fmt: skip


BASELINE = candidate("eager", "baseline", 0.040)
SDPA = {"attention": "sdpa"}


def tuned(*candidates: dict[str, Any], decision: str = "tuned") -> dict[str, Any]:
    return {"decision": decision, "seconds": 9.0, "steps": 30,
            "candidates": [BASELINE, *candidates]}  # fmt: skip


def verdict(attention: Any = EAGER_GPT2, tuning: Any = None, hardware: Any = H200, **m: Any):
    figures = measured_on(hardware, facts={"attention": attention}, **m)
    if tuning is not None:
        figures["tuning"] = tuning
    return sdpa_attention(Context.build(hardware, None, figures))


def test_not_tuned_names_the_lever_with_the_code_and_no_gain() -> None:
    found = verdict()
    assert found is not None and found.severity is Severity.INFO and found.speedup is None
    assert "GPT2LMHeadModel trained with eager attention" in found.title
    assert "tune did not run" in found.title and found.evidence["tune"] == "not run"
    assert "set_attn_implementation('sdpa')" in found.action
    assert "attn_implementation='sdpa'" in found.action and "tune=True" in found.action
    assert found.expected_gain.startswith("not measured")


def test_a_decision_not_to_tune_is_said() -> None:
    found = verdict(tuning=tuned(decision="not tuned: tune='auto' tunes GPU runs"))
    assert "tune did not try SDPA (not tuned: tune='auto'" in found.title
    assert found.evidence["tune.decision"].startswith("not tuned")


@pytest.mark.parametrize(
    "trial",
    [
        candidate("eager+sdpa", "chosen", 0.030, settings=SDPA, why="1.33x eager"),
        candidate("eager+sdpa", "slower", 0.0399, settings=SDPA, why="not clearly faster"),
    ],
)
def test_quiet_where_tune_kept_it_or_timed_it_no_faster(trial: dict[str, Any]) -> None:
    assert verdict(tuning=tuned(trial)) is None


@pytest.mark.parametrize(
    "attention",
    [
        [{"model": "GPT2LMHeadModel", "implementation": "sdpa", "sdpa": True}],
        [{"model": "BertModel", "implementation": "flash_attention_2", "sdpa": True}],
        [{"model": "GPT2LMHeadModel", "implementation": "eager", "sdpa": False, "why": "-"}],
        [],
        "garbled",
    ],
)
def test_quiet_for_models_that_do_not_run_eager_or_cannot_switch(attention: Any) -> None:
    assert verdict(attention) is None


def test_quiet_for_keras() -> None:
    assert verdict(framework="tensorflow") is None


def test_dropped_by_the_check_gives_its_figure_and_no_gain() -> None:
    check = {"loss_difference": 0.05, "loss_limit": 0.02, "failed": "loss"}
    trial = candidate("eager+sdpa", "failed", None, settings=SDPA, why="loss differs",
                      check=check)  # fmt: skip
    found = verdict(tuning=tuned(trial))
    assert "dropped in tune's 'eager+sdpa' trial" in found.title
    assert "loss check against the eager attention: loss 5% > 2%" in found.title
    assert found.evidence["tune.check.loss_difference"] == 0.05 and found.speedup is None
    assert found.expected_gain.startswith("not measured")


def test_a_trial_the_data_ended_before_is_not_tried() -> None:
    trial = candidate("eager+sdpa", "skipped", None, settings=SDPA,
                      why="the data ended before this candidate's turn")  # fmt: skip
    found = verdict(tuning=tuned(trial))
    assert "tune did not time SDPA (the data ended before" in found.title
    assert found.speedup is None and found.expected_gain.startswith("not measured")


def test_timed_faster_but_not_kept_gives_the_measured_ratio() -> None:
    trial = candidate("eager+sdpa", "skipped", 0.020, settings=SDPA,
                      why="the data ended after 4 of its steps")  # fmt: skip
    found = verdict(tuning=tuned(trial))
    assert found.speedup == pytest.approx(2.0) and found.severity is Severity.WARNING
    assert "measured 2.00x: 40.00 ms baseline / 20.00 ms 'eager+sdpa'" in found.expected_gain


def test_a_real_fit_of_an_eager_gpt2_without_tune_gets_the_verdict() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import accelkit

    from ..helpers.torch_data import CPU_PLAN
    from ..helpers.transformers_models import gpt2, lm_batches

    model = gpt2(layers=1, dim=32, heads=2, vocab=128, context=16)
    model.set_attn_implementation("eager")
    data = lm_batches(n=6, batch=2, length=16, vocab=128)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    report = accelkit.torch.fit(model, data, optimizer, None, plan=CPU_PLAN, progress=False)
    assert report.facts["attention"] == EAGER_GPT2
    assert "sdpa_attention" in [advice["id"] for advice in report.advice]
    model.set_attn_implementation("sdpa")  # on SDPA: nothing to say
    report = accelkit.torch.fit(model, data, optimizer, None, plan=CPU_PLAN, progress=False)
    assert "sdpa_attention" not in [advice["id"] for advice in report.advice]


_ENTRIES = st.lists(
    st.fixed_dictionaries(
        {
            "model": st.sampled_from(["GPT2LMHeadModel", "BertModel"]),
            "implementation": st.sampled_from(["eager", "sdpa", "flash_attention_2", None]),
            "sdpa": st.booleans(),
        }
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    entries=_ENTRIES,
    status=st.one_of(st.none(), st.sampled_from(["chosen", "slower", "failed", "skipped"])),
    step=st.one_of(st.none(), st.floats(0.001, 0.1)),
)
def test_the_rule_fires_only_for_an_unused_lever_and_claims_only_a_measured_gain(
    entries: list[dict[str, Any]], status: str | None, step: float | None
) -> None:
    trial = None if status is None else candidate("eager+sdpa", status, step, settings=SDPA)
    found = verdict(entries, tuning=None if trial is None else tuned(trial))
    switchable = any(e["implementation"] == "eager" and e["sdpa"] for e in entries)
    timed_faster = status == "skipped" and step is not None and step < BASELINE["step_seconds"]
    untimed = status == "skipped" and step is None  # the data ended before its turn
    fires = switchable and (status in (None, "failed") or timed_faster or untimed)
    assert (found is not None) is fires
    if found is not None:
        assert (found.speedup is not None) is timed_faster
        assert found.expected_gain.startswith("measured") is timed_faster
