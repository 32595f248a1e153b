"""`accelkit bench`: a built-in model on synthetic data through the profiled fit."""

from __future__ import annotations

from typing import Any

from accelkit.configure import auto_configure
from accelkit.report.run_report import RunReport
from accelkit.utils.imports import is_available

TORCH_MODELS = ("mlp", "cnn", "gpt", "gpt2", "resnet50")
KERAS_MODELS = ("mlp", "cnn")


def run(model: str = "mlp", framework: str = "auto", *, steps: int = 60,
        batch_size: int | None = None, precision: str = "auto", compile: bool = False,
        calibrate: bool = False, warmup: int = 5, progress: bool = True) -> RunReport:
    """Configure, then train a built-in model on synthetic data and return the report.

    Args:
        model: one of `TORCH_MODELS` (PyTorch) or `KERAS_MODELS` (Keras).
        framework: "torch", "tensorflow" or "auto" (PyTorch when installed).
        steps: training steps (warm-up included).
        batch_size: samples per step (default: the model's).
        precision, compile: passed to `auto_configure`.
        calibrate: also measure the device's matmul rate and report MFU against it.

    Example:
        >>> print(accelkit.bench.run("gpt", steps=30, calibrate=True))
    """
    if framework == "auto":
        framework = "torch" if is_available("torch") else "tensorflow"
    models = TORCH_MODELS if framework == "torch" else KERAS_MODELS
    if model not in models:
        raise ValueError(f"model={model!r} is not built in for {framework}; "
                         f"use one of {', '.join(models)}")
    if steps < 1:
        raise ValueError(f"steps={steps} must be >= 1")
    plan = auto_configure(framework=framework, precision=precision, compile=compile,
                          verbose=False)
    if framework == "torch":
        return _torch(model, plan, steps, batch_size, calibrate, warmup, progress)
    return _keras(model, plan, steps, batch_size, calibrate, warmup)


def _torch(name: str, plan: Any, steps: int, batch_size: int | None, calibrate: bool,
           warmup: int, progress: bool) -> RunReport:
    import torch

    import accelkit.torch
    from accelkit.bench import torch_models

    device = torch.device("cuda" if torch.cuda.is_available() and plan.hardware.gpus else "cpu")
    model, batch, loss_fn, facts = torch_models.build(name, batch_size, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                  fused=device.type == "cuda")
    report = accelkit.torch.fit(
        model, torch_models.SyntheticBatches(batch, steps), optimizer, loss_fn, epochs=1,
        plan=plan, device=device, tokens_per_sample=facts.get("tokens_per_sample"),
        warmup=min(warmup, max(steps - 1, 0)), window=max(1, min(20, steps // 3)),
        calibrate=calibrate, progress=progress)
    if "analytic_flops_per_step" in facts and report.flops_per_step:
        analytic = facts["analytic_flops_per_step"]
        report.note("flops_per_step", f"independent count 6N+12LTd (PaLM appendix B): "
                                      f"{analytic:.4e}, ratio {report.flops_per_step / analytic:.4f}")
    return report


def _keras(name: str, plan: Any, steps: int, batch_size: int | None, calibrate: bool,
           warmup: int) -> RunReport:
    import accelkit.keras
    from accelkit.bench import keras_models

    model, x, y, batch_size = keras_models.build(name, batch_size, steps)
    return accelkit.keras.fit(model, x, y, batch_size=batch_size, epochs=1, verbose=0,
                              plan=plan, warmup=min(warmup, max(steps - 1, 0)),
                              calibrate=calibrate)
