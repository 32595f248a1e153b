"""Utilisation: a GPU left idle between kernels, and low MFU that no other rule explains.

NVML's utilisation is the share of time a kernel was running. Idle time that
is not input wait is the host failing to keep the device fed: Python and
framework overhead per op, kernel launches, synchronisations. If the device
were kept busy, the step would shrink by that idle share (an upper bound:
1 / (1 - idle)). The figure claimed is bounded by the first change suggested, a
batch twice as large: the same launches then carry twice the samples, so
samples/s rise by at most `BATCH_FACTOR` (the step cannot take less time for
more work). Compilation and CUDA graphs cut the launches themselves; the
`compile` rule estimates or measures that.
"""

from __future__ import annotations

from accelkit.advisor import tuning
from accelkit.advisor.context import Context
from accelkit.advisor.rules.input_wait import HIGH as INPUT_BOUND
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity, removing_share, removing_share_text
from accelkit.profiling.tuning import summary

BUSY = 70.0  # percent; a well-fed GPU reports 90-100
IDLE = 50.0
SHORT_STEP_S = 0.010  # below ~10 ms, launch overhead is a large share of a step
LOW_MFU = 0.30
BATCH_FACTOR = 2  # the action doubles the batch


@needs(
    "gpu",
    "measured_here",
    "figure:gpu_utilization",
    optional=(
        "figure:input_wait_share",
        "figure:step_time_s",
        "batch_size",
        "fact:compiled",
        "tuning",
    ),
    evidence={
        "gpu_utilization": None,
        "idle_not_input_share": None,
        "input_wait_share": "figure:input_wait_share",
        "step_time_ms": "figure:step_time_s",
        "batch_size": "batch_size",
        "tune.kept": "tuning",
    },
)
def launch_overhead(ctx: Context) -> Advice | None:
    """Fires when NVML utilisation is below 70% and the run is not input-bound.

    Example:
        >>> from accelkit import what_if
        >>> hw = what_if("A100-SXM4-80GB")
        >>> m = {"device": "cuda:0", "hardware": hw.to_dict(), "gpu_utilization": 40.0,
        ...      "input_wait_share": 0.02, "step_time_s": 0.004}
        >>> launch_overhead(Context.build(hw, None, m)).speedup  # 1 / (1 - 0.58), at most 2
        2.0
    """
    util = ctx.get("gpu_utilization")
    share = ctx.get("input_wait_share") or 0.0
    if not ctx.measured_here or util is None or util >= BUSY or share >= INPUT_BOUND:
        return None
    idle = max(0.0, 1.0 - util / 100.0 - share)
    if idle <= 0:
        return None
    step = ctx.get("step_time_s")
    speedup = removing_share(idle, BATCH_FACTOR)
    evidence: dict[str, object] = {
        "gpu_utilization": round(util, 1),
        "idle_not_input_share": round(idle, 4),
    }
    if ctx.get("input_wait_share") is not None:
        evidence["input_wait_share"] = round(share, 4)
    if step:
        evidence["step_time_ms"] = round(step * 1e3, 3)
    if ctx.batch_size:
        evidence["batch_size"] = ctx.batch_size
    kept = _tune_kept(ctx)
    if kept:
        evidence["tune.kept"] = kept
    short = step is not None and step < SHORT_STEP_S
    return Advice(
        id="launch_overhead",
        severity=Severity.WARNING if util < IDLE else Severity.INFO,
        title=_title(util, step if short else None, kept, _graphs_kept(ctx)),
        evidence=evidence,
        action=_action(ctx, short),
        expected_gain=removing_share_text(
            idle,
            BATCH_FACTOR,
            f"the idle share that is not input wait (1 - {util:.0f}% utilisation - "
            f"{share:.1%} input wait)",
            f"a batch {BATCH_FACTOR} times larger, whose same launches carry "
            f"{BATCH_FACTOR} times the samples (the step cannot get shorter with more "
            "work)",
        )
        + (
            "; compile and CUDA graphs cut the launches themselves" if not _graphs_kept(ctx) else ""
        ),
        speedup=speedup,
    )


def _tune_kept(ctx: Context) -> str | None:
    """What `tune` kept for the run (`tuning.summary`), or None when it did not tune."""
    result = tuning.record(ctx)
    if result is None or result.decision != "tuned":
        return None
    return summary(result)


def _graphs_kept(ctx: Context) -> bool:
    return tuning.chose(ctx, tuning.CUDA_GRAPHS)


def _title(util: float, short_step: float | None, kept: str | None, graphs: bool) -> str:
    """The verdict: the idle GPU, and what tune kept already (CUDA graphs: the launches
    are one per graph, so what is left is host work between them)."""
    steps = f" ({short_step * 1e3:.1f} ms steps)" if short_step is not None else ""
    cause = (
        "host overhead between the CUDA graphs tune kept"
        if graphs
        else "host and kernel-launch overhead"
    )
    done = f"; tune {kept}" if kept else ""
    return (
        f"the GPU is busy {util:.0f}% of the time and the run is not input-bound: "
        f"{cause}{steps}{done}"
    )


# What several steps per host call gave Keras' own fit on short steps, one H200, Keras
# 3.15.1 on JAX (docs/benchmarks.md, benchmarks/keras_compile.py).
STEPS_PER_EXECUTION = (
    "several steps per host call: 1.29x for an MLP at batch 256 and 1.19x for a small CNN "
    "at batch 128 on an H200, measured (docs/benchmarks.md); callbacks then run every 32 steps"
)


def _action(ctx: Context, short: bool) -> str:
    batch = ctx.batch_size
    bigger = (
        f"batch_size={batch * BATCH_FACTOR}" if batch else f"a batch {BATCH_FACTOR} times larger"
    )
    compiled = bool(ctx.fact("compiled")) or tuning.chose(ctx, tuning.COMPILE)
    if ctx.torch:
        steps = [f"{bigger} (more work per kernel launch; see the memory verdict for what fits)"]
        if _graphs_kept(ctx):
            steps.append(
                "CUDA graphs are on already (tune kept them): what is left runs on the host "
                "between the graphs (the optimizer step, logging, loss.item() calls that wait "
                "for the GPU, the input pipeline); a profile (torch.profiler) shows which"
            )
            return "; ".join(steps)
        if not compiled:
            steps.append(
                "accelkit.torch.fit(..., compile=True) (torch.compile fuses ops and "
                "cuts Python overhead)"
            )
        if (short or compiled) and tuning.trial(ctx, tuning.CUDA_GRAPHS) is None:
            # tune's CUDA-graph trial, kept, slower or dropped, is the `cuda_graphs` rule's
            steps.append(
                "CUDA graphs for short steps: accelkit.torch.fit(..., tune=True) measures "
                "torch.compile(mode='reduce-overhead'), which replays the step's graphs "
                "as one launch each"
            )
        return "; ".join(steps)
    steps = [f"{bigger}"]
    if not compiled:
        steps.append("model.compile(..., jit_compile=True) (XLA fuses the step)")
    steps.append(f"model.compile(..., steps_per_execution=32) ({STEPS_PER_EXECUTION})")
    return "; ".join(steps)


@needs(
    "measured_here",
    ("figure:mfu", "figure:mfu_calibrated"),
    optional=("figure:step_time_s", "fact:compiled", "fact:model_compiled"),
    evidence={"mfu": None, "against": None, "step_time_ms": "figure:step_time_s"},
)
def where_to_look(ctx: Context, found: list[Advice]) -> Advice | None:
    """Low MFU with no warning or critical verdict to explain it: how to profile next.

    Runs after the other rules, with their verdicts.

    Example:
        >>> from accelkit import what_if
        >>> hw = what_if("H100 SXM")
        >>> m = {"device": "cuda:0", "hardware": hw.to_dict(), "mfu": 0.12}
        >>> where_to_look(Context.build(hw, None, m), []).id
        'low_mfu'
    """
    mfu, against = ctx.mfu_measured or (None, "")
    if mfu is None or mfu >= LOW_MFU:
        return None
    if any(a.severity is not Severity.INFO for a in found):
        return None
    profile = _how_to_profile(ctx)
    # "above" only where there is something above: alone, it is the report's only item.
    unexplained = "no rule above explains it" if found else "no rule found a cause"
    return Advice(
        id="low_mfu",
        severity=Severity.INFO,
        title=(
            f"MFU is {mfu:.1%} of {against} and {unexplained}: look for "
            f"small or memory-bound {'kernels' if ctx.gpu else 'ops'}"
        ),
        evidence={
            "mfu": round(mfu, 4),
            "against": against,
            **(
                {"step_time_ms": round(ctx.get("step_time_s") * 1e3, 3)}
                if ctx.get("step_time_s") is not None
                else {}
            ),
        },
        action=profile
        + (
            f"; look for non-matmul {'kernels' if ctx.gpu else 'ops'} (norms, softmax, "
            f"element-wise) that dominate: {_fusion(ctx)}"
        ),
        expected_gain="not estimated: the profile shows where the time goes",
    )


def _fusion(ctx: Context) -> str:
    """What the ops that dominate a low-MFU step call for: the compiler's fusion, or, in a
    step already compiled, what it left."""
    if ctx.fact("compiled") or ctx.fact("model_compiled"):
        return (
            "the step is compiled, so they are what its fusion left (look at their shapes, "
            "dtypes, and graph breaks: TORCH_LOGS=graph_breaks)"
        )
    return "they are what fusion (compile=True) removes"


def _how_to_profile(ctx: Context) -> str:
    """The profiler call for the run's framework; on a CPU run without CUDA's activity,
    its sort key or nsys (there is no GPU timeline to take)."""
    gpu = ctx.gpu is not None
    timeline = "; for the whole timeline: nsys profile -t cuda,nvtx python train.py" if gpu else ""
    return ctx.pick(
        torch=(
            "profile a few steps: with torch.profiler.profile(activities=["
            "torch.profiler.ProfilerActivity.CPU"
            + (", torch.profiler.ProfilerActivity.CUDA" if gpu else "")
            + "], schedule=torch.profiler.schedule(wait=5, warmup=2, active=5), "
            "on_trace_ready=torch.profiler.tensorboard_trace_handler('./prof')) as prof: "
            "... prof.step() per step; then print(prof.key_averages().table(sort_by="
            f"'{'cuda' if gpu else 'cpu'}_time_total')){timeline}"
        ),
        tensorflow=(
            "profile a few steps: keras.callbacks.TensorBoard(log_dir='./prof', "
            "profile_batch=(10, 15)) in model.fit, then tensorboard --logdir ./prof "
            f"(Profile tab: trace viewer, op stats){timeline}"
        ),
    )
