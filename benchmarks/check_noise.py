"""How far two correct training steps' gradients lie apart: the noise `tune`'s check
(`accelkit.torch.tuning.trial_guards.check_grads`) must tell a wrong compiled step from.

On one model of `models_people_train.py` (ResNet-50 at batch 64 by default, where the
Lightning callback's check refused ``torch.compile`` at 13-21% while the fit's passed it
at 3%), bf16 autocast, at the weights of step 0 and after ``--steps`` optimizer steps on
the batch: the gradients (the check's own `GradSample`) of

- the eager step twice, with ``torch.backends.cudnn.benchmark`` as the plan sets it (on):
  what nondeterministic kernels alone make of the same step;
- the eager step twice with deterministic algorithms (``cudnn.benchmark`` off,
  ``cudnn.deterministic`` on);
- the compiled step (``torch.compile`` of the forward and loss), against the first eager.

Each row is ``|a - b| / |a|`` (the check's figure, its limit `trials.GRAD_RTOL`) and the
agreement ``<c, e1 + e2> / (2 <e1, e2>)`` the check uses for random draws.

    PYTHONPATH=src python3 benchmarks/check_noise.py --out noise.json
    PYTHONPATH=src python3 benchmarks/check_noise.py --smoke   # the CPU: the script's check
"""

from __future__ import annotations

import argparse
from typing import Any

import gpu_compare  # same folder: JSON helper
import models_people_train as models


def _grads(torch: Any, model: Any, batch: Any, loss_fn: Any, device: Any, forward: Any) -> Any:
    from accelkit.torch.tuning.reference import GradSample, buffers_kept

    params = [p for p in model.parameters() if p.requires_grad]
    for param in params:
        param.grad = None
    with buffers_kept(model), torch.autocast(device.type, torch.bfloat16):
        loss = forward(batch)
    loss.backward()
    sample = GradSample(params, torch)()
    for param in params:
        param.grad = None
    return float(loss.detach().float()), sample


def _relative(a: Any, b: Any) -> float:
    return float((a - b).norm() / a.norm())


def _agreement(c: Any, e1: Any, e2: Any) -> float | None:
    shared = float(e1 @ e2)
    return float(c @ (e1 + e2)) / (2 * shared) if shared > 0 else None


def _state(torch: Any, model: Any, batch: Any, loss_fn: Any, device: Any, compiled: Any) -> dict:
    eager = lambda b: models.forward_loss(model, b, loss_fn)  # noqa: E731
    cudnn = torch.backends.cudnn
    cudnn.benchmark, cudnn.deterministic = True, False
    (l1, e1), (l2, e2) = (_grads(torch, model, batch, loss_fn, device, eager) for _ in range(2))
    cudnn.benchmark, cudnn.deterministic = False, True
    (_, d1), (_, d2) = (_grads(torch, model, batch, loss_fn, device, eager) for _ in range(2))
    cudnn.benchmark, cudnn.deterministic = True, False
    lc, c = _grads(torch, model, batch, loss_fn, device, compiled)
    return {
        "loss": l1,
        "grad_norm": float(e1.norm()),
        "eager_vs_eager": _relative(e1, e2),
        "eager_vs_eager_loss": abs(l1 - l2) / abs(l1),
        "deterministic_vs_deterministic": _relative(d1, d2),
        "deterministic_vs_eager": _relative(e1, d1),
        "compiled_vs_eager": _relative(e1, c),
        "compiled_vs_eager_loss": abs(l1 - lc) / abs(l1),
        "agreement_compiled": _agreement(c, e1, e2),
        "agreement_deterministic": _agreement(d1, e1, e2),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, _ = models.build(args, device)
    optimizer = models.optimizer_for(torch, model, args.model)
    compiled = torch.compile(lambda b: models.forward_loss(model, b, loss_fn))
    states = {"step 0": _state(torch, model, batch, loss_fn, device, compiled)}
    for _ in range(args.steps):
        with torch.autocast(device.type, torch.bfloat16):
            loss = models.forward_loss(model, batch, loss_fn)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    states[f"step {args.steps}"] = _state(torch, model, batch, loss_fn, device, compiled)
    return {
        "model": args.model,
        "batch_size": args.batch_size,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "states": states,
    }


def _print(result: dict[str, Any]) -> None:
    print(f"{result['model']} batch {result['batch_size']} on {result['device']}")
    keys = next(iter(result["states"].values())).keys()
    print(f"{'':<32}" + "".join(f"{name:>14}" for name in result["states"]))
    for key in keys:
        values = [state[key] for state in result["states"].values()]
        print(
            f"{key:<32}" + "".join(f"{v:>14.4g}" if v is not None else f"{'-':>14}" for v in values)
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=models.MODELS, default="resnet50")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="tiny model, few steps (the CPU)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.batch_size, args.steps = "gpt2", 2, 2
    result = measure(args)
    _print(result)
    gpu_compare.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
