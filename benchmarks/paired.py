"""Paired timing rounds, shared by the benchmarks that compare variants of one step in
one process (comm_hook_overhead.py, ddp_cost.py): each variant trains `steps` steps per
round, the device synchronised at both ends, in an order that rotates every round, so
a drift of the clock or the machine falls on every variant alike. `OneRank` is their
common set-up: this torchrun rank's device and process group, a built-in model and its
batch, and the bf16 training step."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass
class OneRank:
    """This rank's model, batch and device (`set_up`), and the step that trains it."""

    torch: Any
    device: Any
    model: Any
    inputs: Any
    targets: Any
    loss_fn: Any
    channels_last: bool

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def label(self) -> str:
        """``cuda:0 NVIDIA H200``, or ``cpu``."""
        name = f" {self.torch.cuda.get_device_name(self.device)}" if self.cuda else ""
        return str(self.device) + name

    @property
    def ddp_devices(self) -> dict[str, Any]:
        """`DistributedDataParallel`'s device arguments for this rank (none on the CPU)."""
        index = self.device.index
        return {"device_ids": [index], "output_device": index} if self.cuda else {}

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def step(self, model: Any, optimizer: Any) -> Callable[[], None]:
        """One training step of `model` on the batch: bf16 autocast on CUDA."""
        autocast = self.torch.autocast(
            self.device.type, dtype=self.torch.bfloat16, enabled=self.cuda
        )
        inputs, targets, loss_fn = self.inputs, self.targets, self.loss_fn

        def step() -> None:
            with autocast:
                loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step


def set_up(
    name: str, batch_size: int | None, channels_last: bool | None, cudnn_benchmark: bool = False
) -> OneRank:
    """Start the process group (NCCL on CUDA, else gloo) on LOCAL_RANK's device and build
    the built-in model `name`; `channels_last` converts weights and images before any DDP
    wraps them (its buckets follow the weights' layout); None: for image batches, as
    accelkit.torch.fit does for a conv net."""
    import torch
    import torch.distributed as dist

    from accelkit.bench import torch_models

    cuda = torch.cuda.is_available()
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = cudnn_benchmark
    dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(0)
    model, (inputs, targets), loss_fn, _ = torch_models.build(name, batch_size, device)
    model = model.to(device)
    if channels_last is None:
        channels_last = inputs.dim() == 4
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.to(memory_format=torch.channels_last)
    return OneRank(torch, device, model, inputs, targets, loss_fn, channels_last)


def rounds(
    steps_of: Mapping[str, Callable[[], None]],
    steps: int,
    repeats: int,
    sync: Callable[[], None],
    after_round: Callable[[], None] = lambda: None,
) -> dict[str, list[float]]:
    """Seconds per step of each variant, one figure per round.

    Args:
        steps_of: per variant, what runs one training step.
        steps: steps per round.
        repeats: rounds per variant.
        sync: waits for the device (both ends of each round).
        after_round: runs once the device is synchronised after each whole round.
    """
    names = list(steps_of)
    times: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        turn = repeat % len(names)
        for name in names[turn:] + names[:turn]:
            step = steps_of[name]
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            sync()
            times[name].append((time.perf_counter() - start) / steps)
        after_round()
    return times


def medians(times: Mapping[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in times.items()}


def ratios(times: Mapping[str, list[float]], to: str) -> dict[str, list[float]]:
    """Each variant's step over `to`'s, round by round: paired rounds share the
    machine's state, so their ratios spread less than the step times do."""
    return {
        name: [mine / theirs for mine, theirs in zip(values, times[to], strict=True)]
        for name, values in times.items()
    }


def summary(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)
