"""The memory model (planning/memory.py) and the parallelism it chooses
(planning/sharding.py), on hardware snapshots: what-ifs and hand-made ones."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.hardware.what_if import what_if
from accelkit.planning import Request, plan
from accelkit.planning.keys import Key
from accelkit.planning.memory import (
    Layout,
    activations_from_rise,
    blocks,
    footprint,
    per_param,
    usable_bytes,
)
from accelkit.planning.types import (
    Distribution,
    Framework,
    MemoryEstimate,
    Optimizer,
    Plan,
    Precision,
)

GB = 10**9
TORCHRUN_8 = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}


# -- bytes per parameter ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("optimizer", "precision", "state"),
    [
        # ZeRO section 3.1: mixed-precision Adam is 16 bytes per parameter; under autocast
        # 4 (fp32 weights) + 4 (fp32 grads) + 8 (m, v)
        (Optimizer.ADAMW, Precision.BF16, 16),
        (Optimizer.ADAM, Precision.FP32, 16),
        (Optimizer.SGD_MOMENTUM, Precision.BF16, 12),
        (Optimizer.SGD, Precision.TF32, 8),
        (Optimizer.ADAMW_8BIT, Precision.BF16, 10),
        (Optimizer.ADAFACTOR, Precision.BF16, 8),
    ],
)
def test_state_bytes_per_parameter(optimizer, precision, state) -> None:
    assert per_param(optimizer, precision, Framework.TORCH).state == state


def test_mixed_precision_adds_the_16_bit_casts_and_torch_adam_its_foreach_temporaries() -> None:
    mixed = per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH)
    full = per_param(Optimizer.ADAMW, Precision.FP32, Framework.TORCH)
    keras = per_param(Optimizer.ADAMW, Precision.BF16, Framework.TENSORFLOW)
    assert (mixed.casts, full.casts, keras.casts) == (2, 0, 2)
    assert (mixed.step, keras.step) == (4, 0)


def test_a_frozen_parameter_holds_its_weight_only() -> None:
    sizes = per_param(Optimizer.ADAMW, Precision.FP32, Framework.TENSORFLOW)
    all_frozen = footprint(Layout(), sizes, 10**9, 1, None)
    assert all_frozen.state == 4 * (10**9 - 1) + 16
    lora = plan_for_size("H100", 1, params=8e9, trainable_params=0.1e9)
    assert lora.memory.state_bytes == 16 * 10**8 + 4 * (8 * 10**9 - 10**8)
    assert "frozen" in lora.get(Key.SHARDING).reason


def test_blocks_interpolate_between_models_of_known_size() -> None:
    assert [blocks(p) for p in (10**6, 0.124e9, 1.24e9, 8.03e9, 70.6e9, 10**15)] == [
        12,
        12,
        16,
        32,
        80,
        126,
    ]
    assert 16 < blocks(3e9) < 32


def test_usable_memory_keeps_headroom_and_the_cuda_context() -> None:
    assert usable_bytes(80 * GB) == int(79 * GB * 0.9)
    assert usable_bytes(GB // 2) == 0


# -- the choice ---------------------------------------------------------------------------


def plan_for_size(gpu: str | None, count: int, **request) -> Plan:
    return accelkit.plan_for(gpu, count, **request)


def test_8b_on_8_h100_is_sharded_with_fsdp2() -> None:
    result = plan_for_size("H100", 8, params=8e9)
    memory = result.memory
    assert memory.choice == "fsdp2" and memory.state_bytes == 128 * GB
    assert memory.state_per_gpu_bytes == 16 * GB
    assert memory.per_gpu_bytes <= memory.usable_bytes
    assert memory.activations == "unknown" and memory.activation_bytes is None
    assert result.value(Key.SHARDING) == "fsdp2"
    assert result.value(Key.ACTIVATION_CHECKPOINTING) is False
    assert result.value(Key.CPU_OFFLOAD) is False
    assert "128.00 GB of state" in result.get(Key.SHARDING).reason
    assert "FSDP2" in result.value(Key.LAUNCH) + result.get(Key.LAUNCH).reason


def test_under_torchrun_fsdp2_is_the_distribution_without_ddp_settings() -> None:
    result = plan(what_if("H100", 8, environ=TORCHRUN_8), Request(params=8e9))
    assert result.distribution is Distribution.FSDP
    assert result.get(Key.DDP_BUCKET_VIEW) is None
    assert "FSDP2" in result.get(Key.TORCH_PROCESS_GROUP).reason
    small = plan(what_if("H100", 8, environ=TORCHRUN_8), Request(params=1e9))
    assert small.distribution is Distribution.DDP and small.value(Key.SHARDING) == "ddp"
    assert small.get(Key.DDP_BUCKET_VIEW) is not None


def test_a_model_that_fits_one_gpu_is_replicated() -> None:
    one, eight = plan_for_size("H100", 1, params=1e9), plan_for_size("H100", 8, params=1e9)
    assert (one.memory.choice, one.value(Key.SHARDING)) == ("none", "none")
    assert (eight.memory.choice, eight.value(Key.SHARDING)) == ("ddp", "ddp")
    assert one.get(Key.CPU_OFFLOAD) is None
    assert one.memory.per_gpu_bytes == 20 * GB  # 16 state + 4 foreach step temporaries


def test_activations_that_do_not_fit_beside_the_state_are_checkpointed() -> None:
    result = plan_for_size("H100", 1, params=1e9, activation_bytes=60 * GB)
    assert result.memory.choice == "none+checkpointing"
    assert result.value(Key.ACTIVATION_CHECKPOINTING) is True
    assert result.memory.activations == "measured"
    assert result.memory.per_gpu_bytes <= result.memory.usable_bytes
    assert "60.00 GB" in result.get(Key.ACTIVATION_CHECKPOINTING).reason


def test_sharding_is_preferred_to_checkpointing_on_several_gpus() -> None:
    result = plan_for_size("H100", 8, params=1e9, activation_bytes=60 * GB)
    assert result.memory.choice == "fsdp2"


def test_one_gpu_offloads_as_the_last_resort_and_says_how_many_gpus_would_shard_it() -> None:
    result = plan_for_size("H100", 1, params=8e9)
    assert result.memory.choice == "fsdp2+offload"
    assert result.value(Key.CPU_OFFLOAD) is True
    assert result.memory.host_bytes == 128 * GB
    assert result.memory.gpus_needed == 3
    assert "FSDP2 needs 3 of these GPUs" in result.get(Key.SHARDING).reason


def test_offload_needs_the_host_memory_a_snapshot_gives() -> None:
    gpus = tuple(GpuInfo(i, "NVIDIA H100", (9, 0), memory_bytes=80 * GB) for i in range(1))
    small_host = HardwareInfo(gpus=gpus, host_memory_bytes=64 * GB, source="snapshot")
    big_host = dataclasses.replace(small_host, host_memory_bytes=2000 * GB)
    assert plan(big_host, Request(params=8e9)).memory.choice == "fsdp2+offload"
    refused = plan(small_host, Request(params=8e9))
    assert refused.memory.choice == "does not fit" and not refused.memory.fits
    reason = refused.get(Key.MEMORY).reason
    assert refused.get(Key.SHARDING) is None
    for number in ("128.00 GB of state", "71.10 GB usable", "80.00 GB", "FSDP2 needs 3"):
        assert number in reason


def test_tensorflow_replicates_and_refuses_with_the_numbers_where_only_sharding_would_do() -> None:
    fits = plan_for_size("H100", 8, framework="tensorflow", params=1e9)
    assert fits.value(Key.SHARDING) == "none" and fits.memory.choice == "none"
    assert "each of the 8 GPUs holds a whole replica" in fits.get(Key.SHARDING).reason
    refused = plan_for_size("H100", 8, framework="tensorflow", params=8e9)
    assert refused.memory.choice == "does not fit"
    reason = refused.get(Key.MEMORY).reason
    assert "replicate the whole state" in reason and "PyTorch FSDP2 would hold it on" in reason
    assert refused.get(Key.ACTIVATION_CHECKPOINTING) is None


def test_the_refusal_names_the_largest_model_that_fits() -> None:
    refused = plan_for_size("A100-SXM4-40GB", 1, framework="tensorflow", params=8e9)
    largest = refused.memory.largest_params
    assert 1.5e9 < largest < 2e9  # 35.1 GB usable / (16 + 2 casts) bytes
    fits = plan_for_size("A100-SXM4-40GB", 1, framework="tensorflow", params=largest)
    assert fits.memory.fits


def test_no_gpu_or_unknown_memory_gives_the_numbers_without_a_verdict() -> None:
    cpu = plan_for_size(None, 1, params=1e9)
    assert cpu.memory.device_bytes is None and cpu.memory.choice == "none"
    assert "nothing to compare with" in cpu.get(Key.SHARDING).reason


def test_distribute_fsdp_and_none_are_honoured() -> None:
    forced = plan(what_if("H100", 8, environ=TORCHRUN_8), Request(params=1e9, distribute="fsdp"))
    assert forced.distribution is Distribution.FSDP and forced.value(Key.SHARDING) == "fsdp2"
    alone = plan(what_if("H100", 8), Request(params=1e9, distribute="none"))
    assert alone.memory.gpus == 1 and alone.memory.choice == "none"


def test_no_model_size_no_memory() -> None:
    result = plan_for_size("H100", 8)
    assert result.memory is None and result.to_dict()["memory"] is None
    assert result.get(Key.SHARDING) is None


def test_the_estimate_round_trips_in_the_plan_json_with_bytes_as_ints() -> None:
    result = plan_for_size("H200", 8, params=70e9, activation_bytes=10 * GB)
    document = json.loads(json.dumps(result.to_dict()))
    assert Plan.from_dict(document).memory == result.memory
    memory = document["memory"]
    for key in ("state_bytes", "per_gpu_bytes", "device_bytes", "usable_bytes", "params"):
        assert isinstance(memory[key], int), key
    assert MemoryEstimate.from_dict(memory).to_dict() == memory


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("params", 0, "from 1"),
        ("params", -8e9, "from 1"),
        ("params", 1.5, "whole number"),
        ("params", "8e9", "8e9"),
        ("params", True, "whole number"),
        ("params", float("nan"), "whole number"),
        ("params", 1e16, "1e+15"),
        ("optimizer", "lion", "'adamw'"),
        ("activation_bytes", -1, "from 0"),
        ("activation_bytes", 2.5, "whole number"),
    ],
)
def test_bad_model_sizes_name_the_valid_values(field, value, named) -> None:
    extra = {} if field == "params" else {"params": 1e9}
    with pytest.raises(ValueError, match=field) as error:
        Request(**{field: value, **extra})
    assert named in str(error.value)


def test_trainable_parameters_need_and_stay_within_the_parameters() -> None:
    with pytest.raises(ValueError, match="needs params"):
        Request(trainable_params=1e9)
    with pytest.raises(ValueError, match="at most params=1,000,000,000"):
        Request(params=1e9, trainable_params=2e9)
    assert Request(params=8e9, trainable_params=8e9).trainable_params == 8 * 10**9


# -- properties ---------------------------------------------------------------------------

GPUS = ["H100", "NVIDIA H200", "A100-SXM4-40GB", "A100-SXM4-80GB", "Tesla T4", "RTX 4090"]
sizes_st = st.integers(min_value=1, max_value=10**13)
optimizers = st.sampled_from(list(Optimizer))
precisions = st.sampled_from([Precision.BF16, Precision.FP32])
frameworks = st.sampled_from([Framework.TORCH, Framework.TENSORFLOW])


@settings(max_examples=200, deadline=None)
@given(sizes_st, sizes_st, optimizers, precisions, frameworks)
def test_state_grows_with_the_parameters(small, large, optimizer, precision, framework) -> None:
    small, large = sorted((small, large))
    sizes = per_param(optimizer, precision, framework)
    for layout in (Layout(), Layout(8), Layout(3, checkpointing=True)):
        assert footprint(layout, sizes, small, small, None).state <= (
            footprint(layout, sizes, large, large, None).state
        )
    assert footprint(Layout(), sizes, small, small, None).total <= (
        footprint(Layout(), sizes, large, large, None).total
    )


@settings(max_examples=200, deadline=None)
@given(sizes_st, st.integers(1, 16_384), optimizers, precisions)
def test_sharding_divides_the_state_by_the_gpus(params, shards, optimizer, precision) -> None:
    sizes = per_param(optimizer, precision, Framework.TORCH)
    whole = footprint(Layout(), sizes, params, params, None).state
    share = footprint(Layout(shards), sizes, params, params, None).state
    assert share == -(-whole // shards) or abs(share - whole / shards) <= 1
    offloaded = footprint(Layout(shards, offload=True), sizes, params, params, None)
    assert offloaded.state == 0 and offloaded.step == 0


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(GPUS),
    st.integers(1, 16),
    st.integers(10**6, 10**12),
    st.one_of(st.none(), st.integers(0, 200 * GB)),
    optimizers,
    frameworks,
    st.booleans(),
)
def test_the_choice_fits_when_it_says_it_fits(
    gpu, count, params, activations, optimizer, framework, torchrun
) -> None:
    environ = {**TORCHRUN_8, "WORLD_SIZE": str(count)} if torchrun and count > 1 else {}
    request = Request(
        framework=framework, params=params, activation_bytes=activations, optimizer=optimizer
    )
    result = plan(what_if(gpu, count, environ=environ), request)
    memory = result.memory
    assert memory is not None and memory.usable_bytes is not None
    if memory.fits:
        assert memory.per_gpu_bytes <= memory.usable_bytes
        assert (result.value(Key.SHARDING) == "fsdp2") == memory.choice.startswith("fsdp2")
        assert result.get(Key.MEMORY) is None
    else:
        whole = plan(what_if(gpu, 1), dataclasses.replace(request, distribute="none"))
        assert whole.memory.per_gpu_bytes > memory.usable_bytes
        assert result.get(Key.SHARDING) is None and result.get(Key.MEMORY) is not None
    if framework is Framework.TENSORFLOW:
        assert memory.choice in ("none", "does not fit")
    needed = memory.gpus_needed
    if framework is Framework.TORCH and needed is not None and needed <= 16 and not activations:
        enough = plan(what_if(gpu, needed), request)
        assert enough.memory.fits and not enough.memory.choice.endswith("offload")
        if needed > 1:
            fewer = plan(what_if(gpu, needed - 1), request)
            assert fewer.memory.choice not in ("none", "ddp", "fsdp2")


def test_the_docs_what_if_table_is_up_to_date() -> None:
    script = Path(__file__).resolve().parents[2] / "scripts" / "memory_table.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


# -- activations from a measured pass ------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    params=st.integers(1, 10**11),
    activations=st.integers(0, 10**12),
    shards=st.integers(1, 64),
    mixed=st.booleans(),
    optimizer=st.sampled_from(list(Optimizer)),
)
def test_activations_from_a_rise_add_back_up_to_it(params, activations, shards, mixed, optimizer):
    """The inverse of footprint's forward-and-backward phase: the rise a pass with these
    activations makes (its gradients, casts or gathered units, activations) gives them back."""
    precision = Precision.BF16 if mixed else Precision.FP32
    sizes = per_param(optimizer, precision, Framework.TORCH)
    layout = Layout(shards)
    gradients = params * sizes.gradients // shards
    compute = footprint(layout, sizes, params, params, None).compute
    rise = gradients + compute + activations
    assert activations_from_rise(rise, gradients, layout, sizes, params) == activations


def test_a_rise_below_the_counted_transients_gives_no_negative_activations():
    sizes = per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH)
    assert activations_from_rise(1_000, 4_000, Layout(), sizes, 1_000) == 0
