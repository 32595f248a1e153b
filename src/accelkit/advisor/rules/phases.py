"""Time outside training: evaluation, and the rest of the run (epoch boundaries,
checkpoints, other callbacks).

The meters split a run's wall time into training steps, evaluation and the rest
(`accelkit.profiling.clock.StepClock.pause`), and every step figure (step time,
throughput, MFU, input wait) comes from the training steps alone, so no step rule sees
this time. When evaluation or the rest takes a large share of the run, that is where
the run's time goes, and the change is in how often the trainer evaluates or saves.

Thresholds, on the share of the run's wall time:

- `LARGE` (20%): a verdict when a phase takes more than a fifth of the run, more than
  one second outside training for every four in it; the share at which input wait
  is called the bottleneck too (`input_wait.HIGH`). Below it, evaluating as often is
  a fair price for watching the model, and checkpoints are insurance.
- `MOST` (50%): a warning at half the run or more: more time is spent outside
  training than in it.
- `MIN_SECONDS` (5 s): a phase shorter than that gets no verdict whatever its share:
  halving it saves a few seconds, and in a short test run one-off costs (the first
  evaluation's tracing, starting the loader's workers) make a large share of little
  time.

The gain is the run's, not the step's: evaluating half as often (or on half the
batches), or saving half as often, takes half the phase's time away, a wall-time
speed-up of 1 / (1 - share / 2); `speedup` carries that figure for the ranking,
where it stands beside the step rules' (whose gain on the whole run is smaller
than on the step, when the run is not all training).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity, removing_share, unbounded_gain

LARGE = 0.20
MOST = 0.50
MIN_SECONDS = 5.0


@needs(
    "figure:evaluation_seconds",
    "figure:run_seconds",
    optional=("figure:training_seconds", "figure:eval_losses"),
    evidence={
        "evaluation_s": None,
        "run_s": None,
        "evaluation_share": None,
        "training_s": "figure:training_seconds",
        "evaluations": "figure:eval_losses",
        "per_evaluation_s": "figure:eval_losses",
    },
)
def evaluation_time(ctx: Context) -> Advice | None:
    """Fires when evaluation takes more than 20% of the run (a warning from 50%), and at
    least 5 s.

    Example:
        >>> m = {"run_seconds": 100.0, "evaluation_seconds": 37.0}
        >>> print(evaluation_time(Context.build(None, None, m)).title)
        ... # doctest: +NORMALIZE_WHITESPACE
        evaluation takes 37% of the run (37.0 of 100.0 s): evaluate less often or on fewer
        batches
    """
    found = _share(ctx, "evaluation_seconds")
    if found is None:
        return None
    seconds, share = found
    evidence: dict[str, Any] = {
        "evaluation_s": round(seconds, 3),
        "evaluation_share": round(share, 4),
    }
    evaluations = len(ctx.get("eval_losses", ()))  # one mean loss per evaluation, where kept
    if evaluations:
        evidence.update(evaluations=evaluations, per_evaluation_s=round(seconds / evaluations, 3))
    return _verdict(
        ctx,
        "evaluation_time",
        share,
        f"evaluation takes {share:.0%} of the run ({seconds:,.1f} of "
        f"{ctx.get('run_seconds'):,.1f} s): evaluate less often or on fewer batches",
        evidence,
        ctx.pick(torch=_EVALUATE_TORCH, tensorflow=_EVALUATE_KERAS),
        "evaluating half as often, or on half the batches",
    )


@needs(
    "figure:other_seconds",
    "figure:run_seconds",
    optional=("figure:training_seconds", "figure:epochs", "fact:loader"),
    evidence={
        "other_s": None,
        "run_s": None,
        "other_share": None,
        "training_s": "figure:training_seconds",
        "epochs": "figure:epochs",
        "other_per_epoch_s": "figure:epochs",
        "loader.*": "fact:loader",
    },
)
def other_time(ctx: Context) -> Advice | None:
    """Fires when the rest of the run (epoch boundaries, checkpoints, callbacks) takes
    more than 20% of it (a warning from 50%), and at least 5 s.

    Example:
        >>> m = {"run_seconds": 100.0, "other_seconds": 30.0, "epochs": 10}
        >>> other_time(Context.build(None, None, m)).evidence["other_per_epoch_s"]
        3.0
    """
    found = _share(ctx, "other_seconds")
    if found is None:
        return None
    seconds, share = found
    evidence: dict[str, Any] = {"other_s": round(seconds, 3), "other_share": round(share, 4)}
    epochs = ctx.get("epochs")
    if epochs:
        evidence.update(epochs=epochs, other_per_epoch_s=round(seconds / epochs, 3))
    loader = ctx.fact("loader") if ctx.torch else None  # its settings shape the action
    evidence.update({f"loader.{k}": v for k, v in (loader or {}).items() if v is not None})
    return _verdict(
        ctx,
        "other_time",
        share,
        f"epoch boundaries, checkpoints and callbacks take {share:.0%} of the run "
        f"({seconds:,.1f} of {ctx.get('run_seconds'):,.1f} s): save and restart less often",
        evidence,
        _other_torch(loader) if ctx.torch else _OTHER_KERAS,
        "saving half as often, or half as many epoch boundaries",
    )


def _share(ctx: Context, field: str) -> tuple[float, float] | None:
    """The phase's seconds and share of the run, when they call for a verdict."""
    seconds, run = ctx.get(field), ctx.get("run_seconds")
    if seconds is None or not run or run <= 0 or seconds < MIN_SECONDS:
        return None
    share = min(1.0, seconds / run)
    return (seconds, share) if share > LARGE else None


def _verdict(
    ctx: Context,
    rule: str,
    share: float,
    title: str,
    evidence: dict[str, Any],
    action: str,
    change: str,
) -> Advice:
    """The advice of either rule: the phase's `evidence` beside the run's time, and the
    gain of halving the phase, which takes `share` of the run (module docstring)."""
    training = ctx.get("training_seconds")
    speedup = removing_share(share / 2, cap=2.0)
    return Advice(
        id=rule,
        severity=Severity.WARNING if share >= MOST else Severity.INFO,
        title=title,
        evidence={
            "run_s": round(ctx.get("run_seconds"), 3),
            **({"training_s": round(training, 3)} if training is not None else {}),
            **evidence,
        },
        action=action,
        expected_gain=(
            f"up to {speedup:.2f}x the run's wall time (not the step's) by {change}: "
            f"1 / (1 - {share:.3f} / 2); {unbounded_gain(share)} if none of it were left"
        ),
        speedup=speedup,
    )


_EVALUATE_TORCH = (
    "Lightning: Trainer(val_check_interval=..., check_val_every_n_epoch=N) to evaluate "
    "less often, limit_val_batches=0.25 (or a count) to evaluate on fewer batches\n"
    "Hugging Face: TrainingArguments(eval_strategy='steps', eval_steps=<larger>) or "
    "eval_strategy='epoch'; a smaller eval_dataset (eval_dataset.select(range(n)), the "
    "example scripts' --max_eval_samples); per_device_eval_batch_size=2x the training "
    "batch (no gradients to keep)\n"
    "accelkit.torch.fit evaluates on all of eval_loader after every epoch: give it a "
    "subset (torch.utils.data.Subset(val_set, range(n))), or fewer, longer epochs\n"
    "your own loop: evaluate every N epochs or steps, on a fixed subset of the validation "
    "set (itertools.islice(val_loader, n)), under torch.inference_mode()"
)
_EVALUATE_KERAS = (
    "model.fit(..., validation_freq=N) to evaluate every N epochs, validation_steps=n to "
    "evaluate on n batches, validation_batch_size=2x the training batch (no gradients "
    "to keep)"
)
_OTHER_KERAS = (
    "fewer epoch ends: dataset.repeat() with model.fit(..., steps_per_epoch=<larger>), "
    "as each epoch restarts the input iterator (a tf.data shuffle buffer refills) and "
    "runs every callback's on_epoch_end\n"
    "checkpoints less often: ModelCheckpoint(save_freq=<steps>, save_weights_only=True), "
    "BackupAndRestore(save_freq=<steps>)\n"
    "callbacks: TensorBoard(histogram_freq=0, write_images=False), and any "
    "on_epoch_end work moved to every N epochs"
)
_OTHER_TORCH = (
    "checkpoints less often: Lightning ModelCheckpoint(every_n_train_steps=<larger>, "
    "save_weights_only=True) or ModelCheckpoint(every_n_epochs=N); Hugging Face "
    "TrainingArguments(save_steps=<larger>, save_only_model=True); your own loop: "
    "torch.save every N epochs\n"
    "fewer, longer epochs, and callback work (logging, metrics) every N epochs"
)


def _other_torch(loader: Mapping[str, Any] | None) -> str:
    """The levers for PyTorch's trainers; persistent workers first when the loader's
    workers are known to restart at every epoch."""
    if loader is None:
        return (
            f"{_OTHER_TORCH}\nDataLoader(..., persistent_workers=True) when num_workers > 0: "
            "workers then survive between epochs (the loader's settings were not recorded)"
        )
    workers = int(loader.get("num_workers") or 0)
    if not workers or loader.get("persistent_workers"):
        return _OTHER_TORCH
    return (
        f"DataLoader(..., num_workers={workers}, persistent_workers=True): its {workers} "
        "workers start again at every epoch now (Hugging Face: "
        f"TrainingArguments(dataloader_persistent_workers=True))\n{_OTHER_TORCH}"
    )
