"""The planner across GPU generations and topologies, from plain-data snapshots."""

from __future__ import annotations

import itertools
import json

import pytest

from accelkit.hardware.info import GpuInfo, HardwareInfo, LauncherEnv, Link
from accelkit.planning import Distribution, Framework, Plan, Precision, Request, Status, plan
from accelkit.planning.distribution import NEVER_SET

# (NVML name, compute capability) for one GPU of each generation, Pascal to Blackwell.
GENERATIONS = {
    "pascal": ("Tesla P100-PCIE-16GB", (6, 0)),
    "volta": ("Tesla V100-SXM2-32GB", (7, 0)),
    "turing": ("Tesla T4", (7, 5)),
    "turing-geforce": ("NVIDIA GeForce RTX 2080 Ti", (7, 5)),
    "ampere": ("NVIDIA A100-SXM4-80GB", (8, 0)),
    "ampere-ga10x": ("NVIDIA A10G", (8, 6)),
    "ada": ("NVIDIA L4", (8, 9)),
    "ada-geforce": ("NVIDIA GeForce RTX 4090", (8, 9)),
    "hopper": ("NVIDIA H200", (9, 0)),
    "blackwell": ("NVIDIA B200", (10, 0)),
    "blackwell-geforce": ("NVIDIA GeForce RTX 5090", (12, 0)),
}


def make_hardware(
    name: str,
    cc: tuple[int, int],
    count: int = 1,
    *,
    p2p: bool | None = True,
    nvlink: bool = False,
    environ: dict | None = None,
    mig: bool = False,
    infiniband: bool = False,
) -> HardwareInfo:
    gpus = tuple(
        GpuInfo(index=i, name=name, compute_capability=cc, memory_bytes=80 * 10**9, mig_enabled=mig)
        for i in range(count)
    )
    links = tuple(
        Link(a, b, p2p=p2p, nvlink=nvlink) for a, b in itertools.combinations(range(count), 2)
    )
    return HardwareInfo(
        gpus=gpus,
        links=links,
        launcher=LauncherEnv(**(environ or {})),
        infiniband=infiniband,
        source="snapshot",
    )


CPU = HardwareInfo(source="snapshot")
TORCHRUN_2 = {"rank": 0, "local_rank": 0, "world_size": 2, "local_world_size": 2}
TORCHRUN_2x8 = {"rank": 3, "local_rank": 3, "world_size": 16, "local_world_size": 8}
TF_CONFIG_2 = {"tf_config_workers": 2, "tf_config_task": "worker:0"}

TORCH_PRECISION = {
    "pascal": Precision.FP32,
    "volta": Precision.FP16,
    "turing": Precision.FP16,
    "turing-geforce": Precision.FP16,
    "ampere": Precision.BF16,
    "ampere-ga10x": Precision.BF16,
    "ada": Precision.BF16,
    "ada-geforce": Precision.BF16,
    "hopper": Precision.BF16,
    "blackwell": Precision.BF16,
    "blackwell-geforce": Precision.BF16,
}
TF_POLICY = {
    "pascal": "float32",
    "volta": "mixed_float16",
    "turing": "mixed_float16",
    "turing-geforce": "mixed_float16",
    "ampere": "mixed_bfloat16",
    "ampere-ga10x": "mixed_bfloat16",
    "ada": "mixed_bfloat16",
    "ada-geforce": "mixed_bfloat16",
    "hopper": "mixed_bfloat16",
    "blackwell": "mixed_bfloat16",
    "blackwell-geforce": "mixed_bfloat16",
}


@pytest.mark.parametrize("generation", sorted(GENERATIONS))
@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_torch_precision_and_tf32_by_generation(generation: str, count: int) -> None:
    name, cc = GENERATIONS[generation]
    result = plan(make_hardware(name, cc, count), Request(framework="torch"))
    assert result.precision is TORCH_PRECISION[generation]
    tf32 = result.get("torch.backends.cuda.matmul.allow_tf32")
    if cc >= (8, 0):
        assert tf32 is not None and tf32.value is True
    else:
        assert tf32 is None
    assert (result.get("grad_scaler") is not None) == (result.precision is Precision.FP16)
    mixed = result.precision in (Precision.BF16, Precision.FP16)
    assert (result.get("outputs.float32") is not None) == mixed
    assert result.value("torch.backends.cudnn.benchmark") is True
    assert result.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    for setting in result.settings:
        assert setting.reason, setting.key
        assert setting.status is Status.PLANNED


@pytest.mark.parametrize("generation", sorted(GENERATIONS))
@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_tensorflow_policy_by_generation(generation: str, count: int) -> None:
    name, cc = GENERATIONS[generation]
    result = plan(make_hardware(name, cc, count), Request(framework="tensorflow"))
    assert result.value("keras.mixed_precision.global_policy") == TF_POLICY[generation]
    mixed = TF_POLICY[generation] != "float32"
    assert (result.get("keras.float32_head") is not None) == mixed
    # Loss scaling only where float16 is the policy (Volta/Turing): bf16 has float32's range.
    assert (result.get("keras.loss_scale") is not None) == (
        TF_POLICY[generation] == "mixed_float16"
    )
    assert result.value("tf.config.experimental.set_memory_growth") is True
    assert (result.get("tf.config.experimental.enable_tensor_float_32_execution") is not None) == (
        cc >= (8, 0)
    )
    expected = Distribution.MIRRORED if count > 1 else Distribution.NONE
    assert result.distribution is expected


def test_t4_reason_names_the_gpu_and_why() -> None:
    result = plan(make_hardware("Tesla T4", (7, 5)), Request(framework="torch"))
    reason = result.get("precision").reason
    assert "Tesla T4" in reason and "7.5" in reason and "loss scaling" in reason


def test_bf16_request_on_t4_raises_with_the_numbers() -> None:
    with pytest.raises(ValueError, match="Tesla T4") as error:
        plan(make_hardware("Tesla T4", (7, 5)), Request(precision="bf16"))
    message = str(error.value)
    assert "bf16" in message and "8.0" in message and "Tesla T4" in message and "7.5" in message


def test_tf32_request_on_volta_raises() -> None:
    with pytest.raises(ValueError, match=r"compute capability >= 8\.0"):
        plan(make_hardware("Tesla V100-SXM2-32GB", (7, 0)), Request(precision="tf32"))


def test_mixed_generations_plan_for_the_oldest() -> None:
    hardware = HardwareInfo(
        gpus=(
            GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),
            GpuInfo(1, "Tesla V100-SXM2-32GB", compute_capability=(7, 0)),
        ),
        links=(Link(0, 1, p2p=True),),
    )
    result = plan(hardware, Request())
    assert result.precision is Precision.FP16
    assert result.get("torch.backends.cuda.matmul.allow_tf32") is None


def test_fp32_request_on_ampere_turns_tf32_off() -> None:
    result = plan(make_hardware("NVIDIA A100-SXM4-80GB", (8, 0)), Request(precision="fp32"))
    assert result.precision is Precision.FP32
    assert result.value("torch.backends.cuda.matmul.allow_tf32") is False
    assert result.value("torch.backends.cudnn.allow_tf32") is False
    assert result.get("outputs.float32") is None


def test_tf32_request_keeps_fp32_tensors_with_tf32_on() -> None:
    result = plan(make_hardware("NVIDIA H200", (9, 0)), Request(precision="tf32"))
    assert result.precision is Precision.TF32
    assert result.get("autocast.dtype") is None
    assert result.value("torch.backends.cuda.matmul.allow_tf32") is True


def test_tensorflow_bf16_on_request() -> None:
    result = plan(
        make_hardware("NVIDIA H200", (9, 0)), Request(framework="tensorflow", precision="bf16")
    )
    assert result.value("keras.mixed_precision.global_policy") == "mixed_bfloat16"
    assert result.get("keras.loss_scale") is None


def test_cpu_only_plans_fp32_and_no_gpu_settings() -> None:
    for framework in ("torch", "tensorflow"):
        result = plan(CPU, Request(framework=framework))
        assert result.precision is Precision.FP32
        assert result.distribution is Distribution.NONE
        assert result.env == {}
        assert "no NVIDIA GPU" in result.settings[0].reason


def test_unknown_compute_capability_is_fp32() -> None:
    hardware = HardwareInfo(gpus=(GpuInfo(0, "Mystery GPU"),))
    assert plan(hardware, Request()).precision is Precision.FP32


# -- distribution ---------------------------------------------------------------------


@pytest.mark.parametrize("count", [2, 4, 8])
def test_torch_several_gpus_without_launcher_advises_torchrun(count: int) -> None:
    result = plan(make_hardware("NVIDIA H200", (9, 0), count, nvlink=True), Request())
    assert result.distribution is Distribution.NONE
    advice = result.get("launch")
    assert advice.kind == "advice"
    assert f"torchrun --nproc-per-node {count}" in advice.value
    assert "DataParallel" in advice.reason


def test_torch_under_torchrun_uses_nccl_ddp_on_local_rank() -> None:
    hardware = make_hardware(
        "NVIDIA H200", (9, 0), 8, nvlink=True, environ=TORCHRUN_2x8, infiniband=True
    )
    result = plan(hardware, Request())
    assert result.distribution is Distribution.DDP
    assert result.value("torch.distributed.backend") == "nccl"
    assert result.value("torch.cuda.set_device") == 3
    assert "2 node" in result.get("torch.distributed.backend").reason
    # NVLink, P2P everywhere and InfiniBand: NCCL's defaults are right, nothing to set.
    assert not [s for s in result.settings if s.key.startswith("NCCL_")]


def test_torchrun_on_cpu_uses_gloo() -> None:
    hardware = HardwareInfo(launcher=LauncherEnv(**TORCHRUN_2))
    result = plan(hardware, Request())
    assert result.distribution is Distribution.DDP
    assert result.value("torch.distributed.backend") == "gloo"
    assert result.get("torch.cuda.set_device") is None


def test_no_peer_to_peer_disables_nccl_p2p_with_the_pairs() -> None:
    hardware = make_hardware(
        "NVIDIA GeForce RTX 4090",
        (8, 9),
        4,
        p2p=False,
        environ={**TORCHRUN_2, "world_size": 4, "local_world_size": 4},
    )
    result = plan(hardware, Request())
    setting = result.get("NCCL_P2P_DISABLE")
    assert setting.value == "1" and setting.kind == "env"
    assert "0-1" in setting.reason
    assert result.env["NCCL_P2P_DISABLE"] == "1"


def test_multi_node_without_infiniband_advises_socket_interface() -> None:
    hardware = make_hardware("NVIDIA A100-SXM4-80GB", (8, 0), 8, environ=TORCHRUN_2x8)
    result = plan(hardware, Request())
    advice = result.get("NCCL_SOCKET_IFNAME")
    assert advice.kind == "advice" and "InfiniBand" in advice.reason
    assert "NCCL_SOCKET_IFNAME" not in result.env


def test_tensorflow_mirrored_uses_nccl_where_peers_reach() -> None:
    result = plan(
        make_hardware("NVIDIA A100-SXM4-80GB", (8, 0), 4, nvlink=True),
        Request(framework="tensorflow"),
    )
    assert result.distribution is Distribution.MIRRORED
    assert "NcclAllReduce" in result.value("tf.distribute.Strategy")


def test_tensorflow_mirrored_without_p2p_uses_hierarchical_copy() -> None:
    result = plan(
        make_hardware("NVIDIA GeForce RTX 4090", (8, 9), 2, p2p=False),
        Request(framework="tensorflow"),
    )
    assert "HierarchicalCopyAllReduce" in result.value("tf.distribute.Strategy")


def test_a_tensorflow_what_if_past_one_server_is_a_worker_per_server() -> None:
    from accelkit import plan_for

    two = plan_for("H100 SXM", 16, framework="tensorflow")  # two HGX servers of 8
    assert two.distribution is Distribution.MULTI_WORKER_MIRRORED
    reason = two.get("tf.distribute.Strategy").reason
    assert "over 2 servers of up to 8: planned as 2 workers, one per server" in reason
    assert two.get("NCCL_SOCKET_IFNAME") is not None  # two nodes, no InfiniBand named
    one = plan_for("H100 SXM", 8, framework="tensorflow")
    assert one.distribution is Distribution.MIRRORED


def test_tensorflow_tf_config_is_multi_worker() -> None:
    result = plan(
        make_hardware("NVIDIA H100 80GB HBM3", (9, 0), 8, environ=TF_CONFIG_2),
        Request(framework="tensorflow"),
    )
    assert result.distribution is Distribution.MULTI_WORKER_MIRRORED
    assert "NCCL" in result.value("tf.distribute.Strategy")
    assert "2 workers" in result.get("tf.distribute.Strategy").reason


def test_tf_config_on_cpu_uses_ring() -> None:
    hardware = HardwareInfo(launcher=LauncherEnv(**TF_CONFIG_2))
    result = plan(hardware, Request(framework="tensorflow"))
    assert result.distribution is Distribution.MULTI_WORKER_MIRRORED
    assert "RING" in result.value("tf.distribute.Strategy")


def test_mig_means_one_slice_per_process() -> None:
    result = plan(
        make_hardware("NVIDIA A100-SXM4-80GB", (8, 0), 2, mig=True, environ=TORCHRUN_2), Request()
    )
    assert result.distribution is Distribution.NONE
    assert "MIG" in result.get("distribution").reason


def test_distribute_none_is_respected() -> None:
    result = plan(make_hardware("NVIDIA H200", (9, 0), 8), Request(distribute="none"))
    assert result.distribution is Distribution.NONE and result.get("launch") is None


def test_distribute_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="'auto' or 'none'"):
        plan(make_hardware("NVIDIA H200", (9, 0), 1), Request(distribute="ddp"))


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("generation", sorted(GENERATIONS))
def test_never_sets_nvlink_multicast(framework: str, generation: str) -> None:
    name, cc = GENERATIONS[generation]
    for environ in (None, TORCHRUN_2x8, TF_CONFIG_2):
        for p2p in (True, False):
            result = plan(
                make_hardware(name, cc, 8, p2p=p2p, environ=environ), Request(framework=framework)
            )
            assert not NEVER_SET & set(result.env)


# -- requests and plans as data ---------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "valid"),
    [
        ("precision", "float16", "'bf16'"),
        ("framework", "jax", "'tensorflow'"),
        ("distribute", "zero3", "'mirrored'"),
    ],
)
def test_bad_request_values_name_the_valid_ones(field: str, value: str, valid: str) -> None:
    with pytest.raises(ValueError, match=value) as error:
        Request(**{field: value})
    assert value in str(error.value) and valid in str(error.value)


def test_compile_request_adds_the_helper() -> None:
    torch_plan = plan(make_hardware("NVIDIA H200", (9, 0)), Request(compile=True))
    tf_plan = plan(
        make_hardware("NVIDIA H200", (9, 0)), Request(framework=Framework.TENSORFLOW, compile=True)
    )
    assert torch_plan.value("torch.compile") is True
    assert tf_plan.value("keras.jit_compile") is True


def test_fixed_shapes_false_leaves_cudnn_benchmark_off() -> None:
    result = plan(make_hardware("NVIDIA H200", (9, 0)), Request(fixed_shapes=False))
    assert result.get("torch.backends.cudnn.benchmark") is None


def test_plan_round_trips_through_json() -> None:
    original = plan(
        make_hardware("NVIDIA GeForce RTX 4090", (8, 9), 2, p2p=False, environ=TORCHRUN_2),
        Request(),
    )
    restored = Plan.from_dict(json.loads(json.dumps(original.to_dict())))
    assert restored == original


def test_plan_is_immutable() -> None:
    result = plan(CPU, Request())
    with pytest.raises(AttributeError):
        result.precision = Precision.BF16  # type: ignore[misc]
