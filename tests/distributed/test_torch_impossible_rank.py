"""A launcher environment whose rank is not below its world size (RANK=5 with
WORLD_SIZE=2, or SLURM's): no rendezvous could complete, so auto_configure says so at
once and fit trains the process alone, instead of waiting ACCELKIT_DIST_TIMEOUT."""

from __future__ import annotations

import json
import sys

import pytest

from .torch_launch import WORKER, environment, free_port, run

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]

LAUNCHERS = {
    "torchrun": {"RANK": "5", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
    "slurm": {"SLURM_PROCID": "5", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"},
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_beyond_the_world_size_trains_alone_at_once(tmp_path, launcher) -> None:
    """Issue faults4 E19: it waited the whole timeout for peers that cannot exist."""
    env = environment(
        **LAUNCHERS[launcher],
        SLURM_JOB_NODELIST="localhost",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        ACCELKIT_DIST_TIMEOUT="3600",  # a rendezvous tried would outlast the run's limit
    )
    done = run([sys.executable, WORKER, "alone", str(tmp_path)], env, timeout=300)
    assert done.returncode == 0, done.explain()
    rank, world = (
        ("SLURM_PROCID", "SLURM_NTASKS") if launcher == "slurm" else ("RANK", "WORLD_SIZE")
    )
    named = f"{rank}=5 is not a rank of {world}=2 processes (0 to 1)"
    written = "rank0.json" if launcher == "slurm" else "rank5.json"  # the worker's RANK, or 0
    result = json.loads((tmp_path / written).read_text())
    plan = result["plan"]
    assert any(named in note for note in plan["notes"]), plan["notes"]
    assert "torch.distributed.backend" not in {s["key"] for s in plan["settings"]}
    assert named in done.stderr.replace("\n  ", " ")  # the plan, shown
    assert result["report"]["world_size"] == 1 and result["report"]["steps"] == 2 * 32
