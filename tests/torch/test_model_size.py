"""accelkit.torch.fit lays out the model it holds when its plan was made without the
model's size (torch/training/model_size.py), on this CPU in one process: what-if GPU
plans as plain data, layouts that keep one process (DDP's plan alone, no process group).
The fits that shard (FSDP2 in a process group of their own) run in a subprocess:
tests/distributed/test_torch_fit_model_size.py."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import accelkit
from accelkit.configure import set_current_plan
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Distribution, Plan, Request, plan
from accelkit.planning.keys import Key

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

import accelkit.torch
from accelkit.torch.training import model_size
from accelkit.torch.training.model_size import plan_with_model


def small_gpus(memory_bytes: int, count: int = 2) -> HardwareInfo:
    """`count` H100s of `memory_bytes` each: a model of a few MB does not fit one whole."""
    hardware = accelkit.what_if("H100", count)
    gpus = tuple(dataclasses.replace(gpu, memory_bytes=memory_bytes) for gpu in hardware.gpus)
    return dataclasses.replace(hardware, gpus=gpus)


def net(width: int = 512) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU()) for _ in range(4)]
    return torch.nn.Sequential(torch.nn.Linear(16, width), *blocks, torch.nn.Linear(width, 4))


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def fit(model: torch.nn.Module, plan: Plan | None, optimizer=None):
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-3)
    return accelkit.torch.fit(
        model,
        loader,
        optimizer,
        torch.nn.CrossEntropyLoss(),
        plan=plan,
        progress=False,
        tune=False,
    )


def test_a_model_too_big_for_the_gpus_whole_gets_an_fsdp2_plan() -> None:
    model = net()
    without = plan(small_gpus(1_020_000_000))  # 18 MB usable; the model's state is 17 MB
    assert without.distribution is Distribution.DDP
    sized, note = plan_with_model(without, model, torch.optim.AdamW(model.parameters()))
    assert sized.distribution is Distribution.FSDP and sized.value(Key.SHARDING) == "fsdp2"
    assert sized.memory.params == count(model) and sized.memory.optimizer == "adamw"
    assert f"planned from the model's {count(model):,} parameters" in note
    assert "fsdp2 (distribution fsdp" in note


def test_a_fit_given_a_gpu_plan_without_a_size_plans_from_the_model_and_says_so() -> None:
    model = net()
    report = fit(model, plan(accelkit.what_if("H100", 2)))  # fits: DDP's plan, alone here
    assert f"planned from the model's {count(model):,} parameters" in report.notes["layout"]
    assert report.facts["memory_choice"] == "ddp"
    assert report.plan["memory"]["params"] == count(model)
    assert report.plan["distribution"] == "ddp"
    assert "sharding" not in report.facts  # trained whole, as the estimate says
    assert report.steps == 4


def test_the_current_plan_is_planned_from_the_model_too() -> None:
    set_current_plan(plan(accelkit.what_if("H100", 2)))  # the conftest restores it
    report = fit(net(), None)
    assert "planned from the model's" in report.notes["layout"]


def test_a_plan_with_an_estimate_is_followed_as_it_is() -> None:
    given = plan(accelkit.what_if("H100", 2), Request(params=1e8))
    report = fit(net(), given)
    assert "layout" not in report.notes
    assert report.plan["memory"]["params"] == 100_000_000
    assert report.facts["memory_choice"] == "ddp"


def test_an_unapplied_current_plan_trains_as_the_script_is() -> None:
    accelkit.auto_configure(
        framework="torch", hardware=accelkit.what_if("H100", 2), dry_run=True, verbose=False
    )
    report = fit(net(), None)
    assert "layout" not in report.notes and report.plan["memory"] is None


def test_an_optimizer_the_memory_model_does_not_know_is_counted_as_adamw() -> None:
    model = net()
    report = fit(model, plan(accelkit.what_if("H100", 2)), torch.optim.RMSprop(model.parameters()))
    assert "RMSprop is unknown to the memory model, counted as adamw" in report.notes["layout"]
    assert report.plan["memory"]["optimizer"] == "adamw"


def test_frozen_weights_are_counted_in_their_dtype() -> None:
    model = net()
    model[1].requires_grad_(False)
    model[1].bfloat16()
    trainable = [p for p in model.parameters() if p.requires_grad]
    sized, note = plan_with_model(
        plan(accelkit.what_if("H100", 2)), model, torch.optim.SGD(trainable)
    )
    frozen = sum(p.numel() for p in model[1].parameters())
    assert sized.memory.trainable_params == count(model) - frozen
    assert "the frozen ones in bf16" in note and sized.memory.optimizer == "sgd"


def test_a_failure_to_plan_leaves_the_plan_as_it_was_and_the_fit_trains(
    monkeypatch, caplog
) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("cannot count this model")

    monkeypatch.setattr(model_size, "model_request", broken)
    given = plan(accelkit.what_if("H100", 2))
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        report = fit(net(), given)
    assert report.steps == 4 and report.plan["memory"] is None
    assert "not planned from the model (RuntimeError: cannot count" in report.notes["layout"]
    assert any("cannot count this model" in r.getMessage() for r in caplog.records)


def test_a_cpu_plan_is_not_planned_from_the_model() -> None:
    cpu = plan(accelkit.what_if(None))
    model = net()
    assert plan_with_model(cpu, model, torch.optim.AdamW(model.parameters())) == (cpu, "")
