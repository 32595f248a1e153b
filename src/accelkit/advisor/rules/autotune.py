"""max-autotune: a long compiled run whose tune could not weigh it.

``torch.compile(mode="max-autotune")`` picks each matmul's kernel by benchmarking its
configurations as it compiles, which costs many times the default compile.
`accelkit.torch.fit`'s tune tries it on a CUDA device, on top of a kept compile, only
where the run left pays for it (`accelkit.profiling.tuning.autotune_pays`); that needs
the run's length (``steps=`` or ``len(loader)``). This rule speaks when tune skipped it
for want of that length and the run, as it went, trained long enough after its trials
to have paid for it: no gain is claimed, as no step of it was timed.

Quiet when tune tried it (kept, slower or dropped: its record says so), when compile was
not kept, when it was skipped for another reason (a run too short, the CPU), and for
runs that were not tuned.
"""

from __future__ import annotations

from accelkit.advisor import tuning
from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity
from accelkit.profiling.tuning import (
    AUTOTUNE_COMPILE_FACTOR,
    AUTOTUNE_SHARE,
    UNKNOWN_LENGTH,
    Trial,
    autotune_cost,
    autotune_pays,
    default_compile,
)

NAME = "max-autotune"  # the candidate's name in report.tuning


@needs(
    "gpu",
    "measured_here",
    "tuning",
    "figure:steady_seconds",
    evidence={
        "gpu": None,
        "tune.*": "tuning",
        "steady_seconds": "figure:steady_seconds",
    },
)
def max_autotune(ctx: Context) -> Advice | None:
    """A tuned PyTorch GPU run that kept compile, skipped max-autotune for want of the
    run's length, and then trained long enough to have paid for it.

    Example:
        >>> from accelkit import what_if
        >>> hw = what_if("H200")
        >>> compiled = {"name": "compile", "status": "chosen", "step_seconds": 0.03,
        ...             "compile_seconds": 40.0, "settings": {"compile": True}}
        >>> skipped = {"name": "max-autotune", "status": "skipped", "settings": {},
        ...            "why": "the run's length is unknown (no steps= and no len(loader))"}
        >>> eager = {"name": "eager", "status": "baseline", "step_seconds": 0.05,
        ...          "settings": {"compile": False}}
        >>> tuned = {"decision": "tuned", "candidates": [eager, compiled, skipped]}
        >>> m = {"device": "cuda:0", "hardware": hw.to_dict(), "steady_seconds": 7200.0,
        ...      "tuning": tuned}
        >>> max_autotune(Context.build(hw, None, m)).id
        'max_autotune'
    """
    result = tuning.record(ctx)
    if not ctx.torch or ctx.gpu is None or result is None or not tuning.chose(ctx, tuning.COMPILE):
        return None
    skipped = next((t for t in result.trials if t.name == NAME and t.status == "skipped"), None)
    compiled = default_compile(result.trials)
    trained = ctx.get("steady_seconds")
    if skipped is None or not (skipped.why or "").startswith(UNKNOWN_LENGTH):
        return None
    seconds = compiled.compile_seconds if compiled is not None else None
    if compiled is None or seconds is None or not trained:
        return None
    return _advice(ctx, compiled, seconds, trained) if autotune_pays(trained, seconds) else None


def _advice(ctx: Context, compiled: Trial, seconds: float, trained: float) -> Advice:
    """`compiled`: the default compile's trial, `seconds` its compile time."""
    cost = autotune_cost(seconds)
    return Advice(
        id="max_autotune",
        severity=Severity.INFO,
        title=(
            f"tune kept torch.compile but did not try max-autotune: it did not know the "
            f"run's length, and the run then trained {trained:,.0f} s, enough to pay for "
            f"its compilation (about {cost:,.0f} s: {AUTOTUNE_COMPILE_FACTOR:g}x compile's "
            f"measured {seconds:.0f} s, at most {AUTOTUNE_SHARE:.0%} of the run)"
        ),
        evidence={
            "gpu": ctx.gpu.name if ctx.gpu else "-",
            "steady_seconds": round(trained, 1),
            "tune.compile_candidate": compiled.name,
            "tune.compile_s": round(seconds, 1),
            "tune.max_autotune_cost_s": round(cost, 1),
        },
        action=(
            "tell tune the run's length: accelkit.torch.fit(..., tune=True, steps=N), or a "
            "loader with len(); it then times max-autotune against compile on the run's "
            "own steps and keeps it only when clearly faster and its first batch agrees "
            "with the eager step. In a hand-written loop: torch.compile(model, "
            "mode='max-autotune-no-cudagraphs') (mode='max-autotune' with CUDA graphs), "
            "timed against the default mode"
        ),
        expected_gain=(
            "not measured: tune did not try it (what autotuning gains depends on the "
            "model's matmul shapes)"
        ),
    )
