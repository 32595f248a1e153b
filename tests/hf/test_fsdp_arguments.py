"""training_arguments under an FSDP2 plan: the real TrainingArguments take them."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelkit
from accelkit.hf import training_arguments
from accelkit.planning.keys import Key
from accelkit.planning.types import Distribution, Setting

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.torch


def _sharded(checkpointing: bool, offload: bool = False):
    plan = accelkit.plan_for("H100 SXM", count=8)
    extra = (
        Setting(Key.SHARDING, "fsdp2", "test"),
        Setting(Key.ACTIVATION_CHECKPOINTING, checkpointing, "test"),
        Setting(Key.CPU_OFFLOAD, offload, "test"),
    )
    return dataclasses.replace(
        plan, distribution=Distribution.FSDP, settings=(*plan.settings, *extra)
    )


@pytest.mark.parametrize(("checkpointing", "offload"), [(True, False), (False, True)])
def test_training_arguments_take_the_fsdp2_settings(tmp_path, checkpointing, offload) -> None:
    fields = training_arguments(_sharded(checkpointing, offload))
    assert fields["bf16"] is True
    fields.update(bf16=False, tf32=None)  # this machine has no GPU: the rest as planned
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **fields)
    assert args.fsdp_plugin_args["fsdp_version"] == 2
    assert args.fsdp_plugin_args["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert args.fsdp_plugin_args["activation_checkpointing"] is checkpointing
    assert args.fsdp_plugin_args.get("cpu_offload", False) is offload
    assert args.fsdp_plugin_args["reshard_after_forward"] is True


def test_plans_without_fsdp_have_no_fsdp_fields() -> None:
    fields = training_arguments(accelkit.plan_for("H100 SXM", count=8))
    assert "fsdp" not in fields and "fsdp_config" not in fields


def _eight_billion_parameters():
    """An 8.05e9-parameter model on the meta device: counted, never allocated."""
    import torch

    with torch.device("meta"):
        return torch.nn.Sequential(*(torch.nn.Linear(8192, 8192, bias=False) for _ in range(120)))


def test_given_a_model_too_large_for_a_replica_the_plan_shards_it(caplog) -> None:
    eight = accelkit.plan_for("H100 SXM", count=8)  # auto_configure's kind: no model size
    assert "fsdp" not in training_arguments(eight)
    with caplog.at_level("INFO", logger="accelkit"):
        fields = training_arguments(eight, model=_eight_billion_parameters())
    assert fields["fsdp_config"]["version"] == 2
    assert "accelkit.hf.training_arguments: layout planned from the model's 8,053,063,680" in (
        caplog.text
    )
    assert "the optimizer is not built yet, counted as adamw" in caplog.text


def test_given_a_model_that_fits_the_fields_are_those_of_the_plan() -> None:
    import torch

    eight = accelkit.plan_for("H100 SXM", count=8)
    small = torch.nn.Linear(1024, 1024)
    assert training_arguments(eight, model=small) == training_arguments(eight)


def test_a_model_that_is_no_module_is_refused_naming_what_to_pass() -> None:
    with pytest.raises(TypeError, match=r"model must be the torch.nn.Module .* not str"):
        training_arguments(accelkit.plan_for("H100 SXM", count=8), model="gpt2")


@settings(max_examples=40, deadline=None)
@given(
    gpu=st.sampled_from(["H100 SXM", "H200", "A100-SXM4-40GB", "L4", "RTX 4090"]),
    count=st.integers(1, 8),
    layers=st.integers(1, 400),
)
def test_given_a_model_the_fields_are_the_planners_for_its_size(gpu, count, layers) -> None:
    """The door lays the plan out as the planner would for the model's size, whatever the
    machine and the size (4096 x 4096 layers on the meta device: 16.8M to 6.7B)."""
    import torch

    from accelkit.planning import Request, with_model_size
    from accelkit.planning.types import Optimizer

    with torch.device("meta"):
        model = torch.nn.Sequential(
            *(torch.nn.Linear(4096, 4096, bias=False) for _ in range(layers))
        )
    plan = accelkit.plan_for(gpu, count=count)
    size = Request(params=layers * 4096**2, optimizer=Optimizer.ADAMW)
    assert training_arguments(plan, model=model) == training_arguments(with_model_size(plan, size))
