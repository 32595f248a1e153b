"""The memory model's figures for the model at hand (torch/measuring/memory_probe.py): the
optimizer named, the measured first step turned into activations, the prediction for the
run's layout and the planner's choice (CPU: the measurement itself needs CUDA and is in
test_memory_probe_gpu.py; here the probe carries figures as a measurement would)."""

from __future__ import annotations

import pytest

import accelkit
from accelkit.planning.memory import per_param
from accelkit.planning.types import Framework, Optimizer, Precision

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from accelkit.torch.measuring.memory_probe import ActivationProbe, memory_facts, optimizer_kind

GB = 10**9


def _params() -> list:
    return list(torch.nn.Linear(8, 8).parameters())


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (torch.optim.AdamW, Optimizer.ADAMW),
        (lambda p: torch.optim.Adam(p, fused=False), Optimizer.ADAM),
        (lambda p: torch.optim.SGD(p, lr=0.1), Optimizer.SGD),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), Optimizer.SGD_MOMENTUM),
        (torch.optim.RMSprop, None),
    ],
)
def test_optimizers_are_named_as_the_memory_model_counts_them(make, kind) -> None:
    assert optimizer_kind(make(_params())) is kind


def test_the_trainers_optimizer_wrappers_are_looked_through() -> None:
    lightning = pytest.importorskip("lightning.pytorch.core.optimizer")
    inner = torch.optim.SGD(_params(), lr=0.1, momentum=0.9)
    assert optimizer_kind(lightning.LightningOptimizer(inner)) is Optimizer.SGD_MOMENTUM


def _measured(rise: int, gradient_bytes: int) -> ActivationProbe:
    """A probe holding what a CUDA first step would have measured."""
    probe = ActivationProbe(torch, torch.device("cpu"), None)
    probe.rise, probe.gradient_bytes = rise, gradient_bytes
    return probe


def _model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1000, 1000), torch.nn.Linear(1000, 10))
    return model, torch.optim.AdamW(model.parameters(), foreach=True)


def test_the_prediction_holds_the_measured_pass_beside_the_state() -> None:
    """What one GPU holds is at least the weights and optimizer state (kept across the
    step) plus the first step's measured rise: the prediction never drops a measured byte."""
    model, optimizer = _model_and_optimizer()
    params = sum(p.numel() for p in model.parameters())
    sizes = per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH)
    rise = 3 * GB
    plan = accelkit.plan_for("H100 SXM")
    facts = memory_facts(_measured(rise, 4 * params), model, optimizer, plan)
    kept = params * (sizes.weights + sizes.optimizer)
    assert facts["predicted_memory_bytes"] == kept + rise
    assert facts["activation_bytes"] == rise - 4 * params - 2 * params
    assert facts["memory_choice"] == "none"
    assert f"{params:,} parameters" in facts["memory_estimate"]


def test_measured_activations_that_do_not_fit_change_the_choice() -> None:
    model, optimizer = _model_and_optimizer()
    plan = accelkit.plan_for("H100 SXM")  # 80 GB
    facts = memory_facts(_measured(200 * GB, 0), model, optimizer, plan)
    assert facts["memory_choice"] == "none+checkpointing"
    assert facts["predicted_memory_bytes"] > 80 * GB  # this layout, as measured, does not fit


def test_an_optimizer_the_model_does_not_know_is_said_not_estimated() -> None:
    model, _ = _model_and_optimizer()
    rmsprop = torch.optim.RMSprop(model.parameters())
    facts = memory_facts(_measured(GB, 0), model, rmsprop, accelkit.plan_for("H100 SXM"))
    assert set(facts) == {"memory_estimate"}
    assert "RMSprop" in facts["memory_estimate"] and "adamw" in facts["memory_estimate"]


def test_a_meter_without_an_optimizer_says_so_not_that_none_is_unknown() -> None:
    model, _ = _model_and_optimizer()
    facts = memory_facts(_measured(GB, 0), model, None, accelkit.plan_for("H100 SXM"))
    assert set(facts) == {"memory_estimate"}
    assert "no optimizer was given" in facts["memory_estimate"]
    assert "NoneType" not in facts["memory_estimate"]


def test_a_checkpointing_model_gets_a_prediction_and_no_second_choice() -> None:
    model, optimizer = _model_and_optimizer()
    model.is_gradient_checkpointing = True  # as a transformers model says it
    facts = memory_facts(_measured(GB, 0), model, optimizer, accelkit.plan_for("H100 SXM"))
    assert "predicted_memory_bytes" in facts and "memory_choice" not in facts
    assert "checkpointing" in facts["memory_estimate"]


def test_a_cpu_run_measures_no_activations_and_says_nothing_of_them() -> None:
    model, optimizer = _model_and_optimizer()
    data = [(torch.randn(4, 1000), torch.randint(0, 10, (4,)))] * 3
    report = accelkit.torch.fit(
        model, data, optimizer, torch.nn.CrossEntropyLoss(), progress=False, tune=False
    )
    assert "activation_bytes" not in report.facts and "activation_bytes" not in report.notes
    assert report.steps == 3
