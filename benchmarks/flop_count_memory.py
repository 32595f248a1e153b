"""The device memory of the first step's FLOP count against a training step's (issue 26).

`accelkit.torch.fit` counts the FLOPs of one step by running it under `FlopCounterMode`
(`accelkit.profiling.flops_torch.count_train_step_flops`) before training. With
activation checkpointing, the fit's peak memory on an H200 was 1.5-10 GB above a plain
loop's (benchmarks/memory_model.py --part fit). This measures, for Hugging Face GPT-2
with and without ``gradient_checkpointing_enable()``, bf16 autocast, the allocator's peak
of: a training step; accelkit's count of one step; PyTorch's own `FlopCounterMode`
around the same step.

    PYTHONPATH=src python3 benchmarks/flop_count_memory.py --out flop_count_memory.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


def peak_of(torch: Any, run: Callable[[], None]) -> int:
    """The allocator's peak during `run` beyond what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - before)


def row(name: str, layers: int, width: int, heads: int, checkpointing: bool) -> dict[str, Any]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import GPT2Config, GPT2LMHeadModel

    from accelkit.profiling.flops_torch import count_train_step_flops

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads)
    model = GPT2LMHeadModel(config).cuda()
    if checkpointing:
        model.gradient_checkpointing_enable()
    ids = torch.randint(0, config.vocab_size, (8, 1024), device="cuda")
    batch = {"input_ids": ids, "labels": ids}

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    def torch_counter() -> None:
        with FlopCounterMode(display=False):
            step()

    def autocast() -> Any:
        return torch.autocast("cuda", dtype=torch.bfloat16)

    out = {"model": name, "checkpointing": checkpointing}
    out["step_bytes"] = peak_of(torch, step)
    out["accelkit_count_bytes"] = peak_of(
        torch, lambda: count_train_step_flops(model, batch, autocast=autocast)
    )
    out["torch_counter_bytes"] = peak_of(torch, torch_counter)
    out["step_again_bytes"] = peak_of(torch, step)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    import torch

    rows = []
    print(f"{'model':<13}{'ckpt':>5}{'step GB':>9}{'accelkit count':>16}{'FlopCounterMode':>17}")
    for name, shape in (("gpt2", (12, 768, 12)), ("gpt2-medium", (24, 1024, 16))):
        for checkpointing in (False, True):
            found = row(name, *shape, checkpointing)
            rows.append(found)
            torch.cuda.empty_cache()  # the model is gone with row's frame
            print(
                f"{name:<13}{'yes' if checkpointing else 'no':>5}"
                f"{found['step_bytes'] / 1e9:>9.2f}{found['accelkit_count_bytes'] / 1e9:>16.2f}"
                f"{found['torch_counter_bytes'] / 1e9:>17.2f}",
                flush=True,
            )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
