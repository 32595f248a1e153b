"""One rank of the gradient all-reduce tests, started by torchrun on the CPU (gloo).

    python -m torch.distributed.run --nproc-per-node 2 tests/distributed/torch_comm_worker.py OUT

Each rank writes OUT/rank<R>.json with:
    timed      a fit with accelkit's defaults (the all-reduce timed, gradients as
               bucket views), its report and the parameters' checksum;
    plain      the same fit through plain DDP: ACCELKIT_COMM_TIMING=0 and
               gradient_as_bucket_view=False (no hook at all), its losses and checksum;
    tuned      tune=True under a bf16 plan (a what-if H100 plan: autocast in bf16 on the
               CPU): the DDP candidates, and the checksums of every rank;
    strict     the same with a bf16 tolerance no bf16 all-reduce meets: the candidate fails;
    given      ddp={"bucket_cap_mb": 1, "static_graph": True}: kept, not tuned;
    hooked     a model the script wrapped and hooked itself: kept, not timed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

import accelkit
import accelkit.torch
from accelkit.torch.distributed import wrapping
from accelkit.torch.tuning import levers, registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from torch_data import mlp, separable

# Rows enough that each of the 2 ranks' batches of 32 hold the trials' most steps under
# DDP, a candidate's rounds run twice included: with 4,096 (64 batches a rank) a run
# whose candidates ran their rounds again ended during the no-buffer-broadcast lever's.
TRIALS_ROWS = 2 * 32 * (registry.trial_steps(1, data_parallel=True, cuda=False) + 8)


def checksum(model, of: str = "parameters") -> str:
    """SHA-256 of the model's parameters (or ``of="buffers"``), bit for bit."""
    digest = hashlib.sha256()
    for tensor in getattr(model, of)():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def gathered(value):
    out = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, value)
    return out


def fit(model, loader, plan, **kwargs):
    return accelkit.torch.fit(
        model,
        loader,
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        torch.nn.CrossEntropyLoss(),
        plan=plan,
        warmup=2,
        window=4,
        progress=False,
        **kwargs,
    )


def timed_and_plain(plan, rank: int) -> dict:
    """Two fits of the same MLP: ``timed`` with accelkit's defaults (its report and the
    parameters' checksum), ``plain`` through plain DDP (ACCELKIT_COMM_TIMING=0, no bucket
    views: no hook at all; its losses, notes and checksum)."""
    # 16 -> 256 -> 256 -> 4: 71,172 parameters, 284,688 gradient bytes in fp32
    model = mlp(16, 256, 256, 4, seed=rank)
    report = fit(model, separable(shuffle=True), plan, epochs=2, tune=False)
    result = {"timed": {"report": report, "checksum": checksum(model)}}
    os.environ["ACCELKIT_COMM_TIMING"] = "0"
    model = mlp(16, 256, 256, 4, seed=rank)
    report = fit(
        model,
        separable(shuffle=True),
        plan,
        epochs=2,
        tune=False,
        ddp={"gradient_as_bucket_view": False},
    )
    del os.environ["ACCELKIT_COMM_TIMING"]
    result["plain"] = {
        "losses": report.losses,
        "notes": report.notes,
        "communication_share": report.communication_share,
        "checksum": checksum(model),
    }
    return result


class Counted(torch.nn.Module):
    """A model with a buffer outside any normalisation layer that changes every forward."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen += 1
        return self.inner(x)


def normalised(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    )


def buffer_broadcast(plan, rank: int) -> dict:
    """bn: tune=True on a BatchNorm model (the no-buffer-broadcast lever is tried);
    counter: on `Counted` (the lever fails); finished: `Wrapping.finish` on a model whose
    running statistics differ by rank. Each with every rank's buffers' checksum."""
    result = {}
    for name, model in (("bn", normalised(rank)), ("counter", Counted(mlp(seed=rank)))):
        report = fit(model, separable(n=TRIALS_ROWS, shuffle=True), plan, tune=True, compile=False)
        result[name] = {
            "tuning": report.tuning,
            "ddp": report.facts.get("ddp"),
            "buffers": gathered(checksum(model, "buffers")),
        }
    model = normalised(0)
    model[1].running_mean.fill_(rank)
    wrapping.Wrapping(plan, {}).finish(model, {"broadcast_buffers": False})
    result["finished"] = {
        "buffers": gathered(checksum(model, "buffers")),
        "mean": float(model[1].running_mean[0]),
    }
    return result


def main(out: str) -> None:
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    rank = int(os.environ["RANK"])
    result = timed_and_plain(plan, rank)
    result["timed"]["report"].save(os.path.join(out, "timed.json"))
    result["timed"]["report"] = result["timed"]["report"].to_dict()

    bf16 = accelkit.plan_for("H100 SXM", 2, environ=dict(os.environ))
    for name, tolerance in (("tuned", levers.BF16_GRADIENT_RTOL), ("strict", 1e-9)):
        levers.BF16_GRADIENT_RTOL = tolerance
        model = mlp(16, 256, 256, 4, seed=rank)
        report = fit(model, separable(n=TRIALS_ROWS, shuffle=True), bf16, tune=True, compile=False)
        result[name] = {
            "tuning": report.tuning,
            "ddp": report.facts.get("ddp"),
            "checksums": gathered(checksum(model)),
        }

    model = mlp(seed=rank)
    report = fit(
        model,
        separable(n=2048, shuffle=True),
        plan,
        tune=True,
        compile=False,
        ddp={"bucket_cap_mb": 1, "static_graph": True},
    )
    result["given"] = {"tuning": report.tuning, "ddp": report.facts.get("ddp")}

    wrapped = torch.nn.parallel.DistributedDataParallel(mlp(seed=0))
    wrapped.register_comm_hook(None, allreduce_hook)
    report = fit(wrapped, separable(), plan, tune=False)
    result["hooked"] = {"notes": report.notes, "ddp": report.facts.get("ddp")}

    result.update(buffer_broadcast(plan, rank))

    torch.distributed.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)


if __name__ == "__main__":
    main(sys.argv[1])
