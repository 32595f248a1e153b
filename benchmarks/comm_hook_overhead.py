"""What timing the gradient all-reduce costs a DDP step (accelkit.torch.distributed.communication).

Under torchrun, one model is wrapped three times in DistributedDataParallel (the
parameters are shared; a wrapper whose forward did not run ignores the backward):

- `module`: the model itself, no DDP (the wrappers' C++ autograd hooks still fire and
  return at once): with one rank, `plain` against it is DDP's own cost per step, the
  part of a scaling loss no faster link removes;
- `plain`: DDP's own all-reduce, no hook (C++ all the way);
- `hook`: accelkit's hook with the timing off (the cost of a Python hook alone);
- `timed`: accelkit's hook timing every bucket, as accelkit.torch.fit runs it.

They train in turn, `--repeats` paired rounds of `--steps` steps each, in rotating
order, timed with the device synchronised at both ends of each round; the table gives
each one's median step time and its ratio to `plain`, and the timer's own
bookkeeping per step (`GradientTimer.host_s`), the part a faster clock cannot hide.

    PYTHONPATH=src torchrun --nproc-per-node 2 benchmarks/comm_hook_overhead.py \\
        --model resnet50 --batch-size 64 --channels-last --steps 50 --repeats 5 \\
        --out results.json
    PYTHONPATH=src torchrun --nproc-per-node 2 benchmarks/comm_hook_overhead.py --model mlp
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paired
from gpu_compare import write_json

VARIANTS = ("module", "plain", "hook", "timed")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp", help="mlp, cnn, gpt, gpt2, resnet50")
    parser.add_argument("--batch-size", type=int, default=None, help="per GPU")
    parser.add_argument("--steps", type=int, default=50, help="steps per round")
    parser.add_argument("--repeats", type=int, default=5, help="paired rounds")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument(
        "--channels-last", action="store_true", help="NHWC weights and images, as fit's conv nets"
    )
    parser.add_argument("--out", help="write the result as JSON (rank 0)")
    return parser.parse_args(argv)


def _bookkeeping_per_bucket(torch: Any, device: Any, timer_class: Any, sync: Any) -> float:
    """Seconds of `GradientTimer` bookkeeping per bucket (launch, completion mark, read),
    in one thread with nothing else running: its cost without the thread switches."""

    class Bucket:
        def __init__(self, index: int, last: bool) -> None:
            self._index, self._last = index, last
            self._buffer = torch.zeros(1024, device=device)

        def index(self) -> int:
            return self._index

        def is_last(self) -> bool:
            return self._last

        def buffer(self) -> Any:
            return self._buffer

        def __getattr__(self, name: str) -> Any:  # a GradBucket's other methods: unused
            raise AttributeError(name)

    from accelkit.torch.distributed import communication

    timer = timer_class(device)
    buckets = [Bucket(i, i == 3) for i in range(4)]
    rounds = 2000
    sampled = communication.FIRST_PASSES
    communication.FIRST_PASSES = rounds  # a timed pass's cost: time every one here
    try:
        sync()
        start = time.perf_counter()
        for _ in range(rounds):
            marks = [timer.launch(bucket, 4096) for bucket in buckets]
            for mark in marks:
                mark()
            if len(timer._pending) >= 50:
                sync()
                timer.read()
        sync()
        timer.read()
        return (time.perf_counter() - start) / (rounds * len(buckets))
    finally:
        communication.FIRST_PASSES = sampled


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    import torch
    import torch.distributed as dist

    from accelkit.torch.distributed.communication import GradientTimer, TimedHook

    run = paired.set_up(args.model, args.batch_size, channels_last=args.channels_last)
    model, device, sync = run.model, run.device, run.sync
    options: dict[str, Any] = {"bucket_cap_mb": args.bucket_cap_mb, **run.ddp_devices}
    ddp = torch.nn.parallel.DistributedDataParallel
    wrappers = {name: ddp(model, **options) for name in VARIANTS[1:]}
    wrappers["module"] = model
    timer = GradientTimer(device)
    TimedHook(None).register(wrappers["hook"])
    TimedHook(timer).register(wrappers["timed"])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    steps_of = {name: run.step(wrappers[name], optimizer) for name in VARIANTS}
    # warm-up: allocator, cuDNN, NCCL channels, bucket rebuild
    paired.rounds(steps_of, 5, 1, sync)
    timer.read()
    timer.host_s, timer._timed = 0.0, []
    times = paired.rounds(steps_of, args.steps, args.repeats, sync, after_round=timer.read)
    totals = timer.totals(0) or {}
    per_bucket = _bookkeeping_per_bucket(torch, device, GradientTimer, sync)
    timed_steps = args.steps * args.repeats
    medians = paired.medians(times)
    result = {
        "model": args.model,
        "batch_size": int(run.inputs.shape[0]),
        "channels_last": args.channels_last,
        "device": run.label,
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "steps": args.steps,
        "repeats": args.repeats,
        "step_s": times,
        "median_step_s": medians,
        "ratio_to_plain": {name: medians[name] / medians["plain"] for name in VARIANTS},
        "timer_host_us_per_step": totals.get("host_s", 0.0) / timed_steps * 1e6,
        "bookkeeping_us_per_bucket_alone": per_bucket * 1e6,
        "buckets": totals.get("buckets"),
        "exposed_ms_per_step": totals.get("exposed_s", 0.0) / timed_steps * 1e3,
        "versions": {"torch": torch.__version__},
    }
    dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    print(
        f"{args.model}, batch {result['batch_size']} per device, {result['world_size']} "
        f"ranks ({result['backend']}), {result['buckets']} buckets; median of "
        f"{args.repeats} rounds of {args.steps} steps:"
    )
    for name in VARIANTS:
        spread = f"{min(times[name]) * 1e3:.3f}-{max(times[name]) * 1e3:.3f}"
        print(
            f"  {name:6s} {medians[name] * 1e3:9.3f} ms/step ({spread})  "
            f"x{result['ratio_to_plain'][name]:.4f} plain"
        )
    print(
        f"  timer bookkeeping: {result['timer_host_us_per_step']:.1f} us per step in the run "
        f"(thread switches included); {per_bucket * 1e6:.2f} us per bucket alone"
    )
    write_json(args.out, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
