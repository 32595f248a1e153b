"""One process of tests/distributed/test_torch_fsdp_alone.py: the FSDP2 fit of
torch_fsdp_worker.py with no process group to start from (no launcher, or torchrun with
one rank), then the same fit unsharded (``distributed=False``). Writes OUT/alone.json."""

from __future__ import annotations

import json
import os
import sys

import torch
from torch_fsdp_worker import BATCH, fit, sharded

import accelkit


def main(out: str) -> None:
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    model, losses, report = fit(sharded(plan), tune=False)
    result = {
        "dtensor": type(next(model.parameters())).__name__,
        "world_size": torch.distributed.get_world_size(),
        "losses": losses,
        "report": report.to_dict(),
    }
    _, result["single"], _ = fit(plan, distributed=False, batch=BATCH, tune=False)
    with open(os.path.join(out, "alone.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
