"""The Hugging Face `Trainer` under a launch whose plan shards (FSDP2), on this CPU.

The Trainer cannot shard on the CPU: Accelerate turns a `fsdp_plugin` into
``DistributedType.FSDP`` only for accelerator process groups (MULTI_GPU, MULTI_XPU...,
``accelerate/state.py``, `AcceleratorState.__init__`); a gloo group on the CPU stays
``MULTI_CPU`` and the Trainer trains it with DDP, every rank holding the whole model,
saying nothing. So on a CPU plan `training_arguments` gives no ``fsdp`` fields and says
why, and `AccelkitCallback` notes that the plan's sharding was not applied. The launch
below shows both, with the Trainer's real arguments: the fields a GPU plan gives, on
two gloo ranks, leave the model whole (if a later Accelerate shards on the CPU, that
check fails: then give the fields on the CPU too). The sharded Trainer is tested on a
GPU: tests/distributed/test_torch_fsdp_gpu.py.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

import accelkit
from accelkit.hf import training_arguments
from accelkit.planning.keys import Key
from accelkit.planning.types import Setting

from ..distributed.torch_launch import ranks_written
from ..helpers.sharded_plans import sharded

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate")

WORKER = str(Path(__file__).with_name("fsdp_worker.py"))


def _cpu_fsdp_plan():
    """This CPU's plan as two torchrun ranks with ``distribute="fsdp"`` make it."""
    plan = accelkit.plan_for(None, framework="torch")
    assert plan.device_type == "cpu"
    return sharded(plan)


@pytest.mark.torch
def test_a_cpu_plan_gives_no_fsdp_fields_and_says_why(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        fields = training_arguments(_cpu_fsdp_plan())
    assert "fsdp" not in fields and "fsdp_config" not in fields, fields
    assert "Accelerate shards only on GPUs" in caplog.text, caplog.text
    assert "data-parallel" in caplog.text and "accelkit.torch.fit" in caplog.text


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return ranks_written(tmp_path_factory.mktemp("hf_fsdp_cpu"), WORKER, "cpu", timeout=300)


@pytest.mark.torch
@pytest.mark.distributed
def test_the_trainer_on_the_cpu_keeps_the_model_whole_with_the_fsdp_fields(ranks) -> None:
    for result in ranks:
        told = result["gpu_fields"]
        assert told["fsdp_fields"] is True  # the fields a GPU plan gives were passed
        assert told["distributed_type"] == "MULTI_CPU", told
        assert told["fsdp_enabled"] is False and told["parameter"] == "Parameter", told
        assert "the Trainer did not shard" in told["report"]["notes"]["sharding"]


@pytest.mark.torch
@pytest.mark.distributed
def test_the_callback_notes_the_plans_sharding_not_applied(ranks) -> None:
    for rank, result in enumerate(ranks):
        planned = result["planned"]
        assert planned["fsdp_fields"] is False
        report = planned["report"]
        assert report["world_size"] == 2 and report["facts"]["rank"] == rank
        assert report["steps"] == 8 and report["samples_per_second"] > 0
        assert "sharding" not in report["facts"]
        note = report["notes"]["sharding"]
        assert note.startswith("the plan shards with FSDP2, not applied"), note
        losses = planned["losses"]
        assert len(losses) == 8 and planned["finite"], losses
        assert losses[-1] < losses[0], losses


@pytest.fixture
def one_rank():
    """A gloo process group of this process alone, for FSDP2 on the CPU."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    if dist.is_initialized():
        pytest.skip("a process group is running already")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.torch
@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_callback_reads_back_what_fsdp2_did(one_rank, checkpointing) -> None:
    """`sharding.described` (the callback's facts of a Trainer's FSDP2 model) gives what
    `sharding.shard` recorded when it sharded: units, policy, checkpointing."""
    import torch

    from accelkit.torch.distributed import sharding

    from ..helpers.transformers_models import gpt2

    plan = accelkit.plan_for("H100 SXM", count=8)  # bf16: a policy to read back
    extra = (Setting(Key.ACTIVATION_CHECKPOINTING, checkpointing, "test"),)
    plan = dataclasses.replace(plan, settings=(*plan.settings, *extra))
    model = gpt2(layers=3)
    assert sharding.described(model) is None
    done = sharding.shard(model, plan, torch.device("cpu"))
    assert done.blocks == "GPT2Block" and done.checkpointing is checkpointing
    assert sharding.described(model) == dataclasses.replace(done, by_script=True)


@pytest.mark.torch
def test_units_of_other_modules_do_not_hide_the_blocks(one_rank) -> None:
    """Accelerate's transformer-based wrap policy makes units of the embeddings as well as
    the blocks (seen on an H200: 'Embedding' x 7 reported for GPT-2's 4 blocks): the
    record names the blocks, the class most units have."""

    from accelkit.torch.distributed import sharding

    from ..helpers.transformers_models import gpt2

    api = sharding.fsdp_api()
    model = gpt2(layers=4)
    for unit in (model.transformer.wte, model.transformer.wpe, *model.transformer.h):
        api.fully_shard(unit, mesh=None)
    api.fully_shard(model)
    found = sharding.described(model)
    assert found is not None, "not read as an FSDP2 model"
    assert (found.blocks, found.count, found.where) == ("GPT2Block", 4, "transformer.h")
