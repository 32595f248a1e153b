"""The gradient all-reduce timing (`accelkit.torch.distributed.communication`) for the DDP model a
trainer built: Lightning's strategy holds its wrapper; the Hugging Face `Trainer` hands
its callbacks the module it was given, not the `DistributedDataParallel` it trains
through, so that wrapper is looked up among the live objects once per fit.
"""

from __future__ import annotations

import gc
from typing import Any

from accelkit.hardware import environment
from accelkit.torch.distributed import communication
from accelkit.utils.imports import require


def time_all_reduce(ddp: Any, meter: Any) -> None:
    """Time `ddp`'s gradient all-reduce in `meter`'s report (`communication.timed`), unless
    ``ACCELKIT_COMM_TIMING=0`` (said in the notes); anything but a DDP model is left alone.
    Register before the first backward pass."""
    torch = require("torch")
    if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
        return
    if not environment.comm_timing():
        meter.note("communication_share", environment.COMM_TIMING_OFF)
        return
    communication.timed(ddp, meter)


def wrapper_of(module: Any) -> Any:
    """The `DistributedDataParallel` whose module is `module`, or None (no process group
    of several ranks, or no such wrapper). Walks the garbage collector's objects: run it
    once, where a trainer has wrapped the module but not yet trained it."""
    torch = require("torch")
    dist = torch.distributed
    if module is None or not dist.is_available() or not dist.is_initialized():
        return None
    if dist.get_world_size() < 2:
        return None
    ddp = torch.nn.parallel.DistributedDataParallel
    return next((o for o in gc.get_objects() if isinstance(o, ddp) and o.module is module), None)
