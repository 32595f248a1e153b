"""Issue 37, E07: the frozen weights' dtype (`Request.frozen_dtype`): a LoRA's base held in
bf16, int8 or int4 is counted in its own bytes (`accelkit.planning.memory.FROZEN_BYTES`),
once, with no gradient, optimizer state or float32 master copy; fp32, the default, keeps
the count of before (4 bytes and autocast's 16-bit copy)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelkit
from accelkit.cli import main
from accelkit.planning import Framework, Optimizer, Precision, Request
from accelkit.planning import memory as model
from accelkit.planning.types import FrozenDtype

A100_40 = "A100-SXM4-40GB"
LORA = {"params": 8e9, "trainable_params": 2e7}  # Llama 3 8B with 20M adapter weights
FROZEN, TRAINABLE = 8 * 10**9 - 2 * 10**7, 2 * 10**7


def _memory(gpu: str = A100_40, count: int = 1, **request: object) -> accelkit.MemoryEstimate:
    memory = accelkit.plan_for(gpu, count=count, **request).memory
    assert memory is not None
    return memory


def test_an_8b_lora_with_a_bf16_base_fits_one_a100_40gb_without_offload() -> None:
    memory = _memory(**LORA, frozen_dtype="bf16")
    assert memory.choice == "none"
    # 7.98e9 x 2 B + 2e7 x 16 B of state; the adapters' casts and foreach step besides
    assert memory.state_bytes == FROZEN * 2 + TRAINABLE * 16
    assert memory.per_gpu_bytes == pytest.approx(16.36e9, rel=1e-3)
    assert "8.0B frozen x 2 B (bf16)" in memory.reason


def test_an_8b_lora_with_an_8bit_base_fits_in_less_than_11_gb() -> None:
    memory = _memory(**LORA, frozen_dtype="int8")
    assert memory.choice == "none"
    assert memory.per_gpu_bytes < 11e9
    assert memory.state_bytes == FROZEN * 1 + TRAINABLE * 16


def test_a_4bit_base_counts_nf4_with_double_quantised_constants() -> None:
    memory = _memory(**LORA, frozen_dtype="int4")
    assert model.FROZEN_BYTES[FrozenDtype.INT4] == pytest.approx(0.5 + 0.127 / 8)
    assert memory.state_bytes == pytest.approx(FROZEN * (0.5 + 0.127 / 8) + TRAINABLE * 16, abs=1)
    assert "frozen x 0.516 B (int4)" in memory.reason


def test_the_default_keeps_the_fp32_count_of_before() -> None:
    default = accelkit.plan_for(A100_40, **LORA)
    assert Request(**LORA).frozen_dtype is FrozenDtype.FP32
    assert accelkit.plan_for(A100_40, **LORA, frozen_dtype="fp32").to_dict() == default.to_dict()
    assert default.memory is not None
    assert default.memory.choice == "fsdp2+offload"
    assert default.memory.state_bytes == FROZEN * 4 + TRAINABLE * 16


def test_a_bad_frozen_dtype_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="frozen_dtype='nf4' is not valid") as error:
        accelkit.plan_for(A100_40, **LORA, frozen_dtype="nf4")
    assert "'fp32', 'bf16', 'fp16', 'int8', 'int4'" in str(error.value)


@pytest.mark.parametrize("dtype", list(FrozenDtype))
def test_frozen_parameters_hold_their_weight_only(dtype: FrozenDtype) -> None:
    sizes = model.per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH, dtype)
    held = model.footprint(model.Layout(), sizes, 10**9, 0, None)
    assert held.state == 10**9 * model.FROZEN_BYTES[dtype]  # no gradient, state or master
    assert held.step == 0  # the optimizer step never touches them
    # bf16 autocast casts the float weights not in bf16, and keeps the copies for backward
    cast = dtype in (FrozenDtype.FP32, FrozenDtype.FP16)
    assert held.compute == (10**9 * 2 if cast else 0)


def test_the_casts_follow_the_compute_dtype() -> None:
    def frozen_casts(precision: Precision, dtype: FrozenDtype) -> float:
        return model.per_param(Optimizer.ADAMW, precision, Framework.TORCH, dtype).frozen_casts

    assert frozen_casts(Precision.FP16, FrozenDtype.BF16) == 2  # autocast casts it to fp16
    assert frozen_casts(Precision.FP16, FrozenDtype.FP16) == 0
    assert frozen_casts(Precision.FP32, FrozenDtype.FP32) == 0
    assert frozen_casts(Precision.BF16, FrozenDtype.INT4) == 0  # dequantised per layer


def test_activations_from_a_rise_leave_out_only_the_casts_made() -> None:
    sizes = model.per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH, FrozenDtype.BF16)
    # 1,000 params, 100 trainable: casts of the trainable ones only (100 x 2 B)
    assert model.activations_from_rise(10_000, 400, model.Layout(), sizes, 1_000, 100) == 9_400


_GPUS = st.sampled_from(["A100-SXM4-40GB", "H100", "H200", "L4"])
_BYTES_ORDER = sorted(FrozenDtype, key=model.FROZEN_BYTES.__getitem__)


def _needed(memory: accelkit.MemoryEstimate) -> float:
    return float("inf") if memory.gpus_needed is None else memory.gpus_needed


@settings(max_examples=60, deadline=None)
@given(
    gpu=_GPUS,
    count=st.sampled_from([1, 8]),
    params=st.integers(10**8, 10**11),
    share=st.floats(0.0, 1.0),
    precision=st.sampled_from(["bf16", "fp16", "fp32"]),
    pair=st.lists(st.sampled_from(_BYTES_ORDER), min_size=2, max_size=2, unique=True),
)
def test_the_estimate_is_monotone_in_the_bytes_per_frozen_parameter(
    gpu: str, count: int, params: int, share: float, precision: str, pair: list[FrozenDtype]
) -> None:
    small, large = sorted(pair, key=model.FROZEN_BYTES.__getitem__)
    if model.FROZEN_BYTES[small] == model.FROZEN_BYTES[large]:
        return  # bf16 and fp16: the same bytes, casts that depend on the precision
    trainable = max(1, round(params * share))
    request = {"params": params, "trainable_params": trainable, "precision": precision}
    lo = _memory(gpu, count, **request, frozen_dtype=small)
    hi = _memory(gpu, count, **request, frozen_dtype=large)
    assert lo.state_bytes <= hi.state_bytes
    assert _needed(lo) <= _needed(hi)
    assert (lo.largest_params or 0) >= (hi.largest_params or 0)
    sizes = [
        model.per_param(Optimizer.ADAMW, Precision(precision), Framework.TORCH, d)
        for d in (small, large)
    ]
    for layout in (model.Layout(), model.Layout(8), model.Layout(8, offload=True)):
        low, high = (model.footprint(layout, s, params, trainable, None).total for s in sizes)
        assert low <= high


@settings(max_examples=40, deadline=None)
@given(
    gpu=_GPUS,
    count=st.sampled_from([1, 2, 8]),
    params=st.integers(10**6, 10**12),
    dtype=st.sampled_from(list(FrozenDtype)),
)
def test_with_nothing_frozen_the_dtype_changes_nothing(
    gpu: str, count: int, params: int, dtype: FrozenDtype
) -> None:
    request = {"params": params, "trainable_params": params}
    base = accelkit.plan_for(gpu, count=count, **request).to_dict()
    assert accelkit.plan_for(gpu, count=count, **request, frozen_dtype=dtype).to_dict() == base


def test_the_cli_takes_the_frozen_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--gpu", A100_40, "--params", "8B", "--trainable-params", "20M"]
    assert main([*args, "--frozen-dtype", "bf16", "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["choice"] == "none"
    assert memory["state_bytes"] == FROZEN * 2 + TRAINABLE * 16


def test_the_frozen_dtype_is_read_from_the_model() -> None:
    torch = pytest.importorskip("torch")
    from accelkit.torch.measuring import memory_probe

    class Params4bit(torch.nn.Parameter):  # bitsandbytes' name: two weights a byte
        pass

    base = torch.nn.Linear(64, 64).to(torch.bfloat16).requires_grad_(False)
    adapter = torch.nn.Linear(64, 4)
    params = [*base.parameters(), *adapter.parameters()]
    assert memory_probe.frozen_dtype(params) is FrozenDtype.BF16
    assert memory_probe.frozen_dtype(list(adapter.parameters())) is FrozenDtype.FP32
    packed = Params4bit(torch.zeros(2048, 1, dtype=torch.uint8), requires_grad=False)
    assert memory_probe.frozen_dtype([packed, *adapter.parameters()]) is FrozenDtype.INT4
    assert memory_probe._count(packed) == 4096
