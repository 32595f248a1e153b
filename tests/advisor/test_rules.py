"""Each rule on plain data: it fires on its evidence, stays quiet without it.

Rules that need a GPU to trigger (utilisation, memory, loss scale, idle GPUs,
ECC) are covered here; tests/advisor/test_real_runs_*.py trigger the others
on real CPU runs.
"""

from __future__ import annotations

import math

import pytest

from accelkit import plan_for, what_if
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import DEFAULT_MFU, Context
from accelkit.advisor.rules import (
    alignment,
    distribution,
    input_wait,
    keras_policy,
    memory,
    precision,
    reliability,
    stability,
    utilisation,
)
from accelkit.advisor.types import amdahl
from accelkit.hardware.info import HardwareInfo

from .helpers import ids, measured_on

A100 = what_if("A100-SXM4-80GB")
H100 = what_if("H100 SXM")
T4 = what_if("Tesla T4")
RTX4090 = what_if("RTX 4090")
CPU = HardwareInfo(source="cpu")


def ctx(hardware, plan=None, **figures):
    return Context.build(hardware, plan, measured_on(hardware, **figures))


# -- input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("share", "severity"),
    [(0.35, Severity.WARNING), (0.20, Severity.WARNING), (0.08, Severity.INFO)],
)
def test_input_wait_fires_with_its_share_and_gain(share, severity) -> None:
    found = input_wait.input_bound(
        ctx(
            A100,
            input_wait_share=share,
            step_time_s=0.010,
            facts={
                "loader": {
                    "type": "DataLoader",
                    "num_workers": 0,
                    "pin_memory": False,
                    "persistent_workers": False,
                    "prefetch_factor": None,
                }
            },
        )
    )
    assert found.severity is severity
    assert found.speedup == pytest.approx(1 / (1 - share))
    assert found.evidence["input_wait_share"] == pytest.approx(share)
    assert found.evidence["loader.num_workers"] == 0
    assert "num_workers=" in found.action and "pin_memory=True" in found.action
    assert f"1 / (1 - {share:.3f})" in found.expected_gain


def test_input_wait_below_five_percent_is_quiet() -> None:
    assert input_wait.input_bound(ctx(A100, input_wait_share=0.049)) is None
    assert input_wait.input_bound(ctx(A100)) is None  # not measured


def test_input_action_for_tf_data_names_what_is_missing() -> None:
    loader = {
        "type": "tf.data.Dataset",
        "prefetch": False,
        "cache": False,
        "map": 1,
        "parallel_map": 0,
    }
    found = input_wait.input_bound(
        ctx(A100, framework="tensorflow", input_wait_share=0.4, facts={"loader": loader})
    )
    assert "num_parallel_calls=tf.data.AUTOTUNE" in found.action
    assert ".prefetch(tf.data.AUTOTUNE)" in found.action and ".cache()" in found.action
    done = dict(loader, prefetch=True, cache=True, parallel_map=1)
    found = input_wait.input_bound(
        ctx(A100, framework="tensorflow", input_wait_share=0.4, facts={"loader": done})
    )
    assert ".prefetch(" not in found.action and "interleave" in found.action


def test_input_action_for_a_loader_that_is_not_a_dataloader() -> None:
    found = input_wait.input_bound(
        ctx(CPU, input_wait_share=0.3, facts={"loader": {"type": "list"}})
    )
    assert "instead of list" in found.action


# -- utilisation ---------------------------------------------------------------------------


def test_low_utilisation_not_input_bound_is_launch_overhead() -> None:
    found = utilisation.launch_overhead(
        ctx(
            A100,
            gpu_utilization=40.0,
            input_wait_share=0.02,
            step_time_s=0.004,
            facts={"batch_size": 32},
        )
    )
    assert found.severity is Severity.WARNING
    # 1 / (1 - 0.58) = 2.38 if the GPU were kept busy; the doubled batch bounds it at 2.
    assert found.speedup == pytest.approx(2.0)
    assert "2.38x" in found.expected_gain and "at most 2x" in found.expected_gain
    assert "batch_size=64" in found.action and "compile=True" in found.action
    assert "reduce-overhead" in found.action  # 4 ms steps: CUDA graphs
    assert found.evidence["gpu_utilization"] == 40.0


def test_launch_overhead_after_compile_suggests_cuda_graphs_not_compile() -> None:
    found = utilisation.launch_overhead(
        ctx(
            A100,
            gpu_utilization=60.0,
            input_wait_share=0.0,
            step_time_s=0.05,
            facts={"compiled": True},
        )
    )
    assert found.severity is Severity.INFO
    assert "compile=True" not in found.action and "reduce-overhead" in found.action


@pytest.mark.parametrize("status", ["chosen", "slower"])
def test_launch_overhead_leaves_cuda_graphs_tune_measured_to_their_rule(status: str) -> None:
    graphs = {"compile": True, "optimizer": "fused", "cudagraphs": True}
    tuned = {
        "decision": "tuned",
        "candidates": [
            {"name": "eager", "status": "baseline", "step_seconds": 0.008,
             "settings": {"compile": False, "optimizer": "default"}},
            {"name": "cudagraphs+fused", "status": status, "step_seconds": 0.004,
             "settings": graphs},
        ],
    }  # fmt: skip
    found = utilisation.launch_overhead(
        ctx(A100, gpu_utilization=45.0, input_wait_share=0.0, step_time_s=0.004,
            facts={"compiled": True}, tuning=tuned)
    )  # fmt: skip
    assert "reduce-overhead" not in found.action and "batch" in found.action


def test_keras_launch_overhead_suggests_xla_and_steps_per_execution() -> None:
    found = utilisation.launch_overhead(
        ctx(
            A100,
            framework="tensorflow",
            gpu_utilization=30.0,
            input_wait_share=0.01,
            step_time_s=0.002,
        )
    )
    assert "jit_compile=True" in found.action and "steps_per_execution" in found.action


@pytest.mark.parametrize(
    "figures",
    [
        {"gpu_utilization": 95.0, "input_wait_share": 0.01},  # busy
        {"gpu_utilization": 40.0, "input_wait_share": 0.30},  # input-bound: that rule speaks
        {"input_wait_share": 0.01},  # no NVML samples
    ],
)
def test_launch_overhead_quiet(figures) -> None:
    assert utilisation.launch_overhead(ctx(A100, **figures)) is None


def test_launch_overhead_needs_utilisation_measured_on_that_gpu() -> None:
    m = measured_on(A100, gpu_utilization=30.0, input_wait_share=0.0)
    assert utilisation.launch_overhead(Context.build(H100, None, m)) is None


def test_low_mfu_with_nothing_else_points_at_the_profiler() -> None:
    found = advise(H100, None, measured_on(H100, matmul_dtype="bf16", mfu=0.12, step_time_s=0.1))
    assert ids(found) == ["low_mfu"]
    assert found[0].severity is Severity.INFO and "torch.profiler" in found[0].action
    keras = advise(
        H100, None, measured_on(H100, framework="tensorflow", matmul_dtype="fp16", mfu=0.12)
    )
    assert "profile_batch" in keras[0].action


def test_low_mfu_stays_quiet_when_a_warning_explains_it() -> None:
    found = advise(
        H100, None, measured_on(H100, matmul_dtype="bf16", mfu=0.12, input_wait_share=0.5)
    )
    assert "low_mfu" not in ids(found) and ids(found)[0] == "input_bound"
    assert advise(H100, None, measured_on(H100, matmul_dtype="bf16", mfu=0.45)) == []


# -- precision -----------------------------------------------------------------------------


def test_fp32_on_ampere_gain_is_the_datasheet_ratio_capped_by_mfu() -> None:
    found = precision.precision(ctx(A100, matmul_dtype="fp32", mfu=0.5))
    assert found.severity is Severity.WARNING
    ratio = 312 / 19.5
    assert found.speedup == pytest.approx(amdahl(0.5, ratio))
    assert found.evidence["peak_bf16_tflops"] == 312 and found.evidence["peak_fp32_tflops"] == 19.5
    assert "MFU 50.0% (measured)" in found.expected_gain and "312 / 19.5" in found.expected_gain
    assert "precision='bf16'" in found.action


def test_tf32_on_ampere_is_info_with_a_two_fold_ratio() -> None:
    found = precision.precision(ctx(A100, matmul_dtype="tf32", mfu=0.3))
    assert found.severity is Severity.INFO
    assert found.speedup == pytest.approx(amdahl(0.3, 312 / 156))


def test_fp32_on_turing_suggests_fp16_with_loss_scaling() -> None:
    found = precision.precision(ctx(T4, matmul_dtype="fp32", mfu=0.2))
    assert "fp16" in found.title and "grad_scaler" in found.action
    assert found.speedup == pytest.approx(amdahl(0.2, 65 / 8.1))


def test_precision_what_if_plan_uses_the_plan_and_an_assumed_mfu() -> None:
    plan = plan_for("A100-SXM4-80GB", precision="fp32")
    cpu_run = measured_on(CPU, matmul_dtype="fp32")
    found = precision.precision(Context.build(plan.hardware, plan, cpu_run))
    assert found.speedup == pytest.approx(amdahl(DEFAULT_MFU, 312 / 19.5))
    assert "assumed" in found.expected_gain
    bf16 = plan_for("A100-SXM4-80GB")
    assert precision.precision(Context.build(bf16.hardware, bf16, cpu_run)) is None


def test_fp16_on_ampere_torch_suggests_bf16_keras_only_on_scale_trouble() -> None:
    found = precision.precision(ctx(A100, matmul_dtype="fp16"))
    assert found.id == "precision_bf16" and found.severity is Severity.INFO
    assert precision.precision(ctx(A100, framework="tensorflow", matmul_dtype="fp16")) is None
    dropped = {"loss_scale": {"initial": 32768.0, "history": [[100, 512.0]]}}
    found = precision.precision(
        ctx(A100, framework="tensorflow", matmul_dtype="fp16", facts=dropped)
    )
    assert "mixed_bfloat16" in found.action


@pytest.mark.parametrize(
    ("hardware", "dtype"),
    [(CPU, "fp32"), (A100, "bf16"), (T4, "fp16"), (what_if("Tesla P100 PCIe 16GB"), "fp32")],
)
def test_precision_quiet(hardware, dtype) -> None:
    assert precision.precision(ctx(hardware, matmul_dtype=dtype)) is None


# -- memory --------------------------------------------------------------------------------


def test_low_peak_memory_gives_the_batch_that_fits() -> None:
    facts = {"batch_size": 32, "model_state_bytes": int(2e9)}
    found = memory.memory(ctx(A100, peak_memory_bytes=int(10e9), facts=facts))
    per_sample = (10e9 - 2e9) / 32
    fits = int((0.9 * 80e9 - 2e9) / per_sample)
    assert found.id == "memory_headroom" and found.severity is Severity.INFO
    assert found.evidence["batch_that_fits"] == fits - fits % 8
    assert found.evidence["per_sample_mb"] == pytest.approx(per_sample / 1e6)
    assert f"batch_size={fits - fits % 8}" in found.action


def test_near_the_limit_is_an_oom_warning() -> None:
    found = memory.memory(ctx(A100, peak_memory_bytes=int(76e9), facts={"batch_size": 64}))
    assert found.id == "memory_pressure" and found.severity is Severity.WARNING
    assert "accumulation_steps=2" in found.action and "batch_size=32" in found.action
    assert "checkpoint" in found.action
    keras = memory.memory(ctx(A100, framework="tensorflow", peak_memory_bytes=int(76e9)))
    assert "gradient_accumulation_steps" in keras.action


@pytest.mark.parametrize("peak", [None, int(60e9)])  # not measured; between the thresholds
def test_memory_quiet(peak) -> None:
    assert memory.memory(ctx(A100, peak_memory_bytes=peak, facts={"batch_size": 32})) is None


def test_memory_headroom_not_worth_a_verdict_below_twice_the_batch() -> None:
    # 30 GB for 32 samples on 80 GB: about 2x fits after the margin, just below the bar.
    assert memory.memory(ctx(A100, peak_memory_bytes=int(37e9), facts={"batch_size": 32})) is None


# -- alignment -----------------------------------------------------------------------------


def test_alignment_names_layers_and_the_batch() -> None:
    layers = [
        {"name": "lm_head", "type": "Linear", "dims": {"in_features": 768, "out_features": 50257}},
        {"name": "fc", "type": "Linear", "dims": {"in_features": 768, "out_features": 3072}},
        {"name": "classifier", "type": "Linear", "dims": {"in_features": 768, "out_features": 10}},
    ]
    found = alignment.alignment(
        ctx(A100, matmul_dtype="bf16", facts={"layers": layers, "batch_size": 100})
    )
    assert found.severity is Severity.WARNING  # bf16 on tensor cores
    assert found.evidence["misaligned"] == ["lm_head (Linear out_features=50257)", "batch_size=100"]
    # GPT-2's vocabulary is padded to a multiple of 64 (nanoGPT's 50304), not of 8.
    assert found.evidence["vocabulary"] == ["lm_head (Linear out_features=50257)"]
    assert "50304" in found.action and "50264" not in found.action
    assert "batch_size=104" in found.action


def test_alignment_on_fp8_wants_sixteen() -> None:
    layers = [
        {"name": "proj", "type": "Linear", "dims": {"in_features": 1024, "out_features": 1032}}
    ]
    assert alignment.alignment(ctx(H100, matmul_dtype="bf16", facts={"layers": layers})) is None
    found = alignment.alignment(ctx(H100, matmul_dtype="fp8", facts={"layers": layers}))
    assert found.evidence["multiple"] == 16


def test_alignment_without_tensor_cores_is_info() -> None:
    layers = [{"name": "head", "type": "Dense", "dims": {"in_features": 64, "out_features": 1001}}]
    found = alignment.alignment(ctx(CPU, matmul_dtype="fp32", facts={"layers": layers}))
    assert found.severity is Severity.INFO and "tensor cores" in found.title


# -- Keras policy --------------------------------------------------------------------------


def test_keras_layers_off_policy_warn_with_a_datasheet_gain() -> None:
    facts = {
        "keras_policy": "mixed_float16",
        "keras_matmul_layers": 3,
        "keras_layers_off_policy": [{"name": "wide", "type": "Dense", "compute_dtype": "float32"}],
    }
    found = keras_policy.keras_policy(ctx(A100, framework="tensorflow", mfu=0.3, facts=facts))
    assert found.severity is Severity.WARNING and "wide (Dense, float32)" in found.title
    assert found.speedup == pytest.approx(amdahl(0.3, 312 / 156))
    assert found.action.startswith("rebuild the model after accelkit.auto_configure(")
    assert keras_policy.keras_policy(ctx(A100, facts={**facts, "keras_policy": "float32"})) is None
    assert (
        keras_policy.keras_policy(ctx(A100, facts={**facts, "keras_layers_off_policy": []})) is None
    )


# -- distribution --------------------------------------------------------------------------


def test_idle_gpus_torch_and_keras() -> None:
    four = what_if("A100-SXM4-80GB", 4)
    found = distribution.idle_gpus(ctx(four))
    assert found.severity is Severity.WARNING and found.speedup == 4
    assert "torchrun --nproc-per-node 4" in found.action
    keras = distribution.idle_gpus(ctx(four, framework="tensorflow", facts={"devices_used": 1}))
    assert "strategy.scope()" in keras.action
    assert (
        distribution.idle_gpus(ctx(four, framework="tensorflow", facts={"devices_used": 4})) is None
    )
    assert distribution.idle_gpus(ctx(four, world_size=4)) is None
    assert distribution.idle_gpus(ctx(A100)) is None


def test_data_parallel_on_several_gpus_is_a_warning() -> None:
    found = distribution.data_parallel(
        ctx(what_if("A100-SXM4-80GB", 2), facts={"data_parallel": True})
    )
    assert found.severity is Severity.WARNING and "DistributedDataParallel" in found.action
    assert distribution.data_parallel(ctx(A100)) is None


# -- stability -----------------------------------------------------------------------------


def test_loss_scale_collapse_is_critical_and_a_steady_scale_is_quiet() -> None:
    collapsed = {"loss_scale": {"initial": 65536.0, "history": [[50, 1024.0], [100, 0.25]]}}
    found = stability.loss_scale(ctx(A100, precision="fp16", facts=collapsed))
    assert found.severity is Severity.CRITICAL and found.evidence["lowest_scale"] == 0.25
    assert math.isclose(found.evidence["initial_scale"], 65536.0)
    fallen = {"loss_scale": {"initial": 65536.0, "history": [[50, 32.0], [100, 64.0]]}}
    assert stability.loss_scale(ctx(A100, facts=fallen)).severity is Severity.WARNING
    steady = {"loss_scale": {"initial": 65536.0, "history": [[50, 8192.0], [100, 16384.0]]}}
    assert stability.loss_scale(ctx(A100, facts=steady)) is None
    assert stability.loss_scale(ctx(A100)) is None


def test_nonfinite_losses_are_critical_and_ranked_first() -> None:
    found = advise(
        None,
        plan_for("Tesla T4"),
        measured_on(
            T4,
            losses=[2.3, float("nan")],
            input_wait_share=0.5,
            facts={"first_nonfinite_loss_step": 150},
        ),
    )
    assert ids(found)[:2] == ["nonfinite_loss", "input_bound"]
    assert found[0].evidence["first_nonfinite_by_step"] == 150
    assert found[0].evidence["nonfinite_epochs"] == [2]
    assert "fp32" in found[0].action  # fp16 on a T4: no bf16 to move to


# -- reliability ---------------------------------------------------------------------------


def test_long_run_without_ecc_advises_checkpoints() -> None:
    found = reliability.no_ecc(ctx(RTX4090, facts={"run_seconds": 3 * 3600}))
    assert found.severity is Severity.INFO and found.evidence["run_hours"] == 3.0
    assert "torch.save" in found.action
    assert reliability.no_ecc(ctx(RTX4090, facts={"run_seconds": 600})) is None
    assert reliability.no_ecc(ctx(A100, facts={"run_seconds": 3 * 3600})) is None  # ECC
    measured_elsewhere = measured_on(CPU, facts={"run_seconds": 3 * 3600})
    assert reliability.no_ecc(Context.build(RTX4090, None, measured_elsewhere)) is None


# -- the whole advisor ---------------------------------------------------------------------


def test_healthy_gpu_run_gets_no_advice() -> None:
    healthy = measured_on(
        A100,
        matmul_dtype="bf16",
        mfu=0.45,
        input_wait_share=0.01,
        gpu_utilization=97.0,
        peak_memory_bytes=int(60e9),
        step_time_s=0.2,
        losses=[2.0, 1.5],
        facts={
            "batch_size": 64,
            "run_seconds": 7200,
            "layers": [
                {
                    "name": "fc",
                    "type": "Linear",
                    "dims": {"in_features": 4096, "out_features": 4096},
                }
            ],
            "loss_scale": None,
            "visible_gpus": 1,
        },
    )
    assert advise(A100, plan_for("A100-SXM4-80GB"), healthy) == []


def test_empty_measurements_give_no_advice() -> None:
    assert advise(None, None, {}) == []
    assert advise(CPU, None, {"framework": "tensorflow"}) == []


def test_memory_prediction_warns_only_past_its_slack() -> None:
    """The plan's memory estimate against the measured peak (issue 26)."""
    from accelkit.advisor.context import Context
    from accelkit.advisor.rules.memory import PREDICTION_SLACK, memory_prediction

    def ctx(peak: float) -> Context:
        facts = {"predicted_memory_bytes": 20e9, "memory_choice": "fsdp2"}
        return Context.build(None, None, {"peak_memory_bytes": peak, "facts": facts})

    assert memory_prediction(ctx(20e9 * (1 + PREDICTION_SLACK))) is None
    found = memory_prediction(ctx(26e9))
    assert found is not None and found.evidence["measured_over_predicted"] == 1.3
    assert "activation_bytes" in found.action and found.evidence["memory_choice"] == "fsdp2"
