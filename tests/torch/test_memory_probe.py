"""The memory model's figures for the model at hand (torch/measuring/memory_probe.py): the
optimizer named, the measured first step turned into activations, the prediction for the
run's layout and the planner's choice (CPU: the measurement itself needs CUDA and is in
test_memory_probe_gpu.py; here the probe carries figures as a measurement would)."""

from __future__ import annotations

import types

import pytest

import accelkit
from accelkit.planning.memory import per_param
from accelkit.planning.types import Framework, Optimizer, Precision

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from accelkit.torch.measuring.memory_probe import (
    ActivationProbe,
    TrialsPeak,
    memory_facts,
    optimizer_kind,
)
from accelkit.torch.tuning import registry

from ..helpers.compiling import compiled_as
from ..helpers.torch_data import CPU_PLAN, batches, mlp

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


class Allocator:
    """The caching allocator's peak counter, as plain data: `use(n)` allocates up to `n`."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.resets = 0

    def use(self, held: int) -> None:
        self.now = held
        self.peak = max(self.peak, held)

    def max_memory_allocated(self, device: object) -> int:
        return self.peak

    def reset_peak_memory_stats(self, device: object) -> None:
        self.peak, self.resets = self.now, self.resets + 1


def on_cuda(allocator: Allocator) -> TrialsPeak:
    fake = types.SimpleNamespace(cuda=allocator)
    return TrialsPeak(fake, types.SimpleNamespace(type="cuda"))


def test_the_trials_peak_is_taken_at_the_first_step_after_them() -> None:
    """Before: a tuned run's peak memory was its trials' (a Llama-3.2-1B on an H100:
    82.3 GB, the CUDA graphs' trial, beside a kept compiled step of about 46 GB)."""
    allocator = Allocator()
    peak = on_cuda(allocator)
    for held in (46 * GB, 82 * GB, 50 * GB):  # the trial steps: compile, graphs, float8
        peak.trial_step()
        peak.step_begin()
        allocator.use(held)
    allocator.use(20 * GB)  # between steps: the state and what the step keeps
    peak.step_begin()  # the first step after the trials
    assert peak.bytes == 82 * GB and allocator.resets == 1
    allocator.use(46 * GB)
    peak.step_begin()
    assert peak.bytes == 82 * GB and allocator.resets == 1  # once
    assert allocator.max_memory_allocated(None) == 46 * GB  # the kept step's


def test_without_trials_or_off_cuda_the_peak_is_left_alone() -> None:
    allocator = Allocator()
    untuned = on_cuda(allocator)
    for _ in range(3):
        untuned.step_begin()
    assert untuned.bytes is None and allocator.resets == 0
    on_cpu = TrialsPeak(torch, torch.device("cpu"))
    on_cpu.trial_step()
    on_cpu.step_begin()
    on_cpu.step_begin()
    assert on_cpu.bytes is None


def test_a_tuned_fit_takes_the_trials_peak_once_when_they_end(monkeypatch) -> None:
    taken: list[int] = []
    model = mlp(256, 128, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    counted = optimizer.register_step_post_hook(lambda *_: taken.append(0))
    monkeypatch.setattr(TrialsPeak, "_take", lambda self: taken.append(1))
    steps = registry.trial_steps(1, cuda=False) + 6
    with compiled_as():
        report = accelkit.torch.fit(
            model, batches(steps), optimizer, torch.nn.CrossEntropyLoss(), plan=CPU_PLAN,
            progress=False, tune=True,
        )  # fmt: skip
    counted.remove()
    trial_steps = report.tuning["steps"]
    assert report.tuning["decision"] == "tuned" and trial_steps < steps
    assert taken.index(1) == trial_steps and taken.count(1) == 1  # before the first step after
