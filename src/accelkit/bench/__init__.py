"""`accelkit bench`: a built-in model on synthetic data through the profiled fit."""

from __future__ import annotations

import dataclasses
from typing import Any

from accelkit.configure import auto_configure
from accelkit.profiling import world
from accelkit.profiling.run_report import RunReport
from accelkit.utils.imports import is_available

TORCH_MODELS = ("mlp", "cnn", "gpt", "gpt2", "resnet50")
KERAS_MODELS = ("mlp", "cnn")


def run(
    model: str = "mlp",
    framework: str = "auto",
    *,
    steps: int = 60,
    batch_size: int | None = None,
    precision: str = "auto",
    compile: bool = False,
    calibrate: bool = False,
    warmup: int = 5,
    progress: bool = True,
    compare_single: bool = False,
    single_device: Any = None,
    tune: bool | str = "auto",
    ddp: Any = None,
) -> RunReport:
    """Configure, then train a built-in model on synthetic data and return the report.

    Under torchrun each rank trains the model with DistributedDataParallel on its
    own synthetic batch (`batch_size` per device), and every rank returns the
    report of the whole run.

    Args:
        model: one of `TORCH_MODELS` (PyTorch) or `KERAS_MODELS` (Keras).
        framework: "torch", "tensorflow" or "auto" (PyTorch when installed).
        steps: training steps (warm-up included).
        batch_size: samples per step and device (default: the model's).
        precision, compile: passed to `auto_configure`.
        calibrate: also measure the device's matmul rate and report MFU against it.
        compare_single: under torchrun, first run the same bench on rank 0's device
            alone (the other ranks wait), then the run on every rank, and report the
            scaling efficiency against it. Without a launcher the run is on one
            device already: nothing to compare, a note says so.
        single_device: the single-device reference instead (a `RunReport`, the path
            of a saved one, or samples/s); see `accelkit.torch.fit`.
        tune, ddp: passed to `accelkit.torch.fit` for the run on every rank (the
            single-device reference trains untuned, without DDP): ``tune=True`` measures
            the DDP options on this model (`compile` stays as asked), `ddp` fixes them.

    Example:
        >>> import accelkit
        >>> print(accelkit.bench.run("gpt", steps=30, calibrate=True))  # doctest: +SKIP
        >>> # torchrun --nproc-per-node 2 -m accelkit bench --model gpt2 --compare-single
    """
    if framework == "auto":
        framework = "torch" if is_available("torch") else "tensorflow"
    models = TORCH_MODELS if framework == "torch" else KERAS_MODELS
    if model not in models:
        raise ValueError(
            f"model={model!r} is not built in for {framework}; use one of {', '.join(models)}"
        )
    if steps < 1:
        raise ValueError(f"steps={steps} must be >= 1")
    plan = auto_configure(framework=framework, precision=precision, compile=compile, verbose=False)
    if framework == "torch":
        from accelkit.torch.distributed import parallel

        bench = _TorchBench.on_this_rank(
            model,
            plan,
            steps=steps,
            batch_size=batch_size,
            calibrate=calibrate,
            warmup=warmup,
            progress=progress,
            tune=tune,
            ddp=ddp,
        )
        single = world.single_device_rate(single_device)
        group = parallel.world()
        if not compare_single or single is not None:
            return bench.run(single)
        if group is None:
            report = bench.run(None)
            report.note("scaling_efficiency", _ALONE)
            return report
        return _compared(bench, group)
    if compare_single or single_device is not None:
        raise ValueError(
            "compare_single and single_device are for PyTorch under torchrun; "
            "the Keras bench runs on one process"
        )
    return _keras(
        model, plan, steps=steps, batch_size=batch_size, calibrate=calibrate, warmup=warmup
    )


_ALONE = (
    "--compare-single: this run is on one device already, so there is nothing to "
    "compare; launch it under torchrun (torchrun --nproc-per-node N -m accelkit bench "
    "--compare-single) to measure scaling"
)


def _compared(bench: _TorchBench, group: Any) -> RunReport:
    """Rank 0 runs the bench alone while the other ranks wait for its figure, then
    every rank runs it together against that figure."""
    from accelkit.torch.distributed import parallel

    reference = None
    if group.is_zero:
        alone = bench.run(None, distributed=False)
        reference = (alone.samples_per_second, alone.device)
    rate, device = parallel.broadcast(reference, bench.device)
    report = bench.run(rate)
    if rate:
        report.note(
            "single_device_samples_per_second",
            f"the same bench alone on rank 0 ({device}) just before the "
            f"{group.size}-rank run, the other devices idle",
        )
    else:
        report.note(
            "scaling_efficiency",
            "the single-device run on rank 0 had no steady-state throughput: run more --steps",
        )
    return report


@dataclasses.dataclass(frozen=True)
class _TorchBench:
    """A built-in model's run, repeatable: once alone, once on every rank."""

    name: str
    plan: Any
    steps: int
    batch_size: int | None
    calibrate: bool
    warmup: int
    progress: bool
    tune: bool | str
    ddp: Any
    device: Any  # this rank's GPU (set by auto_configure under torchrun), or the CPU

    @classmethod
    def on_this_rank(cls, name: str, plan: Any, **options: Any) -> _TorchBench:
        import torch

        device = torch.device("cpu")
        if torch.cuda.is_available() and plan.hardware.gpus:
            device = torch.device("cuda", torch.cuda.current_device())
        return cls(name=name, plan=plan, device=device, **options)

    def run(self, single: float | None, *, distributed: bool = True) -> RunReport:
        """Train the model for `steps` on one synthetic batch and return the report;
        `single` is the single-device samples/s for the scaling efficiency."""
        import torch

        import accelkit.torch
        from accelkit.bench import torch_models

        torch.manual_seed(0)  # the same model on every rank and in every run
        model, batch, loss_fn, facts = torch_models.build(self.name, self.batch_size, self.device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=self.device.type == "cuda")
        steps = self.steps
        report = accelkit.torch.fit(
            model,
            torch_models.SyntheticBatches(batch, steps),
            optimizer,
            loss_fn,
            epochs=1,
            plan=self.plan,
            device=self.device,
            tokens_per_sample=facts.get("tokens_per_sample"),
            warmup=min(self.warmup, max(steps - 1, 0)),
            window=max(1, min(20, steps // 3)),
            calibrate=self.calibrate,
            progress=self.progress,
            distributed=distributed,
            single_device=single,
            # tune=True/False keeps the plan's compile choice: it measures the DDP options
            compile=None if self.tune == "auto" else bool(self.plan.compile),
            tune=self.tune if distributed or self.tune == "auto" else False,
            ddp=self.ddp if distributed else None,
        )
        if "analytic_flops_per_step" in facts and report.flops_per_step:
            analytic = facts["analytic_flops_per_step"]
            report.note(
                "flops_per_step",
                f"independent count 6N+12LTd (PaLM appendix B): "
                f"{analytic:.4e}, ratio "
                f"{report.flops_per_step / analytic:.4f}",
            )
        return report


def _keras(
    name: str, plan: Any, *, steps: int, batch_size: int | None, calibrate: bool, warmup: int
) -> RunReport:
    import accelkit.keras
    from accelkit.bench import keras_models

    model, x, y, batch_size = keras_models.build(name, batch_size, steps)
    return accelkit.keras.fit(
        model,
        x,
        y,
        batch_size=batch_size,
        epochs=1,
        verbose=0,
        plan=plan,
        warmup=min(warmup, max(steps - 1, 0)),
        calibrate=calibrate,
    )
