"""How far float8 moves a training step's loss and gradients from the bf16 step's.

The numbers behind `accelkit.torch.tuning.float8.TOLERANCE`: for each model, at the same
weights and on the same batch, the bf16 autocast step (eager) and the same step with every
eligible linear layer in float8 (torchao, tensorwise; emulated off CUDA), at step 0 and
after `--steps` AdamW steps in bf16. Printed as a table, written as JSON.

    PYTHONPATH=src python3 benchmarks/float8_check.py --out float8_check.json        # CPU
    PYTHONPATH=src python3 benchmarks/float8_check.py --gpu --out float8_check.json  # H200
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import torch

from accelkit.torch.tuning import float8, reference


def llama(hidden: int, layers: int, vocab: int, seq: int, batch: int) -> tuple[Any, Any]:
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=max(hidden // 64, 2),
        num_key_value_heads=max(hidden // 256, 1),
        vocab_size=vocab,
        max_position_embeddings=seq,
        tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, vocab, (batch, seq))
    return model, {"input_ids": ids, "labels": ids}


def mlp(width: int) -> tuple[Any, Any]:
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width),
        torch.nn.GELU(), torch.nn.Linear(width, 10),
    )  # fmt: skip
    return model, (torch.randn(256, width), torch.randint(0, 10, (256,)))


CPU_MODELS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "llama h256 x2": lambda: llama(256, 2, 4096, 128, 4),
    "llama h512 x4": lambda: llama(512, 4, 4096, 128, 4),
    "llama h256 x8": lambda: llama(256, 8, 4096, 128, 4),
    "mlp 512": lambda: mlp(512),
}
GPU_MODELS: dict[str, Callable[[], tuple[Any, Any]]] = {
    "llama h1024 x8 (~200M)": lambda: llama(1024, 8, 32000, 1024, 8),
    "llama h2048 x16 (1B shape)": lambda: llama(2048, 16, 128256, 2048, 4),
    "mlp 4096": lambda: mlp(4096),
}


def loss_of(model: Any, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch).loss
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


def measure(name: str, build: Callable[[], tuple[Any, Any]], device: Any, steps: int) -> list[dict]:
    torch.manual_seed(0)
    model, batch = build()
    model.to(device)
    batch = (
        {k: v.to(device) for k, v in batch.items()}
        if isinstance(batch, dict)
        else tuple(t.to(device) for t in batch)
    )
    names = tuple(
        n for n, m in model.named_modules()
        if type(m) is torch.nn.Linear and m is not float8._head(model, torch)
        and m.in_features % 16 == 0 and m.out_features % 16 == 0
    )  # fmt: skip
    layers = float8.Float8Layers(model, names, emulate=device.type != "cuda")
    params = [p for p in model.parameters() if p.requires_grad]
    sample = reference.GradSample(params, torch)
    optimizer = torch.optim.AdamW(params, lr=3e-4)

    def step() -> tuple[float, Any]:
        for p in params:
            p.grad = None
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_of(model, batch)
        loss.backward()
        return float(loss.detach()), sample()

    def compare(at: int) -> dict[str, Any]:
        bf16_loss, bf16 = step()
        layers.on()
        f8_loss, f8 = step()
        layers.off()
        return {
            "model": name, "step": at, "layers": len(names),
            "loss_bf16": bf16_loss, "loss_float8": f8_loss,
            "loss_rel": abs(f8_loss - bf16_loss) / max(abs(bf16_loss), 1e-12),
            "grads_rel": float((f8 - bf16).norm() / bf16.norm()),
        }  # fmt: skip

    first = compare(0)
    if not steps:
        return [first]
    for _ in range(steps):  # the same batch: memorised, its loss near 0 (a hard case)
        step()
        optimizer.step()
    return [first, compare(steps)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="the GPU models, real float8")
    parser.add_argument(
        "--steps", type=int, default=0, help="bf16 steps on the same batch before a second look"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device("cuda" if args.gpu else "cpu")
    models = GPU_MODELS if args.gpu else CPU_MODELS
    rows: list[dict] = []
    for name, build in models.items():
        rows += measure(name, build, device, args.steps)
        with open(args.out, "w") as file:
            json.dump({"device": str(device), "rows": rows}, file, indent=1)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"{'model':28} {'step':>4} {'layers':>6} {'loss rel':>9} {'grads rel':>9}")
    for r in rows:
        loss, grads = f"{r['loss_rel']:.4%}", f"{r['grads_rel']:.2%}"
        print(f"{r['model']:28} {r['step']:>4} {r['layers']:>6} {loss:>9} {grads:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
