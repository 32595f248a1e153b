"""`AccelkitCallback`: the profiled-fit measurements for a Hugging Face `Trainer`.

    callback = accelkit.hf.AccelkitCallback()
    trainer = Trainer(model, args, train_dataset=data, callbacks=[callback])
    with callback:                 # optional: stops the NVML sampler if training raises
        trainer.train()
    print(callback.report)

One measured step is one optimizer step (``trainer.state.global_step``), with all its
micro-batches under gradient accumulation. The Trainer gives its callbacks no batch, so
a forward pre-hook on the model reads the batch dicts the Trainer passes to
``model(**inputs)`` during each step (samples, tokens, real tokens from
``attention_mask``; `accelkit.hf._steps`). FLOPs are counted after the first step by
`count_train_step_flops` on that step's first micro-batch (times the micro-batches),
which restores the model, its gradients and the RNGs: no extra batch is drawn from the
train dataloader (drawing one would move its sampler and change the data order), and no
counting mode stays open across callbacks if the step raises.

Figures reach the Trainer's logs in `on_log`, in the `logs` dict and in the
``state.log_history`` entry the Trainer has just written for it (the Trainer copies
`logs` into the history before calling `on_log`, and runs its `report_to` callbacks
before the callbacks you pass, so those see the keys only if this callback is placed
first: ``trainer.callback_handler.callbacks.insert(0, callback)``). Keys, numbers only,
left out when unknown: ``accelkit/step_seconds``, ``accelkit/samples_per_second``,
``accelkit/tokens_per_second``, ``accelkit/achieved_tflops``, ``accelkit/mfu`` for the
last synchronised window (the window is ``logging_steps``); the final log (with
``train_runtime``) carries the whole run's figures under the same keys plus
``accelkit/real_tokens_per_second``, ``accelkit/flops_per_step``,
``accelkit/input_wait_share``, ``accelkit/gpu_utilization``,
``accelkit/peak_memory_bytes`` and ``accelkit/advice`` (how many items).

Time between optimizer steps counts as input wait: fetching the batches, and also the
Trainer's evaluation and checkpointing when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import transformers
from typing_extensions import override

from accelkit.hf._steps import TrainerSteps
from accelkit.planning import Plan
from accelkit.profiling import mfu
from accelkit.profiling.run_report import RunReport
from accelkit.torch.distributed import trainer_timing
from accelkit.torch.measuring.meter import Meter

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self

PREFIX = "accelkit/"
_RUN = (
    "samples_per_second",
    "tokens_per_second",
    "real_tokens_per_second",
    "achieved_tflops",
    "mfu",
    "flops_per_step",
    "input_wait_share",
    "gpu_utilization",
    "peak_memory_bytes",
)


class AccelkitCallback(transformers.TrainerCallback):
    """Measures a `Trainer` run like `accelkit.torch.Meter`; `report` holds the result.

    Args:
        plan: the plan in force (for MFU's dtype and the advice); as `Meter`.
        flops_per_step: FLOPs of one optimizer step, if known; else counted.
        warmup: optimizer steps left out of the steady-state figures (at least 1 when
            counting FLOPs).
        window: steps between device synchronisations; None: ``logging_steps``.
        sample_gpu, calibrate: as `Meter`.

    Example:
        >>> import tempfile
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
        >>> config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16,
        ...                     bos_token_id=0, eos_token_id=0)
        >>> model = GPT2LMHeadModel(config)
        >>> data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 100, (32, 16))]
        >>> args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=4,
        ...                          per_device_train_batch_size=8, report_to=[])
        >>> callback = AccelkitCallback()
        >>> output = Trainer(model, args, train_dataset=data, callbacks=[callback]).train()
        ... # doctest: +ELLIPSIS
        {'train_runtime': ..., 'accelkit/samples_per_second': ...}
        >>> callback.report.steps
        4
    """

    def __init__(
        self,
        *,
        plan: Plan | None = None,
        flops_per_step: float | None = None,
        warmup: int = 1,
        window: int | None = None,
        sample_gpu: bool = True,
        calibrate: bool = False,
    ) -> None:
        self.plan, self.flops_per_step, self.warmup = plan, flops_per_step, warmup
        self.window, self.sample_gpu, self.calibrate = window, sample_gpu, calibrate
        self.meter: Meter | None = None
        self.report: RunReport | None = None
        self._steps: TrainerSteps | None = None
        self._window: dict[str, float | None] = {}
        self._mark = (0, 0, 0)  # steps, samples, tokens at the last window boundary
        self._peak: float | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.meter is not None:
            self.meter.__exit__(kind, error, traceback)  # stops the sampler; errors pass
        if self._steps is not None:
            self._steps.detach()

    @override
    def on_train_begin(
        self,
        args: Any,
        state: Any,
        control: Any,
        model: Any = None,
        optimizer: Any = None,
        train_dataloader: Any = None,
        **_: Any,
    ) -> None:
        from accelkit.torch.measuring.facts import loader_facts

        steps = args.logging_steps if args.logging_strategy == "steps" else 0
        window = self.window or (int(steps) if steps >= 1 else 50)
        count = self.flops_per_step is None
        self.meter = Meter(
            model,
            plan=self.plan,
            flops_per_step=self.flops_per_step,
            warmup=max(self.warmup, int(count)),
            window=window,
            sample_gpu=self.sample_gpu,
            calibrate=self.calibrate,
            count_flops=False,
            optimizer=optimizer,
        )
        self.meter.on_window = self._window_end
        if train_dataloader is not None:
            self.meter.facts["loader"] = loader_facts(train_dataloader)
        fallback = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self._steps = TrainerSteps(self.meter, fallback_samples=fallback, count_flops=count)
        self._steps.attach(model)
        # the Trainer wrapped `model` in DDP before this call (its callbacks get the module)
        trainer_timing.time_all_reduce(trainer_timing.wrapper_of(model), self.meter)
        plan = self.meter.plan
        if self.meter.device_label != "cpu":
            device = next(model.parameters()).device
            self._peak = mfu.peak(plan.hardware, plan.matmul_dtype, gpu=device.index or 0).tflops

    @override
    def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if self._steps is not None and self.report is None:
            self._steps.begin()

    @override
    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
        if self._steps is not None:
            self._steps.end(model)

    def _window_end(self, step_s: float, step: int) -> None:
        assert self._steps is not None  # made with the meter, which calls this
        steps, samples, tokens = self._mark
        count = max(step - steps, 1)
        seconds = step_s * count
        flops = self.flops_per_step or self._steps.flops
        tflops = flops / step_s / 1e12 if flops and step_s > 0 else None
        self._window = {
            "step_seconds": step_s,
            "samples_per_second": (self._steps.samples - samples) / seconds,
            "tokens_per_second": (self._steps.tokens - tokens) / seconds or None,
            "achieved_tflops": tflops,
            "mfu": tflops / self._peak if tflops and self._peak else None,
        }
        self._mark = (step, self._steps.samples, self._steps.tokens)

    @override
    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
    ) -> None:
        if logs is None or self.meter is None:
            return
        if "train_runtime" in logs:
            self._close()
            assert self.report is not None
            figures = {name: getattr(self.report, name) for name in _RUN}
            figures["advice"] = len(self.report.advice)
        else:
            figures = self._window
        added = {PREFIX + k: v for k, v in figures.items() if isinstance(v, (int, float))}
        logs.update(added)
        last = state.log_history[-1] if state.log_history else None
        if (
            last is not None
            and last.get("step") == state.global_step
            and all(last.get(k) == v for k, v in logs.items() if k not in added)
        ):
            last.update(added)

    @override
    def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self._close()

    def _close(self) -> None:
        if self.meter is not None and self.report is None:
            assert self._steps is not None  # made with the meter
            self._steps.detach()
            self.report = self.meter.close()
