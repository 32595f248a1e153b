"""The planner's memory model against the memory a training step really takes (issue 26).

For Hugging Face GPT-2 small, medium, large and XL (1.5B), each with and without
``gradient_checkpointing_enable()``, in bf16 autocast with ``torch.optim.AdamW`` (its
default, multi-tensor implementation), one process each model:

- the activations are measured as the fit can measure them on its first step: the peak
  of the first forward and backward pass beyond what was allocated before it, less the
  gradients (4 bytes per parameter) and autocast's bf16 weight copies (2), which the
  model counts apart (``forward_end_bytes``: what the forward pass alone leaves);
- the prediction is ``accelkit.plan_for("H200", params=N, activation_bytes=A)
  .memory.per_gpu_bytes``;
- the measurement is ``torch.cuda.max_memory_allocated()`` over three training steps.

``--part fit`` trains the same models through ``accelkit.torch.fit`` (6 steps, tune off),
which measures the activations on its first step itself, and prints the prediction it
reports (``facts["predicted_memory_bytes"]``) against the peak it measures.

``--part checkpointing`` trains a Llama-style 300M model (``LlamaForCausalLM``, batch 8 x
2,048) through ``accelkit.torch.fit`` with and without checkpointing and prints the MFU
(model FLOPs) and HFU (the recomputed forward counted) it reports.

    PYTHONPATH=src python3 benchmarks/memory_model.py --part memory --out memory.json
    PYTHONPATH=src python3 benchmarks/memory_model.py --part fit --out fit.json
    PYTHONPATH=src python3 benchmarks/memory_model.py --part checkpointing --out ckpt.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from typing import Any

GPT2 = {  # name: (layers, width, heads), the GPT-2 paper's sizes
    "gpt2": (12, 768, 12),
    "gpt2-medium": (24, 1024, 16),
    "gpt2-large": (36, 1280, 20),
    "gpt2-xl": (48, 1600, 25),
}


def memory_row(name: str, checkpointing: bool, batch: int, length: int) -> dict[str, Any]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import accelkit

    layers, width, heads = GPT2[name]
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, n_positions=length)
    model = GPT2LMHeadModel(config).cuda()
    if checkpointing:
        model.gradient_checkpointing_enable()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (batch, length), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    activations = forward_end = 0
    for step in range(3):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        if step == 0:
            forward_end = torch.cuda.memory_allocated() - before - 2 * params
        loss.backward()
        if step == 0:  # the first step's peak beyond the state: gradients and casts apart
            activations = torch.cuda.max_memory_allocated() - before - 6 * params
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated()
    plan = accelkit.plan_for("H200", params=params, activation_bytes=max(activations, 0))
    predicted = plan.memory.per_gpu_bytes
    return {
        "model": name,
        "checkpointing": checkpointing,
        "params": params,
        "batch": batch,
        "length": length,
        "activation_bytes": activations,
        "forward_end_bytes": forward_end,
        "predicted_bytes": predicted,
        "measured_bytes": measured,
        "predicted_over_measured": predicted / measured,
    }


def fit_row(name: str, checkpointing: bool, batch: int, length: int) -> dict[str, Any]:
    """What the fit itself predicts and measures (`accelkit.torch.measuring.memory_probe`)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import accelkit

    layers, width, heads = GPT2[name]
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, n_positions=length)
    model = GPT2LMHeadModel(config)
    if checkpointing:
        model.gradient_checkpointing_enable()
    ids = torch.randint(0, config.vocab_size, (batch, length))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    report = accelkit.torch.fit(model, [{"input_ids": ids, "labels": ids}] * 6, optimizer,
                                None, plan=plan, progress=False, tune=False)  # fmt: skip
    facts = report.facts
    predicted = facts.get("predicted_memory_bytes")
    return {
        "model": name,
        "checkpointing": checkpointing,
        "params": sum(p.numel() for p in model.parameters()),
        "activation_bytes": facts.get("activation_bytes"),
        "predicted_bytes": predicted,
        "measured_bytes": report.peak_memory_bytes,
        "predicted_over_measured": predicted / report.peak_memory_bytes if predicted else None,
        "memory_choice": facts.get("memory_choice"),
        "memory_estimate": facts.get("memory_estimate"),
    }


def checkpointing_row(checkpointing: bool, steps: int) -> dict[str, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import accelkit

    plan = accelkit.auto_configure(framework="torch", verbose=False)
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=20,
        num_attention_heads=16,
        num_key_value_heads=16,
        vocab_size=32000,
        max_position_embeddings=2048,
    )
    model = LlamaForCausalLM(config)
    if checkpointing:
        model.gradient_checkpointing_enable()
    ids = torch.randint(0, config.vocab_size, (8, 2048))
    data = [{"input_ids": ids, "labels": ids}] * steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    report = accelkit.torch.fit(
        model, data, optimizer, None, plan=plan, progress=False, tune=False, warmup=3
    )
    return {
        "checkpointing": checkpointing,
        "params": sum(p.numel() for p in model.parameters()),
        "step_ms": report.step_time_s * 1e3,
        "flops_per_step": report.flops_per_step,
        "hardware_flops_per_step": getattr(report, "hardware_flops_per_step", None),
        "mfu": report.mfu,
        "hfu": getattr(report, "hfu", None),
        "peak_memory_bytes": report.peak_memory_bytes,
    }


def _figure(value: float | None, unit: float, spec: str) -> str:
    return "-" if value is None else format(value / unit, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("memory", "fit", "checkpointing"), default="memory")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20, help="fit steps (checkpointing)")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    import torch

    rows = []
    if args.part in ("memory", "fit"):
        measure = memory_row if args.part == "memory" else fit_row
        print(
            f"{'model':<13}{'ckpt':>5}{'params':>8}{'act GB':>8}{'pred GB':>9}"
            f"{'meas GB':>9}{'ratio':>7}"
        )
        for name in GPT2:
            for checkpointing in (False, True):
                row = measure(name, checkpointing, args.batch, args.length)
                rows.append(row)
                gb = [
                    _figure(row[key], 1e9, ".2f")
                    for key in ("activation_bytes", "predicted_bytes", "measured_bytes")
                ]
                print(
                    f"{name:<13}{'yes' if checkpointing else 'no':>5}{row['params'] / 1e9:>7.2f}B"
                    f"{gb[0]:>8}{gb[1]:>9}{gb[2]:>9}"
                    f"{_figure(row['predicted_over_measured'], 1, '.3f'):>7}",
                    flush=True,
                )
                gc.collect()
                torch.cuda.empty_cache()
    else:
        for checkpointing in (False, True):
            row = checkpointing_row(checkpointing, args.steps)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
