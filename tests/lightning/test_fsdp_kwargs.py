"""trainer_kwargs under an FSDP2 plan: Lightning's real FSDPStrategy, built from the plan."""

from __future__ import annotations

import dataclasses

import pytest

import accelkit
from accelkit.planning.keys import Key
from accelkit.planning.types import Distribution, Setting

torch = pytest.importorskip("torch")
pytest.importorskip("lightning")

from accelkit.lightning import trainer_kwargs

pytestmark = pytest.mark.torch


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return x + self.linear(x)


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), *[Block() for _ in range(3)])


def _sharded(gpu: str, checkpointing: bool, offload: bool = False):
    plan = accelkit.plan_for(gpu, count=8)
    extra = (
        Setting(Key.SHARDING, "fsdp2", "test"),
        Setting(Key.ACTIVATION_CHECKPOINTING, checkpointing, "test"),
        Setting(Key.CPU_OFFLOAD, offload, "test"),
    )
    return dataclasses.replace(
        plan, distribution=Distribution.FSDP, settings=(*plan.settings, *extra)
    )


def test_an_fsdp_plan_gives_fsdp_strategy_wrapping_and_checkpointing_the_blocks() -> None:
    from lightning.pytorch.strategies import FSDPStrategy

    kwargs = trainer_kwargs(_sharded("H100 SXM", checkpointing=True), model=_model())
    strategy = kwargs["strategy"]
    assert isinstance(strategy, FSDPStrategy)
    assert kwargs["precision"] == "bf16-mixed" and kwargs["devices"] == 8
    policy = strategy.mixed_precision
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert strategy.kwargs["auto_wrap_policy"]._module_classes == {Block}
    assert strategy._activation_checkpointing_kwargs["auto_wrap_policy"]._module_classes == {Block}
    assert strategy.cpu_offload.offload_params is False


def test_no_checkpointing_and_offload_as_the_plan_says() -> None:
    kwargs = trainer_kwargs(_sharded("H100 SXM", checkpointing=False, offload=True), _model())
    strategy = kwargs["strategy"]
    assert not strategy._activation_checkpointing_kwargs
    assert strategy.cpu_offload.offload_params is True


def test_an_fsdp_plan_without_the_model_is_refused_saying_what_to_pass() -> None:
    with pytest.raises(ValueError, match=r"model=your_lightning_module"):
        trainer_kwargs(_sharded("H100 SXM", checkpointing=False))


def test_plans_without_fsdp_are_unchanged() -> None:
    assert trainer_kwargs(accelkit.plan_for("H100 SXM"), model=_model())["strategy"] == "auto"


@pytest.mark.gpu
def test_the_trainer_takes_the_fsdp_kwargs() -> None:
    import lightning

    kwargs = trainer_kwargs(_sharded("H100 SXM", checkpointing=True), model=_model())
    kwargs["devices"] = 1
    trainer = lightning.Trainer(**kwargs, logger=False, enable_checkpointing=False)
    assert trainer.strategy is kwargs["strategy"]


def test_a_model_too_large_for_a_replica_is_sharded_where_the_plan_had_no_size() -> None:
    from lightning.pytorch.strategies import FSDPStrategy

    with torch.device("meta"):  # 8.05e9 parameters, counted, never allocated
        large = torch.nn.Sequential(*(torch.nn.Linear(8192, 8192, bias=False) for _ in range(120)))
    eight = accelkit.plan_for("H100 SXM", count=8)  # auto_configure's kind: no model size
    assert trainer_kwargs(eight, model=_model())["strategy"] == "ddp"
    kwargs = trainer_kwargs(eight, model=large)
    assert isinstance(kwargs["strategy"], FSDPStrategy) and kwargs["devices"] == 8


def test_a_model_that_is_no_module_is_refused_naming_what_to_pass() -> None:
    with pytest.raises(TypeError, match=r"trainer_kwargs\(plan, model=...\): model must be"):
        trainer_kwargs(accelkit.plan_for("H100 SXM"), model=object())
