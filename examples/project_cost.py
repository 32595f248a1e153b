r"""What would this run cost on other GPUs? Projections from a saved run report.

Shows: a run measured once (by `accelkit.torch.fit`, `accelkit.keras.fit`, a
`Meter` or a trainer callback) and saved with `report.save("run.json")`, then
projected onto GPUs you don't have: `accelkit.advisor.project(report, gpu,
count, price_per_hour)` estimates step and epoch time there at the run's MFU
(or 40% when the run was not on a GPU), with the host time that a faster GPU
does not shorten and the gradient all-reduce over the GPUs' NVLink or PCIe, and
the cost of an epoch at your price. Each projection lists what it assumes; one
the model cannot stand behind (a step bound by its host, an all-reduce across
servers) is "not projected", with the reason. The `accelkit report` command
does the same from the shell; this script runs it last.

Project a run you saved (prices per GPU-hour are examples: use yours):

    python examples/project_cost.py run.json
    accelkit report run.json --project "H100 SXM:8" --project L4:8 \
        --price "H100 SXM=3.5" --price L4=0.8

Without a run file the script first measures a short run here and saves it.
Smoke test (a short measured run, fine on a CPU; an MLP just large enough that its
kernels outlast their launches on these GPUs, whose gradient all-reduce then sets
the 8 L4s apart: over PCIe it takes longer than their compute):

    python examples/project_cost.py --smoke
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap

import accelkit
from accelkit.utils.units import duration, money

# (GPU as `accelkit specs` names it, how many, example on-demand price per GPU-hour in USD)
TARGETS = [
    ("L4", 8, 0.80),
    ("A100-SXM4-80GB", 8, 1.80),
    ("H100 SXM", 8, 3.50),
    ("H200", 8, 4.50),
]


def measure(path: str, smoke: bool) -> None:
    """Measure a short PyTorch run (a wide MLP) and save its report to `path`."""
    import torch

    # The smoke MLP's 4.3 GFLOP step takes 11 µs on an H100 at 40% MFU, more than the
    # 7.2 µs its 8 kernels' launches take: much smaller, and no GPU here gets a figure.
    width, batch, steps = (2048, 64, 8) if smoke else (4096, 512, 200)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, 10)
    )
    samples = steps * batch
    data = torch.utils.data.TensorDataset(
        torch.randn(samples, width), torch.randint(0, 10, (samples,))
    )
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accelkit.auto_configure(verbose=False)
    loss_fn = torch.nn.CrossEntropyLoss()
    report = accelkit.torch.fit(model, loader, optimizer, loss_fn, window=4, progress=False)
    report.save(path)
    print(f"measured {report.samples_per_second:,.0f} samples/s on {report.device}; saved {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", help="a report saved with report.save(...)")
    parser.add_argument("--smoke", action="store_true", help="measure a tiny run first")
    args = parser.parse_args()
    path = args.run
    if path is None:
        path = os.path.join(tempfile.mkdtemp(prefix="accelkit-"), "run.json")
        measure(path, args.smoke)

    report = accelkit.RunReport.load(path)
    print(f"\nthe run: {report.model} on {report.device}, {report.flops_per_step:.3e} FLOPs/step")
    found = [
        accelkit.advisor.project(report, gpu, count=count, price_per_hour=price)
        for gpu, count, price in TARGETS
    ]
    projected = [p for p in found if isinstance(p, accelkit.advisor.Projection)]
    print(f"{'GPUs':<28} {'step':>10} {'epoch':>10} {'samples/s':>12} {'$/epoch':>10}")
    for p in sorted(projected, key=lambda p: p.cost_per_epoch or 0.0):
        print(
            f"{p.count} x {p.gpu:<24} {duration(p.step_time_s):>10} {duration(p.epoch_time_s):>10} "
            f"{p.samples_per_second or 0:>12,.0f} {money(p.cost_per_epoch or 0.0):>10}"
        )
    for p in found:
        if isinstance(p, accelkit.advisor.NotProjected):
            why = textwrap.fill(f"not projected: {p.reason}", 100, subsequent_indent="    ")
            print(f"{p.count} x {p.gpu:<24} {why}")
    if projected:
        cheapest = min(projected, key=lambda p: p.cost_per_epoch or 0.0)
        print(f"\ncheapest per epoch:\n{cheapest}")  # with every assumption it rests on

    # The same from the shell: `accelkit report RUN.json --project NAME:COUNT --price NAME=USD`.
    command = [sys.executable, "-m", "accelkit", "report", path]
    for gpu, count, price in TARGETS:
        command += ["--project", f"{gpu}:{count}", "--price", f"{gpu}={price}"]
    print(f"\n$ {shlex.join(['accelkit', *command[3:]])}", flush=True)
    subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
