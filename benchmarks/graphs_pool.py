"""What a CUDA-graph trial that is not kept leaves on the GPU.

`tune` tries CUDA graphs (``torch.compile(mode="reduce-overhead")``) after the default
compile, and keeps the compiled step when the graphs are not faster. The graphs record
their tensors in a private memory pool, which the caching allocator does not hand to
anything else. This script measures that pool around such a trial, on the built-in GPT-2
small (batch 8 unless told), the same way the fit's trials run it:

1. the default-compiled step, 3 steps: memory allocated and reserved (the baseline);
2. the CUDA-graphed step of the same function, 3 steps, then dropped (collected, the
   allocator's cache emptied): what stays reserved;
3. inductor's CUDA-graph trees reset (``reset_cudagraph_trees``), collected, emptied;
4. the default-compiled step again, 2 steps: it still trains (its loss is finite).

    PYTHONPATH=src python3 benchmarks/graphs_pool.py --out graphs_pool.json
"""

from __future__ import annotations

import argparse
import gc
import math
from typing import Any

import gpu_compare  # same folder: JSON helper


def _memory(torch: Any, stage: str) -> dict[str, Any]:
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.empty_cache()
    return {
        "stage": stage,
        "allocated_gb": torch.cuda.memory_allocated() / 1e9,
        "reserved_gb": torch.cuda.memory_reserved() / 1e9,
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from torch._inductor import cudagraph_trees

    from accelkit.bench import torch_models
    from accelkit.torch.tuning import graphs

    model, (x, y), loss_fn, _ = torch_models.build("gpt2", args.batch_size, "cuda")
    model.cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def forward_loss(inputs: Any, targets: Any) -> Any:
        with torch.autocast("cuda", torch.bfloat16):
            return loss_fn(model(inputs), targets)

    def train(loss_of: Any, steps: int) -> float:
        for _ in range(steps):
            loss = loss_of(x, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    compiled = torch.compile(forward_loss)
    stages = []
    train(compiled, 3)
    stages.append(_memory(torch, "compiled step, 3 steps"))
    graphed = graphs.replayed(torch, torch.compile(forward_loss, mode=graphs.REDUCE_OVERHEAD))
    train(graphed, 3)
    stages.append(_memory(torch, "CUDA-graphed step, 3 steps (live)"))
    del graphed
    stages.append(_memory(torch, "CUDA-graphed step dropped"))
    cudagraph_trees.reset_cudagraph_trees()
    stages.append(_memory(torch, "CUDA-graph trees reset"))
    loss = train(compiled, 2)
    stages.append(_memory(torch, "compiled step again, 2 steps"))
    return {
        "model": "gpt2",
        "batch_size": args.batch_size,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "stages": stages,
        "loss_after": loss,
        "trains_after": math.isfinite(loss),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = measure(args)
    print(f"gpt2 batch {args.batch_size} on {result['device']}, PyTorch {result['torch']}")
    print(f"{'stage':<40}{'allocated GB':>14}{'reserved GB':>13}")
    for stage in result["stages"]:
        print(f"{stage['stage']:<40}{stage['allocated_gb']:>14.2f}{stage['reserved_gb']:>13.2f}")
    print(f"trains after: {result['trains_after']} (loss {result['loss_after']:.4f})")
    gpu_compare.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
