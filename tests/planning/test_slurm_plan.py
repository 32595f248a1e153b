"""The planner under SLURM's srun, from plain-data snapshots: DDP for PyTorch,
MultiWorkerMirroredStrategy for TensorFlow, torchrun's and TF_CONFIG's variables first."""

from __future__ import annotations

from accelkit.hardware.environment import read_launcher
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Distribution, Request, plan

SRUN = {
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "4",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "gpu[01-02]",
    "SLURM_JOB_ID": "777",
}


def hardware(environ: dict[str, str], gpus: int = 0) -> HardwareInfo:
    return HardwareInfo(
        gpus=tuple(
            GpuInfo(index=i, name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0))
            for i in range(gpus)
        ),
        launcher=read_launcher(environ),
        source="snapshot",
    )


def test_two_tasks_on_cpu_give_ddp_over_gloo_naming_slurm() -> None:
    two = {**SRUN, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NNODES": "1"}
    result = plan(hardware(two), Request())  # rank 1 of 2: rank 3 of 2 trains alone (E19)
    assert result.distribution is Distribution.DDP
    setting = result.get("torch.distributed.backend")
    assert setting.value == "gloo"
    assert "SLURM" in setting.reason and "2 tasks on 1 node(s)" in setting.reason
    assert "gpu01:15777" in setting.reason
    assert result.get("torch.cuda.set_device") is None


def test_gpus_give_nccl_and_the_local_task_gpu() -> None:
    result = plan(hardware(SRUN, gpus=2), Request())
    assert result.value("torch.distributed.backend") == "nccl"
    assert result.value("torch.cuda.set_device") == 1
    assert "SLURM_LOCALID" in result.get("torch.cuda.set_device").reason
    # two nodes without InfiniBand: the same NCCL advice as under torchrun
    assert result.get("NCCL_SOCKET_IFNAME") is not None


def test_one_gpu_bound_per_task_is_device_zero() -> None:
    assert plan(hardware(SRUN, gpus=1), Request()).value("torch.cuda.set_device") == 0


def test_torchrun_inside_srun_is_planned_as_torchrun() -> None:
    torchrun = {
        **SRUN,
        "RANK": "9",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "16",
        "LOCAL_WORLD_SIZE": "8",
        "TORCHELASTIC_RUN_ID": "x",
    }
    setting = plan(hardware(torchrun), Request()).get("torch.distributed.backend")
    assert "torchrun started 16 processes" in setting.reason


def test_one_task_plans_no_distribution() -> None:
    result = plan(hardware({**SRUN, "SLURM_NTASKS": "1"}), Request())
    assert result.distribution is Distribution.NONE


def test_tensorflow_under_srun_is_multi_worker_through_slurm() -> None:
    result = plan(hardware(SRUN), Request(framework="tensorflow"))
    assert result.distribution is Distribution.MULTI_WORKER_MIRRORED
    setting = result.get("tf.distribute.Strategy")
    assert "RING" in setting.value and "SlurmClusterResolver" in setting.reason
    assert "4 tasks on 2 node(s)" in setting.reason
    assert "NCCL" in plan(hardware(SRUN, gpus=4), Request(framework="tensorflow")).value(
        "tf.distribute.Strategy"
    )


def test_tf_config_wins_over_slurm() -> None:
    config = '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}'
    setting = plan(hardware({**SRUN, "TF_CONFIG": config}), Request(framework="tensorflow")).get(
        "tf.distribute.Strategy"
    )
    assert "TF_CONFIG names 2 workers" in setting.reason
