"""Issue 13: a fit reports what it trained, a meter counts each step once, and a plan
that auto_configure did not apply is not applied by the fit either."""

from __future__ import annotations

import logging

import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Plan, Request, plan

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from ..helpers.torch_data import CPU_PLAN, mlp, separable, train

A100 = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),), source="snapshot"
)


def cnn() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 2),
    )


def images(n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(8, 3, 8, 8, generator=generator), torch.randint(0, 2, (8,))) for _ in range(n)
    ]


def fit_cnn(model: torch.nn.Module, **kwargs) -> tuple[accelkit.RunReport, set]:
    """Fit `model` on images; returns the report and the output dtypes the loss saw."""
    seen = set()

    def loss_fn(outputs, targets):
        seen.add(outputs.dtype)
        return torch.nn.functional.cross_entropy(outputs, targets)

    report = accelkit.torch.fit(
        model,
        images(),
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn,
        device="cpu",
        progress=False,
        **kwargs,
    )
    return report, seen


def channels_last(model: torch.nn.Module) -> bool:
    weight = model[0].weight
    return weight.is_contiguous(memory_format=torch.channels_last) and not (weight.is_contiguous())


# -- item 8: a loader spent before the last epoch ------------------------------------------


def test_a_one_shot_generator_reports_the_epochs_it_trained(caplog) -> None:
    batches = (batch for batch in separable(n=256))  # 8 batches, once
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        report = train(loader=batches, epochs=3)
    assert report.epochs == 1 and len(report.losses) == 1 and report.steps == 8
    assert "epoch 2 of 3" in report.notes["epochs"]
    assert "one-shot" in report.notes["epochs"]
    assert any("epoch 2 of 3" in r.getMessage() for r in caplog.records)


def test_a_reiterable_loader_trains_every_epoch_without_a_note() -> None:
    report = train(loader=list(separable(n=128)), epochs=3)
    assert report.epochs == 3 and len(report.losses) == 3 and "epochs" not in report.notes


# -- item 9: Meter counts each step once ---------------------------------------------------


def test_a_nested_meter_step_counts_once(caplog) -> None:
    model = mlp(16, 4)
    meter = accelkit.torch.Meter(model, plan=CPU_PLAN, flops_per_step=1.0, warmup=1)
    batch = (torch.zeros(8, 16), torch.zeros(8))
    with caplog.at_level(logging.WARNING, logger="accelkit"), meter:
        for _ in range(5):
            with meter.step(batch), meter.step(batch):
                model(batch[0]).sum().backward()
    report = meter.report()
    assert report.steps == 5 and report.steady_steps == 4
    assert report.batch_size == 8
    assert "nested" in report.notes["steps"]
    assert sum("inside another" in r.getMessage() for r in caplog.records) == 1


def test_meter_steps_after_the_report_are_said_to_be_dropped(caplog) -> None:
    model = mlp(16, 4)
    meter = accelkit.torch.Meter(model, plan=CPU_PLAN, flops_per_step=1.0, warmup=1)
    batch = (torch.zeros(8, 16), torch.zeros(8))
    with meter:
        for _ in range(3):
            with meter.step(batch):
                model(batch[0]).sum().backward()
    report = meter.report()
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        for _ in range(2):
            with meter.step(batch):
                model(batch[0]).sum().backward()
    assert meter.report() is report and report.steps == 3
    assert "2 meter.step() call(s) after report()" in report.notes["steps"]
    assert sum("after meter.report()" in r.getMessage() for r in caplog.records) == 1


def test_an_error_inside_a_meter_step_leaves_the_next_step_measured() -> None:
    model = mlp(16, 4)
    meter = accelkit.torch.Meter(model, plan=CPU_PLAN, flops_per_step=1.0, warmup=0)
    batch = (torch.zeros(8, 16), torch.zeros(8))
    with meter:
        with pytest.raises(RuntimeError), meter.step(batch):
            raise RuntimeError("the user's step")
        for _ in range(2):
            with meter.step(batch):
                model(batch[0]).sum().backward()
    assert "steps" not in meter.report().notes


# -- item 10: an unapplied plan is not applied by the fit -----------------------------------


@pytest.mark.usefixtures("fresh_process")
def test_fit_after_a_dry_run_trains_in_float32_without_channels_last(caplog) -> None:
    accelkit.auto_configure(framework="torch", hardware=A100, dry_run=True, verbose=False)
    model = cnn()
    with caplog.at_level(logging.INFO, logger="accelkit"):
        report, seen = fit_cnn(model)
    assert seen == {torch.float32} and report.precision == "fp32"
    assert not channels_last(model)
    assert "not applied (dry run" in report.notes["precision"]
    assert report.plan["precision"] == "fp32"
    assert any("not applied" in r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("fresh_process")
def test_fit_under_accelkit_disable_does_not_autocast(monkeypatch) -> None:
    monkeypatch.setenv("ACCELKIT_DISABLE", "1")
    accelkit.configure.set_current_plan(None)  # the fit plans for itself
    model = cnn()
    report, seen = fit_cnn(model, plan=None)
    assert seen == {torch.float32} and not channels_last(model)
    assert "ACCELKIT_DISABLE=1" in report.notes["precision"]


@pytest.mark.usefixtures("fresh_process")
def test_an_explicit_plan_is_followed_even_after_a_dry_run() -> None:
    dry = accelkit.auto_configure(framework="torch", hardware=A100, dry_run=True, verbose=False)
    model = cnn()
    report, seen = fit_cnn(model, plan=dry)  # the user's choice: train under it
    assert seen == {torch.bfloat16} and report.precision == "bf16" and channels_last(model)
    _, seen = fit_cnn(cnn(), plan=accelkit.plan_for("A100-SXM4-80GB"))
    assert seen == {torch.bfloat16}


@pytest.mark.usefixtures("fresh_process")
def test_applying_a_dry_run_plan_makes_it_an_applied_one() -> None:
    dry = accelkit.auto_configure(framework="torch", hardware=A100, dry_run=True, verbose=False)
    assert dry.not_applied == "dry run: nothing applied"
    applied = accelkit.apply(dry)
    assert applied.not_applied == "" and accelkit.current_plan() is applied
    _, seen = fit_cnn(cnn())
    assert seen == {torch.bfloat16}


def test_an_unapplied_plan_round_trips_through_json() -> None:
    dry = plan(A100, Request()).as_unapplied("dry run: nothing applied")
    assert Plan.from_dict(dry.to_dict()).not_applied == "dry run: nothing applied"
    assert "not_applied" not in plan(A100, Request()).to_dict()


def test_the_report_states_the_in_place_changes_to_the_model() -> None:
    a100_plan = plan(A100, Request())
    report, _ = fit_cnn(cnn(), plan=a100_plan)
    changes = report.facts["model_changes"]
    assert len(changes) == 1 and "channels-last" in changes[0]
    report, _ = fit_cnn(cnn(), plan=CPU_PLAN)
    assert "model_changes" not in report.facts  # already on the CPU, layout kept


def test_channels_last_is_undone_when_the_fit_raises() -> None:
    model = cnn()

    def loss_fn(outputs, targets):
        raise KeyError("the user's loss")

    with pytest.raises(KeyError, match="the user's loss"):
        accelkit.torch.fit(
            model,
            images(),
            torch.optim.SGD(model.parameters(), lr=0.1),
            loss_fn,
            plan=plan(A100, Request()),
            device="cpu",
            progress=False,
        )
    assert model[0].weight.is_contiguous() and not channels_last(model)
