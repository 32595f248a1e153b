"""`AccelkitCallback`: the profiled-fit measurements for a Hugging Face `Trainer`, a thin
adapter of the Trainer's hooks over `accelkit.torch.Meter` (one measurement core:
`accelkit.profiling.recorder.Recorder`).

    callback = accelkit.hf.AccelkitCallback()
    trainer = Trainer(model, args, train_dataset=data, eval_dataset=held_out,
                      callbacks=[callback])
    with callback:                 # optional: stops the NVML sampler if training raises
        trainer.train()
    print(callback.report)

**Steps.** One measured step is one optimizer step (``state.global_step``) with all its
micro-batches, from ``on_step_begin`` to ``on_step_end``; a forward pre-hook reads the
batch dicts the Trainer passes to ``model(**inputs)`` (samples, tokens, real tokens;
FLOPs counted as the first step trains: `accelkit.hf._steps`). The gap
between two steps is input wait: the Trainer fetches a step's batches before
``on_step_begin``.

**Phases.** Evaluation, checkpoints and logging are not training; the Trainer runs them
between steps, after ``on_step_end``, and tells its callbacks only once each is done:
``on_log``, ``on_evaluate`` (``on_prediction_step`` during it), ``on_save``. Each of
those hooks gives the time since the last step (or the last such hook) to its phase
(`Recorder.attribute`): ``"evaluation"`` for ``on_evaluate``, ``"other"`` for the
logging, the checkpoint and the epoch's end; the evaluation's own ``on_log`` (its
metrics) waits for ``on_evaluate``. That time counts in no step time, throughput, MFU
or input wait, and the report shows it beside them (``evaluation_seconds``...).

The device runs behind the host: when ``on_step_end`` returns, the step's kernels may
still be queued, and the Trainer's next wait for them (its ``.item()`` on the loss
before logging, or the evaluation's first result) would fall inside the phase timed
after it. So ``on_step_end`` closes a step that a break follows only after a device
synchronisation, and that wait is the step's. It knows a break follows from the flags
``DefaultFlowCallback`` sets in the same hook (``control.should_log``,
``should_evaluate``, ``should_save``, ``should_training_stop``) and from the epoch's
end; it costs nothing, since the Trainer synchronises right after. Other steps stay
asynchronous (the meter synchronises every ``window`` steps). A mid-epoch break leaves
the next fetch as input wait; after an epoch's end the new iterator and its first batch
count as the rest.

**Figures.** Each training ``on_log`` adds the figures of exactly the training since
the previous one (`Meter.take_figures(close=True)`: the Trainer has just synchronised to
read its loss), keyed as `accelkit.profiling.metrics` spells them for Hugging Face:
``accelkit/step_time_s``, ``accelkit/samples_per_second``, ``accelkit/tokens_per_second``,
``accelkit/achieved_tflops``, ``accelkit/mfu``, ``accelkit/hfu`` (the recomputed forward
counted, under activation checkpointing), ``accelkit/input_wait_share`` and, with
NVML, the GPU figures (numbers only; a figure not known is left out). So the Trainer's
``logging_steps`` is their cadence, and each series holds windows to the end: the final
log (with ``train_runtime``) gets the last one, the steps since the last log, if any.
The whole run's figures go in that final log under their own names,
``accelkit/run/<figure>`` (`metrics.RUN_FIGURES`: ``accelkit/run/step_time_s``,
``accelkit/run/mfu``, ``accelkit/run/flops_per_step``, ``accelkit/run/advice_count``...),
beside the Trainer's own run figures (``train_runtime``, ``train_samples_per_second``,
``train_loss``) and as they are: that log is where Hugging Face users read a run's
summary, each ``report_to`` logger records it as it records those (TensorBoard: one
point each under ``train/``; W&B: its summary takes each key's last value).

**Every logger.** The ``report_to`` loggers (TensorBoard, W&B, MLflow...) come before
the callbacks you pass in the Trainer's list, and write ``logs`` in their own
``on_log``. At ``on_train_begin`` the callback moves itself to just after
``DefaultFlowCallback`` in the list of the Trainer that calls it (`accelkit.hf._order`),
so every logger, and ``state.log_history``, gets the figures with ``callbacks=[cb]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import transformers
from typing_extensions import override

from accelkit.hf import _order
from accelkit.hf._steps import TrainerSteps
from accelkit.hf._tune import trials_for
from accelkit.profiling import metrics
from accelkit.profiling.clock import EVALUATION, OTHER
from accelkit.profiling.options import MeterOptions
from accelkit.profiling.tuning import TuneResult
from accelkit.torch.distributed import trainer_timing
from accelkit.torch.measuring.meter import Meter
from accelkit.torch.tuning.in_trainer import TrainerTrials
from accelkit.torch.tuning.trials import check_mode
from accelkit.utils.log import logger

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self

    from accelkit.profiling.run_report import RunReport


class AccelkitCallback(transformers.TrainerCallback):
    """Measures a `Trainer` run like `accelkit.torch.Meter`; `report` holds the result.

    Args:
        tune: ``"auto"`` (default), True or False, as ``accelkit.torch.fit``'s: measure
            the fused optimizer and ``torch.compile`` of the model's forward on the run's
            first optimizer steps and keep the fastest that computes the same
            (`accelkit.hf._tune`); ``"auto"`` tunes GPU runs long enough to pay it back.
            ``report.tuning`` holds what was measured.
        **options: the measurement options of every door, checked here
            (`accelkit.profiling.options.MeterOptions`): ``plan`` (for MFU's dtype and
            the advice), ``flops_per_step`` (counted when not given), ``warmup``
            (optimizer steps left out of the figures; at least 1 when counting FLOPs),
            ``window`` (steps between device synchronisations), ``sample_gpu``,
            ``calibrate``, ``tokens_per_sample``, ``single_device``.

    Raises:
        ValueError, TypeError: an option out of range, of the wrong type, or unknown.

    Example:
        >>> import tempfile
        >>> import torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
        >>> config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16,
        ...                     bos_token_id=0, eos_token_id=0)
        >>> data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 100, (32, 16))]
        >>> args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=4, use_cpu=True,
        ...                          per_device_train_batch_size=8, report_to=[],
        ...                          eval_strategy="steps", eval_steps=2, disable_tqdm=True)
        >>> callback = AccelkitCallback(warmup=1)
        >>> trainer = Trainer(GPT2LMHeadModel(config), args, train_dataset=data,
        ...                   eval_dataset=data, callbacks=[callback])
        >>> output = trainer.train()  # doctest: +ELLIPSIS
        {'eval_loss': ...}
        >>> callback.report.steps, callback.report.evaluation_seconds > 0
        (4, True)
        >>> final = trainer.state.log_history[-1]
        >>> final.get("accelkit/run/step_time_s", 0) > 0
        True
    """

    def __init__(self, tune: bool | str = "auto", **options: Any) -> None:
        self.tune = check_mode(tune)
        self.options = MeterOptions.of(options)
        self._trials: TrainerTrials | None = None
        self._trial_hook: Any = None
        self.meter: Meter | None = None
        self.report: RunReport | None = None
        self._steps: TrainerSteps | None = None
        self._run: Any = None  # the TrainerState of the run being measured
        self._evaluating = False  # on_prediction_step seen, on_evaluate not yet

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
        self._stop_trials()

    @property
    def _measuring(self) -> bool:
        return self._steps is not None and self.report is None

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
        if state is self._run:  # called again after moving before the loggers (_order)
            return
        if self._measuring:  # an earlier train() that raised outside `with callback:`
            assert self.meter is not None and self._steps is not None
            self.meter.recorder.stop()
            self._steps.detach()
        self._before_loggers()
        self._run, self.report, self._evaluating = state, None, False
        from accelkit.torch.measuring.facts import loader_facts

        count = self.options.flops_per_step is None
        warmup = max(self.options.warmup, int(count))  # the counted step runs slower
        options = self.options.to_kwargs(warmup=warmup)
        self.meter = Meter(model, optimizer=optimizer, count_flops=False, **options)
        if train_dataloader is not None:
            self.meter.facts["loader"] = loader_facts(train_dataloader)
        fallback = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self._steps = TrainerSteps(self.meter, fallback_samples=fallback, count_flops=count)
        self._steps.attach(model)
        # the Trainer wrapped `model` in DDP before this call (its callbacks get the module)
        trainer_timing.time_all_reduce(trainer_timing.wrapper_of(model), self.meter)
        self._sharding_facts(args, model)
        self._start_trials(args, state, model, optimizer)

    def _sharding_facts(self, args: Any, model: Any) -> None:
        """The Trainer's FSDP2 sharding as the fit records its own (``facts["sharding"]``),
        or, when the plan or ``args.fsdp`` asked for it and the model is whole, why not."""
        from accelkit.torch.distributed import sharding

        assert self.meter is not None
        found = sharding.described(model)
        if found is not None:
            self.meter.facts["sharding"] = found.to_dict()
            return
        plan = self.options.plan
        planned = plan is not None and sharding.wanted(plan)
        fsdp1 = any(type(m).__name__ == "FullyShardedDataParallel" for m in model.modules())
        if fsdp1 or not (planned or getattr(args, "fsdp", None)):
            return
        why = (
            "Accelerate shards only on GPUs and other accelerators: it is data-parallel"
            if getattr(args, "fsdp", None)
            else "its TrainingArguments have no fsdp (training_arguments gives it on GPU plans)"
        )
        asked = "the plan shards with FSDP2" if planned else "TrainingArguments(fsdp=...)"
        self.meter.note("sharding", f"{asked}, not applied: the Trainer did not shard, {why}")

    def _before_loggers(self) -> None:
        handler = _order.handler_calling(self)
        if handler is None:
            logger.warning(
                "AccelkitCallback: not called by a Trainer's CallbackHandler; the "
                "report_to loggers listed before it will not see its figures"
            )
            return
        _order.after_flow(handler.callbacks, self)

    @override
    def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if not self._measuring:
            return
        assert self._steps is not None
        if self._evaluating:  # an evaluation that ended without on_evaluate
            self._break(EVALUATION)
        self._steps.begin()
        if self._trials is not None:
            self._trials.begin()

    @override
    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if not self._measuring:
            return
        assert self._steps is not None
        epoch = state.epoch
        break_follows = (
            control.should_log
            or control.should_evaluate
            or control.should_save
            or control.should_training_stop
            or control.should_epoch_stop
            or (epoch is not None and float(epoch).is_integer())  # the epoch's last step
        )
        self._steps.end(synchronize=bool(break_follows))
        if self._trials is not None:
            self._trials.end()
            self._keep_trials()

    @override
    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
    ) -> None:
        if logs is None or not self._measuring or self._evaluating:
            return
        assert self.meter is not None
        self._break(OTHER)  # the Trainer's logging: the loss read, the logs built
        added = metrics.spelled(self.meter.take_figures(close=True), "hf")
        if "train_runtime" in logs:  # the final log: the run's figures beside the last window
            added.update(metrics.spelled(metrics.run_figures(self._close()), "hf", run=True))
        logs.update(added)
        # Trainer.log appended {**logs, "step": ...} to the history before calling on_log.
        last = state.log_history[-1] if state.log_history else None
        if last is not None and last.keys() - {"step"} == logs.keys() - added.keys():
            last.update(added)

    @override
    def on_prediction_step(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if not self._measuring or self._evaluating:
            return
        assert self.meter is not None
        self._evaluating = True
        if self.meter.clock.steps == 0:  # eval_on_start: no step end to count from
            self.meter.recorder.pause(EVALUATION)

    @override
    def on_evaluate(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self._break(EVALUATION)

    @override
    def on_predict(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self._break(EVALUATION)

    @override
    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self._break(OTHER)

    @override
    def on_epoch_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self._break(OTHER, epoch_over=True)

    @override
    def on_epoch_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self._break(OTHER, epoch_over=True)

    @override
    def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if self._measuring:
            self._close()

    def _break(self, phase: str, *, epoch_over: bool = False) -> None:
        """The time since the last step (or break) was `phase`. The batch fetched next is
        input wait again, unless `epoch_over`: then the new iterator and its first batch
        are the rest of the run, until the next step (the clock counts the gap after a
        break so)."""
        if not self._measuring:
            return
        assert self.meter is not None
        self._evaluating = False
        self.meter.recorder.resume()  # an evaluation before the first step
        self.meter.recorder.attribute(phase, mid_epoch=not epoch_over)

    # -- tune ------------------------------------------------------------------------

    def _start_trials(self, args: Any, state: Any, model: Any, optimizer: Any) -> None:
        """The trials of `tune` on the run's first steps (`accelkit.hf._tune`)."""
        assert self.meter is not None
        self._stop_trials()
        if self.tune is False:
            return
        found = trials_for(args, state, model, optimizer, self.tune, self.meter)
        if isinstance(found, TuneResult):
            self.meter.tuning = found.to_dict()
            return
        self._trials = found
        self._trial_hook = model.register_forward_pre_hook(self._trial_batch, with_kwargs=True)
        self._keep_trials()

    def _trial_batch(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        if self._trials is not None and module.training and not args:
            self._trials.batch(kwargs)

    def _keep_trials(self, *, stop: bool = False) -> None:
        """Once the trials end (or the run, with `stop`): their record in the report."""
        if self._trials is None:
            return
        if stop:
            self._trials.stop()
        if self._trials.result is not None:
            assert self.meter is not None
            self.meter.tuning = self._trials.result.to_dict()
            if self._trials.result.float8 and self._steps is not None:
                self._steps.count_next()  # its float8 share
            self._stop_trials()

    def _stop_trials(self) -> None:
        if self._trial_hook is not None:
            self._trial_hook.remove()
        self._trials = self._trial_hook = None

    def _close(self) -> RunReport:
        assert self.meter is not None and self._steps is not None  # made together
        self._keep_trials(stop=True)
        self.meter.recorder.attribute(OTHER)  # from the last step to the end
        self._steps.detach()
        self.report = self.meter.close()
        return self.report
