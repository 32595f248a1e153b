"""One rank whose last collective is released late, started by torchrun.

    python -m torch.distributed.run --nproc-per-node 2 tests/distributed/torch_exit_worker.py MODE

gloo's worker threads release each finished collective after the rank that waited for
it has moved on, and a tensor that Python dropped meanwhile needs the GIL to go. Here
every thread of the process shares one core and gloo's threads run at the lowest
priority, as on a loaded machine, so that release comes late: while the rank exits.

Modes:
    started   auto_configure starts the process group.
    own       the script starts it.
The last collective is accelkit.torch.fit's gather of every rank's figures.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import torch

import accelkit
import accelkit.torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from torch_data import mlp, separable


def starve_gloo() -> None:
    """Every thread on this process's first core; gloo's worker threads at nice 19."""
    core = min(os.sched_getaffinity(0))
    for task in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(task), {core})
        with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as name:
            if name.read().strip() == "pt_gloo_runloop":
                os.setpriority(os.PRIO_PROCESS, int(task), 19)


def main(mode: str) -> None:
    if mode == "started":
        accelkit.auto_configure(framework="torch", verbose=False)
    else:
        torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    starve_gloo()
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    accelkit.torch.fit(model, separable(), optimizer, torch.nn.CrossEntropyLoss(), epochs=1)


if __name__ == "__main__":
    main(sys.argv[1])
