"""CUDA graphs: a launch-bound step replayed with one launch per graph.

A step of short kernels spends its time launching them, one by one from Python, and
the GPU waits between them (`accelkit.advisor.rules.utilisation.launch_overhead`).
``torch.compile(mode="reduce-overhead")`` records the compiled forward and backward
graphs once and replays each with one launch. `tune` measures it on a CUDA device
without DDP (`accelkit.torch.tuning.graphs`; the fit, `accelkit.torch.tune` and the
trainer callbacks) and keeps it only when it is clearly
faster and its first batch agrees with the eager step. This rule names the lever when
a run left it unused:

- tune timed it faster than the step the run kept, and the run did not keep it (its
  timed steps ended early): the measured ratio, the only gain this rule claims;
- tune dropped it: by the check against the eager step (which check, its figure and
  limit) or by an error (its reason); no gain, as no step of it was timed. Graphs that
  ran out of memory are named only on a launch-bound step (below): on a busy one they
  would gain little, and their pool does not fit beside the step;
- it was not tried on a launch-bound step (NVML utilisation under
  `utilisation.BUSY` and not input-bound, or, without NVML, steps under
  `utilisation.SHORT_STEP_S`) on CUDA without DDP: why not (tune off, tune's
  decision, compile fixed by the script), and how to measure it; no gain.

Quiet when the run kept it, for Keras, CPU and DDP runs, and where tune timed it and
found it not clearly faster.
"""

from __future__ import annotations

from typing import Any

from accelkit.advisor import tuning
from accelkit.advisor.context import Context
from accelkit.advisor.rules.input_wait import HIGH as INPUT_BOUND
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.rules.utilisation import BUSY, SHORT_STEP_S
from accelkit.advisor.types import Advice, Severity
from accelkit.profiling.tuning import OUT_OF_MEMORY, TuneResult

WARN_MEASURED = 1.10  # a measured gain this large is a warning
_LOOP_CODE = (
    "by hand: step = torch.compile(forward_and_loss, mode='reduce-overhead'), "
    "torch.compiler.cudagraph_mark_step_begin() before each step, and loss = "
    "step(batch).clone() (the next replay overwrites the graph's outputs)"
)


@needs(
    "gpu",
    "measured_here",
    optional=(
        "tuning",
        "figure:gpu_utilization",
        "figure:step_time_s",
        "figure:input_wait_share",
        "figure:world_size",
        "fact:compiled",
        "fact:distributed",
    ),
    evidence={
        "gpu": None,
        "tune": None,
        "tune.*": "tuning",
        "gpu_utilization": "figure:gpu_utilization",
        "step_time_ms": "figure:step_time_s",
        "input_wait_share": "figure:input_wait_share",
    },
)
def cuda_graphs(ctx: Context) -> Advice | None:
    """A PyTorch GPU run without DDP that left CUDA graphs unused: timed faster by tune
    but not kept, dropped by tune (its check or an error), or not tried on a
    launch-bound step.

    Example:
        >>> from accelkit import what_if
        >>> hw = what_if("H200")
        >>> m = {"device": "cuda:0", "hardware": hw.to_dict(), "gpu_utilization": 55.0,
        ...      "step_time_s": 0.024, "facts": {"compiled": False}}
        >>> found = cuda_graphs(Context.build(hw, None, m))
        >>> found.id, found.speedup
        ('cuda_graphs', None)
    """
    if not ctx.torch or ctx.gpu is None or not ctx.measured_here or _data_parallel(ctx):
        return None
    if tuning.chose(ctx, tuning.CUDA_GRAPHS):
        return None
    trial, result = tuning.trial(ctx, tuning.CUDA_GRAPHS), tuning.record(ctx)
    if trial is not None and result is not None:  # a trial comes from a record
        if trial.status == "failed":
            if trial.why == OUT_OF_MEMORY and _launch_bound(ctx) is None:
                return None
            return _dropped(ctx, trial)
        return _unused(ctx, trial, result)
    launch_bound = _launch_bound(ctx)
    if launch_bound is None:
        return None
    return _not_tried(ctx, launch_bound, result)


def _data_parallel(ctx: Context) -> bool:
    """Under DDP the gradients' all-reduce runs outside the graphs: tune does not try them."""
    return bool(ctx.fact("distributed")) or (ctx.get("world_size") or 1) > 1


def _in_fit(ctx: Context) -> bool:
    """The run is `accelkit.torch.fit`'s, which records ``compiled``; a `Meter` does not."""
    return ctx.fact("compiled") is not None


def _launch_bound(ctx: Context) -> str | None:
    """What says the step is launch-bound, or None: NVML's utilisation where sampled,
    else the step's length."""
    util, step = ctx.get("gpu_utilization"), ctx.get("step_time_s")
    if (ctx.get("input_wait_share") or 0.0) >= INPUT_BOUND:
        return None  # the GPU waits for data, not for launches
    if util is not None:
        return f"the GPU is busy {util:.0f}% of the time" if util < BUSY else None
    if step is not None and step < SHORT_STEP_S:
        return f"steps of {step * 1e3:.1f} ms"
    return None


def _evidence(ctx: Context) -> dict[str, Any]:
    evidence: dict[str, Any] = {"gpu": ctx.gpu.name if ctx.gpu else "-"}
    if ctx.get("gpu_utilization") is not None:
        evidence["gpu_utilization"] = round(ctx.get("gpu_utilization"), 1)
    if ctx.get("step_time_s"):
        evidence["step_time_ms"] = round(ctx.get("step_time_s") * 1e3, 3)
    if ctx.get("input_wait_share") is not None:
        evidence["input_wait_share"] = round(ctx.get("input_wait_share"), 4)
    return evidence


def _dropped(ctx: Context, trial: tuning.Compared) -> Advice:
    """Tune dropped the CUDA-graph candidate: by its check, with the figure, or by an error."""
    evidence = {**_evidence(ctx), **trial.evidence()}
    check = trial.check
    compile_alone = tuning.trial(ctx, tuning.COMPILE_ALONE)
    if check is not None and check.failed:
        beside = ""
        if compile_alone is not None and compile_alone.check is not None:
            evidence.update(compile_alone.evidence("tune.compile"))
            beside = f"; torch.compile alone: {compile_alone.check.describe()}"
        title = (
            f"CUDA graphs (torch.compile mode='reduce-overhead') were dropped by tune's "
            f"{check.failed} check in its '{trial.name}' trial: {check.describe()} "
            f"against the eager step on the same batch{beside}"
        )
        action = (
            "the CUDA-graph step computed something else than the eager step on its first "
            "batch (the gradients' figure is a share of the eager gradients' norm, the "
            "loss's of the eager loss); a figure just past its limit can be bf16/fp16 "
            f"rounding rather than a wrong step: to use them anyway, {_LOOP_CODE}, and "
            "compare its loss curve with the eager run's"
        )
    elif trial.why == OUT_OF_MEMORY:
        title = (
            f"CUDA graphs ran out of memory in tune's '{trial.name}' trial: their memory "
            "pool did not fit beside the step"
        )
        action = (
            "the graphs keep their own pool of the step's activations: a smaller batch, "
            "with gradient accumulation to keep the samples per optimizer step, leaves "
            "room for it; then, " + _LOOP_CODE
        )
    else:
        title = f"CUDA graphs failed in tune's '{trial.name}' trial: {trial.why}"
        action = (
            "a replay needs the same shapes every step (drop_last=True, a fixed sequence "
            "length) and memory for its graphs' pool; " + _LOOP_CODE
        )
    return Advice(
        id="cuda_graphs",
        severity=Severity.INFO,
        title=title,
        evidence=evidence,
        action=action,
        expected_gain="not measured: tune drops a candidate before timing its steps",
    )


def _unused(ctx: Context, trial: tuning.Compared, result: TuneResult) -> Advice | None:
    """Tune timed the CUDA-graph candidate; advice when it beat the step the run kept
    and the run did not keep it (tune judged a 'slower' one within the noise)."""
    kept = result.chosen if result.decision == "tuned" else result.baseline
    if trial.status == "slower" or not trial.step_seconds or not kept.step_seconds:
        return None
    ratio = kept.step_seconds / trial.step_seconds
    if ratio <= 1.0:
        return None
    trial_ms, kept_ms = trial.step_seconds * 1e3, kept.step_seconds * 1e3
    evidence = {
        **_evidence(ctx),
        **trial.evidence(),
        "tune.kept": kept.name,
        "tune.kept_step_ms": round(kept_ms, 3),
    }
    why = f" ({trial.why})" if trial.why else ""
    return Advice(
        id="cuda_graphs",
        severity=Severity.WARNING if ratio >= WARN_MEASURED else Severity.INFO,
        title=(
            f"CUDA graphs ran {ratio:.2f}x faster than the kept '{kept.name}' step in "
            f"tune's '{trial.name}' trial, but the run did not keep them{why}"
        ),
        evidence=evidence,
        action=_action(ctx, tuned=True),
        expected_gain=(
            f"measured {ratio:.2f}x: {kept_ms:.2f} ms '{kept.name}' / {trial_ms:.2f} ms "
            f"'{trial.name}', median steps of the same run (tune)"
        ),
        speedup=ratio,
    )


def _not_tried(ctx: Context, launch_bound: str, result: TuneResult | None) -> Advice:
    """A launch-bound step on which tune did not try CUDA graphs: why not, how to measure."""
    evidence = _evidence(ctx)
    if result is None:
        evidence["tune"] = "not run"
        why = "tune did not run" + (" (tune=False)" if _in_fit(ctx) else " (a hand-written loop)")
    else:
        skipped = next((t for t in result.trials if t.name == "cudagraphs"), None)
        if result.decision != "tuned":
            why = f"tune did not try them ({result.decision})"
        elif skipped is not None:
            why = f"tune did not try them: {skipped.why}"
        else:
            why = "tune tried no CUDA-graph candidate (an accelkit before the trainers tried them)"
        evidence["tune.decision"] = result.decision
        if skipped is not None:
            evidence["tune.why"] = skipped.why
    return Advice(
        id="cuda_graphs",
        severity=Severity.INFO,
        title=(
            f"{launch_bound} on {ctx.gpu.name if ctx.gpu else 'the GPU'}, a launch-bound "
            f"step, and CUDA graphs replay it with one launch per graph; {why}"
        ),
        evidence=evidence,
        action=_action(ctx, tuned=result is not None),
        expected_gain=(
            "not measured on this model: tune=True times CUDA graphs against the step "
            "kept, on the run's own batches"
        ),
    )


def _action(ctx: Context, *, tuned: bool) -> str:
    """How to measure and keep CUDA graphs: through the fit's tune, or by hand."""
    if _in_fit(ctx):
        again = " on a run long enough for its trials" if tuned else ""
        return (
            f"accelkit.torch.fit(model, loader, optimizer, loss_fn, tune=True){again}, "
            "with compile= left unset (compile=True fixes the choice and tune tries "
            "neither compile nor CUDA graphs): tune keeps CUDA graphs when they are "
            "faster and agree with the eager step; or " + _LOOP_CODE
        )
    return (
        "AccelkitCallback(tune=True) in a Lightning or Hugging Face Trainer times them and "
        "keeps them when faster and in agreement with the eager step; in a hand-written "
        "loop, result = accelkit.torch.tune(model, batches, optimizer, loss_fn) times them "
        "(result.cudagraphs: keep them), then " + _LOOP_CODE
    )
