"""TensorFlow under SLURM's srun: the cluster resolver a multi-worker plan builds
(`SlurmClusterResolver` from srun's variables; TF_CONFIG's when both are set). The strategy
itself is the one TF_CONFIG's runs exercise (test_tf_distributed.py)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from accelkit.hardware.environment import read_launcher
from accelkit.hardware.info import HardwareInfo
from accelkit.hardware.what_if import what_if
from accelkit.planning import Distribution, Request, plan

pytestmark = pytest.mark.tensorflow
tf = pytest.importorskip("tensorflow")

SRUN = {
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "node[07]",
    "SLURM_JOB_ID": "55",
    # srun's step variables, which SlurmClusterResolver reads
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NODELIST": "node[07]",
    "SLURM_STEP_TASKS_PER_NODE": "2",
}


def multi_worker_plan(monkeypatch, environ: dict[str, str]):
    for name in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    result = plan(
        HardwareInfo(launcher=read_launcher(environ), source="snapshot"),
        Request(framework="tensorflow"),
    )
    assert result.distribution is Distribution.MULTI_WORKER_MIRRORED
    return result


def test_srun_tasks_get_a_slurm_cluster_resolver(monkeypatch) -> None:
    from accelkit.keras.strategies import cluster_resolver

    resolver = cluster_resolver(multi_worker_plan(monkeypatch, SRUN))  # on the CPU
    assert resolver.cluster_spec().as_dict() == {"worker": ["node07:8888", "node07:8889"]}
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert resolver.num_accelerators() == {}  # MultiWorkerMirroredStrategy runs on CPUs


def test_a_nodes_gpus_are_shared_out_by_slurm_cluster_resolver(monkeypatch) -> None:
    from accelkit.keras.strategies import cluster_resolver

    result = multi_worker_plan(monkeypatch, SRUN)
    four = dataclasses.replace(result, hardware=what_if("H100 SXM", 4, environ=SRUN))
    resolver = cluster_resolver(four)
    assert isinstance(resolver, tf.distribute.cluster_resolver.SlurmClusterResolver)
    assert resolver.cluster_spec().as_dict() == {"worker": ["node07:8888", "node07:8889"]}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"  # task 1 of 2 on 4 GPUs
    assert resolver.num_accelerators() == {"GPU": 2}


def test_tf_config_wins(monkeypatch) -> None:
    from accelkit.keras.strategies import cluster_resolver

    config = json.dumps(
        {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}
    )
    resolver = cluster_resolver(multi_worker_plan(monkeypatch, {**SRUN, "TF_CONFIG": config}))
    assert isinstance(resolver, tf.distribute.cluster_resolver.TFConfigClusterResolver)
