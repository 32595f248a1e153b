"""One rank of tests/distributed/test_torch_fit_model_size.py, started by torchrun on the
CPU (gloo): the README's two lines, a plan without the model's size then the fit, for a
model too big for the GPU the plan is for.

    torchrun --nproc-per-node 2 tests/distributed/torch_model_size_worker.py OUT

The plan is for 2 H100s of 1.02 GB each (18 MB usable: a what-if snapshot as plain data),
the model about 1M parameters (17 MB of AdamW state): a whole replica does not fit. Two
fits of the same model from the same start: first with a plan that carries an estimate
(made for 1,000 parameters: DDP), then with the same plan without one (planned from the
model: FSDP2). Each rank writes OUT/rank<R>.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import torch

import accelkit
import accelkit.torch
from accelkit.planning import Request, plan

SMALL_GPU_BYTES = 1_020_000_000


def small_gpus() -> accelkit.HardwareInfo:
    hardware = accelkit.what_if("H100", 2)
    gpus = tuple(dataclasses.replace(g, memory_bytes=SMALL_GPU_BYTES) for g in hardware.gpus)
    return dataclasses.replace(hardware, gpus=gpus)


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU()) for _ in range(4)]
    return torch.nn.Sequential(torch.nn.Linear(16, 512), *blocks, torch.nn.Linear(512, 4))


def fit(model: torch.nn.Module, given) -> tuple[list[float], dict]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=generator)
    y = (x @ torch.randn(16, 4, generator=generator)).argmax(1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    losses: list[float] = []

    def loss_fn(output, target):
        loss = torch.nn.functional.cross_entropy(output, target)
        losses.append(float(loss.detach()))
        return loss

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    report = accelkit.torch.fit(
        model, loader, optimizer, loss_fn, plan=given, progress=False, tune=False, warmup=1
    )
    gathered: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, losses)
    return [sum(step) / len(step) for step in zip(*gathered, strict=True)], report.to_dict()


def main(out: str) -> None:
    accelkit.auto_configure(framework="torch", verbose=False)  # the gloo group of the ranks
    hardware = small_gpus()
    result = {}
    for name, given in (
        ("estimated", plan(hardware, Request(params=1_000))),
        ("unsized", plan(hardware)),
    ):
        model = net()
        losses, report = fit(model, given)
        first = next(model.parameters())
        local = first.to_local() if hasattr(first, "to_local") else first
        result[name] = {
            "losses": losses,
            "report": report,
            "parameters": sum(p.numel() for p in model.parameters()),
            "first_type": type(first).__name__,
            "first_local_share": local.numel() / first.numel(),
        }
    rank = int(os.environ["RANK"])
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
