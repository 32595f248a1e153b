"""Start TensorFlow test processes: one (MirroredStrategy) or a TF_CONFIG cluster on loopback.

Every process runs in its own session and is killed whole when it outlives its
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

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(__file__).with_name("tf_worker.py"))
_CLEARED = (
    "TF_CONFIG",
    "ACCELKIT_DIST_TIMEOUT",
    "ACCELKIT_DISABLE",
    "ACCELKIT_PRECISION",
    "ACCELKIT_TEST_DIE_AT",
    "ACCELKIT_TEST_STALL_AT",
    "CUDA_VISIBLE_DEVICES",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
)


@dataclasses.dataclass
class Finished:
    returncode: int
    output: str  # stdout and stderr together
    seconds: float
    timed_out: bool = False


def free_ports(count: int) -> list[int]:
    """Ports free now (held together while chosen, so they differ)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def tf_config(ports: list[int], index: int) -> str:
    return json.dumps(
        {
            "cluster": {"worker": [f"localhost:{port}" for port in ports]},
            "task": {"type": "worker", "index": index},
        }
    )


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    # ROOT for tests.helpers, which tf_worker.py imports.
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        PYTHONUNBUFFERED="1",
        TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
    )
    env.update(extra)
    return env


def start(mode: str, out: Path, env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    log = out / f"{mode}-{len(list(out.glob('*.log')))}.log"
    process = subprocess.Popen(
        [sys.executable, SCRIPT, mode, str(out)],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, log


def wait(
    processes: list[tuple[subprocess.Popen, Path]],
    timeout: float,
    wait_for: list[int] | None = None,
) -> list[Finished]:
    """Wait for the processes (those of `wait_for` only, when given: the rest are killed
    once these end); any still running at `timeout` is killed (timed_out=True)."""
    begin = time.monotonic()
    indexes = range(len(processes)) if wait_for is None else wait_for
    timed_out = set()
    for index in indexes:
        process = processes[index][0]
        try:
            process.wait(timeout=max(timeout - (time.monotonic() - begin), 0.1))
        except subprocess.TimeoutExpired:
            timed_out.add(index)
    for index, (process, _) in enumerate(processes):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if wait_for is None or index in wait_for:
                timed_out.add(index)
    return [
        Finished(
            process.returncode,
            log.read_text(errors="replace"),
            time.monotonic() - begin,
            index in timed_out,
        )
        for index, (process, log) in enumerate(processes)
    ]


def run_mirrored(out: Path, timeout: float = 90) -> Finished:
    return wait([start("mirrored", out, environment())], timeout)[0]


def run_cluster(
    out: Path,
    *,
    workers: int = 2,
    started: int | None = None,
    ports: list[int] | None = None,
    extra: dict[int, dict[str, str]] | None = None,
    timeout: float = 90,
    dist_timeout: str = "20",
    wait_for: list[int] | None = None,
) -> list[Finished]:
    """Start `started` (default all) of the `workers` of one TF_CONFIG on loopback;
    `wait_for`: see `wait`."""
    ports = ports or free_ports(workers)
    processes = []
    for index in range(workers if started is None else started):
        env = environment(
            TF_CONFIG=tf_config(ports, index),
            ACCELKIT_DIST_TIMEOUT=dist_timeout,
            **(extra or {}).get(index, {}),
        )
        processes.append(start("worker", out, env))
    return wait(processes, timeout, wait_for)
