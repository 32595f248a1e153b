"""What one kernel launch costs a step beyond its run (the projection's host floor).

Three ways of running `--kernels` kernels that each do almost nothing (an in-place add
on one float), timed with the device synchronised at both ends, `--repeats` times:

- ``eager``: PyTorch ops issued one by one from Python, as an uncompiled step issues
  them: the dispatcher's time, the launch and the kernel;
- ``graph``: the same kernels captured once as a CUDA graph and replayed: the GPU's own
  time per kernel, launch overhead gone (what CUDA graphs leave);
- ``graph_20``: graphs of 20 kernels replayed one after another, as NVIDIA's CUDA graphs
  post measured (A. Gray, "Getting Started with CUDA Graphs", NVIDIA Technical Blog, 2019).

The difference ``eager - graph`` is what a launch from eager PyTorch costs beyond the
kernel: `accelkit.advisor.projection.LAUNCH_GAP_S`'s measurement.

    PYTHONPATH=src python3 benchmarks/launch_gap.py --out launch_gap.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def timed(torch: Any, run: Any, kernels: int) -> float:
    """Seconds per kernel of `run()`, which launches `kernels` kernels."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / kernels


def measure(torch: Any, kernels: int, repeats: int) -> dict[str, list[float]]:
    x = torch.zeros(1, device="cuda")

    def eager() -> None:
        eager_kernels(x, kernels)

    eager()  # warm-up: the first launches load the kernel
    stream = torch.cuda.Stream()  # graphs are captured after a warm-up on a side stream
    with torch.cuda.stream(stream):
        eager()
    torch.cuda.current_stream().wait_stream(stream)
    graph, small = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        eager_kernels(x, kernels)
    with torch.cuda.graph(small):
        eager_kernels(x, 20)

    def graph_20() -> None:
        for _ in range(kernels // 20):
            small.replay()

    found: dict[str, list[float]] = {"eager": [], "graph": [], "graph_20": []}
    for _ in range(repeats):
        found["eager"].append(timed(torch, eager, kernels))
        found["graph"].append(timed(torch, graph.replay, kernels))
        found["graph_20"].append(timed(torch, graph_20, kernels // 20 * 20))
    return found


def eager_kernels(x: Any, kernels: int) -> None:
    for _ in range(kernels):
        x.add_(1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    found = measure(torch, args.kernels, args.repeats)
    rows = {name: statistics.median(values) for name, values in found.items()}
    result = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "kernels": args.kernels, "repeats": found,
        "median_us": {name: value * 1e6 for name, value in rows.items()},
        "launch_gap_us": (rows["eager"] - rows["graph"]) * 1e6,
    }  # fmt: skip
    print(f"{'way':9} {'µs per kernel (median)':>22} {'spread':>16}")
    for name, values in found.items():
        low, high = min(values) * 1e6, max(values) * 1e6
        print(f"{name:9} {rows[name] * 1e6:22.2f} {low:7.2f}-{high:<8.2f}")
    print(f"eager launch beyond the kernel: {result['launch_gap_us']:.2f} µs")
    if args.out:
        with open(args.out, "w") as file:
            json.dump(result, file, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
