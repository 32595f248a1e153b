"""Start `torchrun` (or one bare rank) as a subprocess for the PyTorch distributed tests.

Each launch runs in its own process session, killed whole when it outlives its
timeout, so a hang fails the test instead of leaving workers behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKER = str(Path(__file__).with_name("torch_worker.py"))
_LAUNCHER_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TF_CONFIG",
    "ACCELKIT_DIST_TIMEOUT",
    "ACCELKIT_DISABLE",
)


@dataclasses.dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def explain(self) -> str:
        """What went wrong, for an assertion message: stderr without C++ stack frames."""
        lines = [
            line for line in self.stderr.splitlines() if not line.lstrip().startswith("frame #")
        ]
        return (
            f"exit {self.returncode} after {self.seconds:.1f} s\nstdout tail:\n"
            f"{self.stdout[-1500:]}\nstderr:\n" + "\n".join(lines)[-6000:]
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
    env.update(
        PYTHONPATH=str(ROOT / "src"),
        OMP_NUM_THREADS="1",
        ACCELKIT_DIST_TIMEOUT="30",
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",
    )
    env.update(extra)
    return env


def run(command: list[str], env: dict[str, str], timeout: float) -> Finished:
    start = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(
            f"{' '.join(command)} still running after {timeout} s; stderr tail:\n{err[-3000:]}"
        ) from None
    return Finished(process.returncode, out, err, time.monotonic() - start)


def torchrun(
    *args: str, nproc: int = 2, port: int | None = None, timeout: float = 90, **env: str
) -> Finished:
    """``python -m torch.distributed.run --nproc-per-node N --master-port P ARGS``; without
    `port`, ``--standalone``: torchrun binds a free port itself, so concurrent test runs
    cannot race for one."""
    where = ["--master-port", str(port)] if port else ["--standalone"]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        *where,
        *args,
    ]
    done = run(command, environment(**env), timeout)
    if _aborted_at_exit(done):
        # gloo's teardown race: every rank finished, then one aborted as a gloo thread
        # released a finished collective after the interpreter began to shut down
        # ("terminate called without an active exception"). accelkit's exit handlers
        # prevent it where accelkit started the group or gathered the fit's figures
        # (torch_adapter.settle_at_exit, test_torch_exit.py); a worker that starts gloo
        # and ends on its own collective still meets it. Run once more; a second abort
        # fails the test.
        done = run(command, environment(**env), timeout)
    return done


def ranks_written(
    out: Path, *args: str, nproc: int = 2, timeout: float = 90, **env: str
) -> list[dict[str, Any]]:
    """`torchrun` of `args` with `out` as the last argument, which must succeed; then what
    each rank wrote to ``out/rank<R>.json``."""
    done = torchrun(*args, str(out), nproc=nproc, timeout=timeout, **env)
    assert done.returncode == 0, done.explain()
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(nproc)]


def _aborted_at_exit(done: Finished) -> bool:
    """Aborted in teardown with no Python error before it (a rank's own error retries
    nothing)."""
    abort = "terminate called without an active exception"
    before = done.stderr.split(abort, 1)[0]
    return (
        done.returncode != 0
        and abort in done.stderr
        and "Traceback (most recent call last)" not in before
    )
