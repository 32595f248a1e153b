"""Attention: a Hugging Face model trained with eager attention where SDPA is available.

transformers' ``"eager"`` attention is a matmul, a softmax and a matmul, with each
head's sequence-by-sequence score matrix written to memory and read back at every layer;
``"sdpa"`` (``torch.nn.functional.scaled_dot_product_attention``) computes the same in
fused kernels (flash or memory-efficient attention on a GPU). The PyTorch doors record
each transformers model's implementation and whether it can run SDPA (the ``attention``
fact, `accelkit.torch.measuring.facts.attention_facts`); `tune` tries SDPA for such a
model (`accelkit.torch.tuning.attention`). This rule names the lever when a run left it
unused:

- tune dropped it: its check against the eager attention (the figure and its limit) or
  an error; no gain, as no step of it was timed;
- tune timed it faster than the baseline and the run did not keep it (its timed steps
  ended early): the measured ratio, the only gain this rule claims;
- it was not tried (tune off, not tuned, the data ended before its steps, a record
  without it): how to apply it and how to measure it; no gain.

Quiet when the run kept it, where tune timed it and found it not clearly faster, and for
models on SDPA or flash attention, or that cannot switch (``output_attentions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelkit.advisor import tuning
from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity
from accelkit.profiling.tuning import TuneResult

_CODE = (
    "model.set_attn_implementation('sdpa') on the built model, or "
    "AutoModelForCausalLM.from_pretrained(name, attn_implementation='sdpa') when loading"
)
_MEASURE = (
    "to measure it first: accelkit.torch.fit(..., tune=True), or "
    "AccelkitCallback(tune=True) in a Lightning or Hugging Face Trainer, times SDPA "
    "against the eager attention on the run's own batches and keeps it when faster"
)


@needs(
    "fact:attention",
    optional=("tuning",),
    evidence={"models": None, "attention": None, "tune": None, "tune.*": "tuning"},
)
def sdpa_attention(ctx: Context) -> Advice | None:
    """A PyTorch run whose transformers model trained with eager attention and can run
    SDPA, which tune did not keep.

    Example:
        >>> fact = [{"model": "GPT2LMHeadModel", "implementation": "eager", "sdpa": True}]
        >>> found = sdpa_attention(Context.build(None, None, {"facts": {"attention": fact}}))
        >>> found.id, found.speedup
        ('sdpa_attention', None)
    """
    found = ctx.fact("attention")
    eager = [entry for entry in (found if isinstance(found, list) else ()) if _switchable(entry)]
    if not ctx.torch or not eager or tuning.chose(ctx, tuning.SDPA_ATTENTION):
        return None
    evidence: dict[str, Any] = {
        "models": ", ".join(str(entry.get("model")) for entry in eager),
        "attention": "eager",
    }
    trial, result = tuning.trial(ctx, tuning.SDPA_ATTENTION), tuning.record(ctx)
    if trial is not None:
        evidence.update(trial.evidence())
        if trial.status == "failed":
            return _dropped(evidence, trial)
        if trial.status == "skipped" and (trial.speedup or 0.0) > 1.0:
            return _timed(evidence, trial)
        if trial.status != "skipped" or trial.step_seconds:
            return None  # timed: not clearly faster on this model
    return _not_tried(evidence, result, trial)


def _switchable(entry: Any) -> bool:
    """A model the fact says runs eager attention and could run SDPA."""
    return (
        isinstance(entry, Mapping)
        and entry.get("implementation") == "eager"
        and bool(entry.get("sdpa"))
    )


def _dropped(evidence: dict[str, Any], trial: tuning.Compared) -> Advice:
    why = tuning.why_dropped(trial, "the eager attention")
    return Advice(
        id="sdpa_attention",
        severity=Severity.INFO,
        title=f"SDPA attention was dropped in tune's '{trial.name}' trial: {why}",
        evidence=evidence,
        action=(
            "the model keeps its eager attention; SDPA computed something else on the "
            "run's first batch (a custom attention mask, a figure just past its limit from "
            f"bf16/fp16 rounding): to use it anyway, {_CODE}, and compare its loss curve "
            "with the eager run's"
        ),
        expected_gain="not measured: tune drops a candidate before timing its steps",
    )


def _timed(evidence: dict[str, Any], trial: tuning.Compared) -> Advice:
    ratio = trial.speedup or 1.0
    base_ms, trial_ms = (trial.baseline_seconds or 0.0) * 1e3, (trial.step_seconds or 0.0) * 1e3
    return Advice(
        id="sdpa_attention",
        severity=Severity.WARNING if ratio >= 1.10 else Severity.INFO,
        title=(
            f"SDPA attention ran {ratio:.2f}x faster than eager attention in tune's "
            f"'{trial.name}' trial, but the run did not keep it ({trial.why})"
        ),
        evidence=evidence,
        action=f"{_CODE}; {_MEASURE}",
        expected_gain=(
            f"measured {ratio:.2f}x: {base_ms:.2f} ms baseline / {trial_ms:.2f} ms "
            f"'{trial.name}', median steps of the same run (tune)"
        ),
        speedup=ratio,
    )


def _not_tried(
    evidence: dict[str, Any], result: TuneResult | None, trial: tuning.Compared | None
) -> Advice:
    why = tuning.why_not_timed(evidence, result, trial, "SDPA")
    return Advice(
        id="sdpa_attention",
        severity=Severity.INFO,
        title=(
            f"{evidence['models']} trained with eager attention (a matmul, a softmax and a "
            f"matmul per head and layer) where SDPA's fused kernels compute the same; {why}"
        ),
        evidence=evidence,
        action=f"{_CODE}; {_MEASURE}",
        expected_gain=(
            "not measured on this model: tune=True times SDPA against eager attention on "
            "the run's own batches"
        ),
    )
