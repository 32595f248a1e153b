"""PyTorch under SLURM's srun without torchrun: two real processes started here with
srun's variables (SLURM_PROCID 0 and 1, SLURM_NTASKS=2), each calling
`auto_configure(framework="torch")` and `accelkit.torch.fit` on this CPU, gloo backend.
The rendezvous is SLURM_JOB_NODELIST's first node at 15000 + the job id's last 4 digits."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys

import pytest

from accelkit.frameworks.torch_adapter import export_slurm_env

from .torch_launch import ROOT, WORKER, Finished, environment

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]

SRUN = {
    "SLURM_NTASKS": "2",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "127.0.0.1",
    "SLURM_JOB_NAME": "train",
}


def free_job_id() -> str:
    """A job id whose derived port (15000 + its last four digits) is free here now."""
    for _ in range(200):
        port = random.randint(15000, 24999)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return f"9{port - 15000:04d}"
    raise AssertionError("no free port between 15000 and 24999")


def srun(*args: str, tasks: int = 2, timeout: float = 120, **extra: str) -> list[Finished]:
    """Start `tasks` processes as srun would (each with its SLURM_PROCID and SLURM_LOCALID),
    each in its own session, killed whole if the run outlives `timeout`."""
    base = {k: v for k, v in environment(**extra).items() if not k.startswith("SLURM_")}
    processes = [
        subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            text=True,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={
                **base,
                **SRUN,
                "SLURM_NTASKS": str(tasks),
                "SLURM_PROCID": str(task),
                "SLURM_LOCALID": str(task),
                **extra,
            },
        )
        for task in range(tasks)
    ]
    finished = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in processes:
                os.killpg(other.pid, signal.SIGKILL)
            raise AssertionError(f"a task still running after {timeout} s") from None
        finished.append(Finished(process.returncode, out, err, 0.0))
    return finished


def test_two_srun_tasks_train_as_one_run(tmp_path) -> None:
    job_id = free_job_id()
    done = srun(WORKER, "alone", str(tmp_path), SLURM_JOB_ID=job_id)
    for task in done:
        assert task.returncode == 0, task.explain()
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    port = 15000 + int(job_id[-4:])
    for rank, result in enumerate(ranks):
        plan, report = result["plan"], result["report"]
        assert plan["distribution"] == "ddp"
        backend = {s["key"]: s for s in plan["settings"]}["torch.distributed.backend"]
        assert backend["status"] == "applied", backend
        assert "SLURM" in backend["reason"] and f"127.0.0.1:{port}" in backend["reason"]
        assert "backend=gloo, world size 2" in backend["detail"]
        assert f"RANK={rank}" in backend["detail"] and f"MASTER_PORT={port}" in backend["detail"]
        assert report["world_size"] == 2
        assert [r["rank"] for r in report["ranks"]] == [0, 1]
        assert report["facts"]["distributed"] is True and report["facts"]["rank"] == rank
        assert f"rank {rank} of 2 trains on 512 of 1024" in report["facts"]["sampler"]


def _unset(monkeypatch, *names: str) -> None:
    """Unset `names` for this test; set first, so that what the test exports is undone too."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_export_keeps_what_the_user_set(monkeypatch) -> None:
    _unset(
        monkeypatch,
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "TORCHELASTIC_RUN_ID",
        "TF_CONFIG",
    )
    for name, value in {
        **SRUN,
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "0",
        "SLURM_JOB_ID": "123456",
        "MASTER_PORT": "29555",
    }.items():
        monkeypatch.setenv(name, value)
    exported = export_slurm_env()
    assert exported == {
        "RANK": "1",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
    }
    assert os.environ["MASTER_PORT"] == "29555" and os.environ["RANK"] == "1"
    assert export_slurm_env() == {}  # all set now: nothing more to do


def test_no_export_outside_slurm(monkeypatch) -> None:
    _unset(monkeypatch, *SRUN, "SLURM_PROCID", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    before = dict(os.environ)
    assert export_slurm_env() == {} and dict(os.environ) == before


_AFTER_FAILED_RENDEZVOUS = r"""
import json, os, accelkit
before = dict(os.environ)
plan = accelkit.auto_configure(framework="torch", verbose=False)
group = [s for s in plan.settings if s.key.value == "torch.distributed.backend"][0]
changed = {k: os.environ.get(k) for k in set(before) | set(os.environ)
           if os.environ.get(k) != before.get(k)}
print(json.dumps({"status": group.status.value, "detail": group.detail, "changed": changed}))
"""


def test_a_failed_rendezvous_leaves_the_environment_as_it_was() -> None:
    """Issue 25 D18: rank 0 of two, its peer never starts; the variables exported for
    ``env://`` (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR) go again, the MASTER_PORT the
    user set stays, and nothing else changed."""
    port = 15000 + int(free_job_id()[-4:])
    done = srun(
        "-c",
        _AFTER_FAILED_RENDEZVOUS,
        tasks=1,  # one process started, of the two SLURM_NTASKS names
        timeout=60,
        ACCELKIT_DIST_TIMEOUT="2",
        SLURM_NTASKS="2",
        MASTER_PORT=str(port),
    )[0]
    assert done.returncode == 0, done.explain()
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "could not apply", result
    assert "removed again" in result["detail"] and "RANK" in result["detail"]
    assert result["changed"] == {}, result["changed"]
