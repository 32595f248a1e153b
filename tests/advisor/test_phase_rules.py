"""The phase rules on plain data: evaluation, and the rest of the run (epoch boundaries,
checkpoints, callbacks), when either takes a large share of the run's wall time."""

from __future__ import annotations

import pytest

from accelkit import what_if
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import RULES, phases
from accelkit.hardware.info import HardwareInfo

from .helpers import ids, measured_on

CPU = HardwareInfo(source="cpu", cpu_count=8)
H200 = what_if("H200")


def _run(hardware=CPU, *, evaluation=0.0, other=0.0, run=100.0, **figures):
    """A run of `run` seconds with `evaluation` and `other` seconds outside training."""
    return measured_on(
        hardware,
        run_seconds=run,
        training_seconds=run - evaluation - other,
        evaluation_seconds=evaluation,
        other_seconds=other,
        evaluation_share=evaluation / run,
        **figures,
    )


def _ctx(m) -> Context:
    return Context.build(None, None, m)


def test_both_rules_are_registered() -> None:
    assert phases.evaluation_time in RULES and phases.other_time in RULES


def test_evaluation_over_a_fifth_of_the_run_gives_its_share_seconds_and_gain() -> None:
    found = phases.evaluation_time(_ctx(_run(evaluation=37.0, other=3.0)))
    assert found.id == "evaluation_time" and found.severity is Severity.INFO
    assert found.title.startswith("evaluation takes 37% of the run (37.0 of 100.0 s)")
    assert "evaluate less often or on fewer batches" in found.title
    assert found.evidence == {
        "run_s": 100.0,
        "training_s": 60.0,
        "evaluation_s": 37.0,
        "evaluation_share": 0.37,
    }
    assert found.speedup == pytest.approx(1 / (1 - 0.37 / 2))
    assert "the run's wall time (not the step's)" in found.expected_gain
    assert "1.59x if none of it were left" in found.expected_gain


def test_evaluation_per_evaluation_where_the_door_kept_each_one_s_loss() -> None:
    m = _run(evaluation=36.0, eval_losses=[0.9, 0.7, 0.6])
    found = phases.evaluation_time(_ctx(m))
    assert found.evidence["evaluations"] == 3 and found.evidence["per_evaluation_s"] == 12.0


@pytest.mark.parametrize(
    ("framework", "levers"),
    [
        (
            "torch",
            [
                "val_check_interval",
                "limit_val_batches",
                "eval_steps",
                "eval_strategy",
                "max_eval_samples",
                "eval_loader",
                "your own loop",
            ],
        ),
        ("tensorflow", ["validation_freq=", "validation_steps=", "validation_batch_size"]),
    ],
)
def test_the_evaluation_action_names_each_trainer_s_levers(framework, levers) -> None:
    found = phases.evaluation_time(_ctx(_run(evaluation=30.0, framework=framework)))
    assert all(lever in found.action for lever in levers), found.action


def test_half_the_run_or_more_is_a_warning() -> None:
    assert phases.evaluation_time(_ctx(_run(evaluation=50.0))).severity is Severity.WARNING
    assert phases.other_time(_ctx(_run(other=70.0))).severity is Severity.WARNING


@pytest.mark.parametrize(
    ("evaluation", "run"),
    [
        (20.0, 100.0),  # a fifth exactly: not more than one
        (12.0, 100.0),
        (0.0, 100.0),  # a run that does not evaluate
        (4.0, 10.0),  # 40%, but 4 s: a short test run
    ],
)
def test_evaluation_that_is_small_or_short_gets_no_verdict(evaluation, run) -> None:
    assert phases.evaluation_time(_ctx(_run(evaluation=evaluation, run=run))) is None
    assert "evaluation_time" not in ids(advise(None, None, _run(evaluation=evaluation, run=run)))


def test_a_report_saved_before_the_phases_gets_neither_verdict() -> None:
    old = measured_on(CPU, facts={"run_seconds": 500.0}, step_time_s=0.1)
    found = ids(advise(None, None, old))
    assert "evaluation_time" not in found and "other_time" not in found


def test_the_rest_of_the_run_says_per_epoch_cost_and_restarting_workers_first() -> None:
    loader = {"type": "DataLoader", "num_workers": 4, "persistent_workers": False}
    m = _run(other=30.0, epochs=10, facts={"loader": loader})
    found = phases.other_time(_ctx(m))
    assert found.id == "other_time" and found.severity is Severity.INFO
    assert found.title.startswith("epoch boundaries, checkpoints and callbacks take 30%")
    assert found.evidence["other_s"] == 30.0 and found.evidence["other_share"] == 0.3
    assert found.evidence["epochs"] == 10 and found.evidence["other_per_epoch_s"] == 3.0
    assert found.evidence["loader.num_workers"] == 4
    first = found.action.splitlines()[0]
    assert "persistent_workers=True" in first and "4 workers start again" in first
    assert "dataloader_persistent_workers=True" in first
    for lever in ("every_n_train_steps", "save_steps", "torch.save"):
        assert lever in found.action


def test_persistent_workers_are_not_asked_for_twice() -> None:
    loader = {"type": "DataLoader", "num_workers": 4, "persistent_workers": True}
    found = phases.other_time(_ctx(_run(other=30.0, facts={"loader": loader})))
    assert "persistent_workers=True" not in found.action
    unseen = phases.other_time(_ctx(_run(other=30.0)))
    assert "the loader's settings were not recorded" in unseen.action


def test_the_rest_of_a_keras_run_names_its_epochs_and_checkpoints() -> None:
    found = phases.other_time(_ctx(_run(other=40.0, framework="tensorflow")))
    for lever in ("steps_per_epoch=", "dataset.repeat()", "ModelCheckpoint(save_freq="):
        assert lever in found.action
    assert "DataLoader" not in found.action


@pytest.mark.parametrize(("other", "run"), [(20.0, 100.0), (3.0, 10.0), (0.0, 100.0)])
def test_the_rest_of_the_run_that_is_small_or_short_gets_no_verdict(other, run) -> None:
    assert phases.other_time(_ctx(_run(other=other, run=run))) is None


def test_ranked_by_the_run_time_they_save_against_the_step_rules() -> None:
    # 37% evaluation, halved: 1.23x the run. A 10% input wait (at most 1.11x) follows it;
    # a 50% one (up to 2x the step) leads.
    light = advise(H200, None, _run(H200, evaluation=37.0, input_wait_share=0.10))
    assert ids(light).index("evaluation_time") < ids(light).index("input_bound")
    heavy = advise(H200, None, _run(H200, evaluation=37.0, input_wait_share=0.50))
    assert ids(heavy).index("input_bound") < ids(heavy).index("evaluation_time")


def test_an_info_verdict_on_evaluation_leaves_the_low_mfu_pointer() -> None:
    # MFU is of the training steps alone: evaluating less often does not explain it.
    m = _run(H200, evaluation=30.0, mfu=0.1, precision="bf16", matmul_dtype="bf16")
    found = ids(advise(H200, None, m))
    assert "evaluation_time" in found and "low_mfu" in found
