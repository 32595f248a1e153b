"""One rank of the GPU gradient all-reduce test: two ranks share one CUDA device, over gloo.

    python -m torch.distributed.run --nproc-per-node 2 \
        tests/distributed/torch_comm_gpu_worker.py OUT

NCCL refuses two ranks on one GPU, so the script starts a gloo group itself before
`auto_configure` (which keeps it) and every rank trains on ``cuda:0`` (the fit's device
is the local rank modulo the GPUs). That is the CUDA-event timing of
`accelkit.torch.distributed.communication` in a real multi-process run, on a one-GPU machine.

Each rank writes OUT/rank<R>.json with:
    timed      a fit under the GPU's plan (bf16 on an H200): its report, the checksum;
    plain      the same fit through plain DDP (no hook, no bucket views): checksum, losses;
    eager      tune=True, compile=False, on a BatchNorm model: the DDP candidates (bf16
               gradients and no buffer broadcast among them), every rank's buffers;
    compiled   tune=True, compile=True: the same candidates on the compiled step.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

import accelkit
import accelkit.torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from torch_comm_worker import checksum, fit, gathered, normalised, timed_and_plain
from torch_data import separable


def main(out: str) -> None:
    torch.distributed.init_process_group("gloo")
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    rank = torch.distributed.get_rank()
    result = timed_and_plain(plan, rank)
    result["timed"]["report"] = result["timed"]["report"].to_dict()

    for name, compiled in (("eager", False), ("compiled", True)):
        model = normalised(rank)  # BatchNorm: every DDP lever applies
        # six candidates x 10 steps (bf16 plan) leave about 65 steady steps of these 128
        report = fit(model, separable(n=8192, shuffle=True), plan, tune=True, compile=compiled)
        result[name] = {
            "tuning": report.tuning,
            "ddp": report.facts.get("ddp"),
            "communication_share": report.communication_share,
            "notes": report.notes,
            "checksums": gathered(checksum(model)),
            "buffers": gathered(checksum(model, "buffers")),
        }

    torch.distributed.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)


if __name__ == "__main__":
    main(sys.argv[1])
