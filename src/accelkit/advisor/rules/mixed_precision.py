"""Mixed precision that trains the wrong thing: token ids rounded by a 16-bit float, and
outputs left in 16 bits.

A float with p significand bits holds every integer only up to 2**p: float16 to
2048, bfloat16 to 256 (`accelkit.hardware.float_formats`). Ids above that which
pass through one become other ids (float16: 2049 -> 2048, 12345 -> 12344), and an
id that rounds up to the vocabulary size fails the lookup on the CPU (on a GPU,
``tf.gather`` returns zeros). Keras rounds them when a float input (the default
``keras.Input`` dtype) reaches an `Embedding` through a layer that autocasts;
PyTorch, when the batch itself is cast to a 16-bit dtype. Outputs in 16 bits
(no float32 head) compute the softmax and feed the loss with about three
significant digits (float16) or two (bfloat16).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity
from accelkit.hardware import capabilities, float_formats

_NO_GAIN = "no speed-up: a correctness fix"


@needs(
    ("fact:float_id_inputs", "fact:ids_over_float16"),
    optional=("fact:keras_policy", "figure:precision", "plan", "measured_here"),
    evidence=dict.fromkeys(
        (
            "layer",
            "lookup",
            "input",
            "input_dtype",
            "cast_by",
            "rounded_in",
            "exact_up_to",
            "vocabulary",
            "ids_changed",
            "ids_changed_share",
            "ids_out_of_range",
            "examples",
            "dtype",
            "max_id",
            "example",
        )
    )
    | {"first_batch_*": "fact:ids_over_float16"},
)
def float_ids(ctx: Context) -> list[Advice] | None:
    """Fires (critical) for each Keras integer lookup fed float ids through a layer that
    casts them to a 16-bit dtype under the policy in force (the what-if plan's policy when
    advising other hardware), unless the whole vocabulary is exact in that dtype.

    Example:
        >>> facts = {"keras_policy": "mixed_float16", "float_id_inputs": [{
        ...     "layer": "tpe", "embedding": "token_emb", "input_dim": 20000, "input": "ids",
        ...     "input_dtype": "float32", "input_shape": [200], "cast_by": "tpe",
        ...     "cast_dtype": "float16"}]}
        >>> float_ids(Context.build(None, None, {"facts": facts}))[0].evidence["examples"][0]
        '2049 -> 2048'
    """
    found = ctx.fact("float_id_inputs") or []
    batch = ctx.fact("ids_over_float16") or {}
    advice = []
    for item in found:
        dtype, now = _rounding_dtype(ctx, item.get("cast_dtype"))
        vocabulary = item.get("input_dim")
        limit = float_formats.exact_limit(dtype) if dtype else None
        seen = batch if batch.get("input") == item.get("input") else {}
        if dtype is None or limit is None or (vocabulary and vocabulary - 1 <= limit and not seen):
            continue
        advice.append(_float_ids_advice(ctx, item, dtype, now, seen))
    covered = {item.get("input") for item in found}
    if batch and batch.get("input") not in covered:  # a subclassed model: the batch alone
        dtype, now = _rounding_dtype(ctx, batch.get("cast_dtype"))
        if dtype is not None:
            advice.append(_batch_advice(ctx, batch, dtype, now))
    return advice or None


@needs(
    "fact:float16_outputs",
    optional=("fact:keras_policy", "fact:float16_outputs_in_call", "plan", "measured_here"),
    evidence=dict.fromkeys(
        ("outputs", "policy", "output_dtype", "relative_precision", "largest_value")
    ),
)
def float16_outputs(ctx: Context) -> Advice | None:
    """Fires (critical) when a Keras model's outputs are 16-bit under a mixed policy (on
    a what-if plan: when that plan's policy is mixed too).

    Example:
        >>> facts = {"keras_policy": "mixed_float16", "float16_outputs": ["logits"]}
        >>> float16_outputs(Context.build(None, None, {"facts": facts})).action.split(":")[0]
        'model = accelkit.keras.float32_head(model) before model.compile(...)'
    """
    outputs = ctx.fact("float16_outputs") or []
    dtype, _ = _rounding_dtype(ctx, None)
    if not outputs or dtype is None:
        return None
    policy = capabilities.keras_policy(capabilities.precision_of_policy(dtype))
    if ctx.fact("float16_outputs_in_call"):
        return _in_call_outputs(outputs, dtype, policy)
    return Advice(
        id="float16_outputs",
        severity=Severity.CRITICAL,
        title=(
            f"{len(outputs)} output(s) computed in {dtype} under {policy}, without a "
            f"float32 head: {', '.join(outputs)}"
        ),
        evidence=_outputs_evidence(outputs, dtype, policy),
        action=(
            "model = accelkit.keras.float32_head(model) before model.compile(...): "
            "float32 outputs, so the last layer's softmax and the loss work in float32 "
            '(or give the last layer dtype="float32"); accelkit.keras.fit adds the '
            "head itself"
        ),
        expected_gain="no speed-up: one cast per output; softmax and loss stop rounding "
        f"to {dtype} (spacing {float_formats.epsilon(dtype):g} near 1)",
    )


def _outputs_evidence(outputs: list[str], dtype: str, policy: str) -> dict[str, Any]:
    """What a 16-bit output holds: the dtype's spacing near 1 and its largest value."""
    return {
        "outputs": list(outputs),
        "policy": policy,
        "output_dtype": dtype,
        "relative_precision": float_formats.epsilon(dtype),
        "largest_value": float_formats.largest(dtype),
    }


def _in_call_outputs(outputs: list[str], dtype: str, policy: str) -> Advice:
    """A subclassed model's 16-bit outputs: a warning, since its call() may end with
    logits (fine: Keras losses compute in float32) or with an activation (not fine)."""
    return Advice(
        id="float16_outputs",
        severity=Severity.WARNING,
        title=(
            f"{len(outputs)} output(s) of a subclassed model come out of its call() in "
            f"{dtype} under {policy}: an activation inside it (sigmoid, softmax) is computed "
            f"in {dtype}: {', '.join(outputs)}"
        ),
        evidence=_outputs_evidence(outputs, dtype, policy),
        action=(
            "compute the last activation in float32 in call(): "
            'keras.layers.Activation("sigmoid", dtype="float32")(logits), or give the last '
            'layer dtype="float32"; logits with a from_logits=True loss are fine as they are '
            "(a wrapper such as accelkit.keras.float32_head can only cast after call())"
        ),
        expected_gain=_NO_GAIN,
    )


@needs(
    "fact:half_integer_inputs",
    evidence=dict.fromkeys(("input", "dtype", "shape", "max", "exact_up_to", "examples")),
)
def half_ids(ctx: Context) -> list[Advice] | None:
    """Fires (critical) for each PyTorch batch tensor that arrived in float16/bfloat16
    holding only whole numbers, past what the dtype holds exactly: ids already rounded.

    Example:
        >>> facts = {"half_integer_inputs": [{"input": "input_ids", "dtype": "bfloat16",
        ...          "shape": [8, 128], "max": 19968.0, "exact_up_to": 256}]}
        >>> half_ids(Context.build(None, None, {"facts": facts}))[0].severity
        <Severity.CRITICAL: 'critical'>
    """
    advice = []
    for item in ctx.fact("half_integer_inputs") or []:
        dtype, name = str(item.get("dtype")), str(item.get("input"))
        limit = item.get("exact_up_to") or float_formats.exact_limit(dtype)
        top = float(item.get("max") or 0)
        advice.append(
            Advice(
                id="half_ids",
                severity=Severity.CRITICAL,
                title=(
                    f"'{name}' arrives as {dtype} holding only whole numbers up to {top:.0f}: "
                    f"{dtype} holds integers exactly only up to {limit}, so if these are "
                    "token ids most of them were rounded before the model saw them"
                ),
                evidence={
                    "input": name,
                    "dtype": dtype,
                    "shape": item.get("shape"),
                    "max": top,
                    "exact_up_to": limit,
                    "examples": [
                        f"{v} -> {r:.0f}" for v, r in float_formats.examples(int(top) + 1, dtype)
                    ][:2],
                },
                action=(
                    "keep integer tensors integer: move the batch without a dtype, e.g. "
                    "batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}, "
                    "and let autocast pick the compute dtype (with plan.autocast(): ...; "
                    "accelkit.torch.fit does both); cast only floating tensors if you must: "
                    "v.to(dtype) if v.is_floating_point() else v"
                ),
                expected_gain=_NO_GAIN,
            )
        )
    return advice or None


def _rounding_dtype(ctx: Context, cast_dtype: Any) -> tuple[str | None, bool]:
    """(16-bit dtype the ids are or would be rounded in, whether they are rounded now).

    What-if (a plan for hardware the run was not measured on): the plan's policy. Measured
    here: the casting layer's dtype when it is 16-bit; else the policy in force, which the
    model will compute in once rebuilt under it."""
    if ctx.plan is not None and not ctx.measured_here:
        return capabilities.torch_dtype_name(ctx.plan.precision), False
    if float_formats.is_half(cast_dtype):
        return str(cast_dtype), True
    policy = ctx.fact("keras_policy")
    precision = capabilities.precision_of_policy(policy) if policy else ctx.precision
    return capabilities.torch_dtype_name(precision), False


def _float_ids_advice(
    ctx: Context, item: Mapping[str, Any], dtype: str, now: bool, batch: Mapping[str, Any]
) -> Advice:
    vocabulary = item.get("input_dim")
    limit = float_formats.exact_limit(dtype)
    policy = capabilities.keras_policy(capabilities.precision_of_policy(dtype))
    evidence: dict[str, Any] = {
        "layer": item.get("layer"),
        "lookup": item.get("embedding"),
        "input": item.get("input"),
        "input_dtype": item.get("input_dtype"),
        "cast_by": item.get("cast_by"),
        "rounded_in": dtype,
        "exact_up_to": limit,
    }
    lost = ""
    if vocabulary:
        changed = float_formats.changed_below(vocabulary, dtype)
        evidence.update(
            vocabulary=vocabulary,
            ids_changed=changed,
            ids_changed_share=round(changed / vocabulary, 4),
            ids_out_of_range=float_formats.out_of_range(vocabulary, dtype),
            examples=[
                _example(v, r, vocabulary) for v, r in float_formats.examples(vocabulary, dtype)
            ],
        )
        lost = (
            f": {changed:,} of its {vocabulary:,} ids ({changed / vocabulary:.0%}) become other ids"
        )
    if batch:
        evidence.update(
            first_batch_max_id=batch.get("max_id"),
            first_batch_changed=f"{batch.get('changed')} of {batch.get('values')}",
        )
    where = _where(ctx, now, policy)
    shape = tuple(item.get("input_shape") or ()) or ("maxlen",)
    spelled = "(" + ", ".join(str(d) for d in shape) + ",)" if len(shape) == 1 else str(shape)
    return Advice(
        id="float_ids",
        severity=Severity.CRITICAL,
        title=(
            f"token ids from float input '{item.get('input')}' reach "
            f"'{item.get('embedding')}' as {dtype}{where}{lost}"
        ),
        evidence=evidence,
        action=(
            f'declare the ids integer: keras.Input(shape={spelled}, dtype="int32") '
            f"instead of the {item.get('input_dtype')} input '{item.get('input')}': "
            "integer inputs are never autocast (the data may stay as it is)"
        ),
        expected_gain=_NO_GAIN,
    )


def _batch_advice(ctx: Context, batch: Mapping[str, Any], dtype: str, now: bool) -> Advice:
    policy = capabilities.keras_policy(capabilities.precision_of_policy(dtype))
    top = int(batch.get("max_id") or 0)
    limit = float_formats.exact_limit(dtype)
    changed = (
        f"{batch.get('changed')} of the batch's {batch.get('values')} change"
        if batch.get("rounded_in") == dtype
        else f"those above {limit} change"
    )
    return Advice(
        id="float_ids",
        severity=Severity.CRITICAL,
        title=(
            f"the first batch feeds whole numbers up to {top} to '{batch.get('input')}' "
            f"as {batch.get('dtype')}, and '{batch.get('cast_by')}' casts them to "
            f"{dtype}{_where(ctx, now, policy)}: if they are token ids, {changed}"
        ),
        evidence={
            "input": batch.get("input"),
            "dtype": batch.get("dtype"),
            "max_id": top,
            "cast_by": batch.get("cast_by"),
            "rounded_in": dtype,
            "exact_up_to": limit,
            "example": f"{top} -> {float_formats.rounded(top, dtype):.0f}",
        },
        action=(
            "pass the ids as integers (an int32 array or tensor): Keras autocasts only float inputs"
        ),
        expected_gain=_NO_GAIN,
    )


def _where(ctx: Context, now: bool, policy: str) -> str:
    if now:
        return ""
    if ctx.plan is not None and not ctx.measured_here:
        gpu = ctx.gpu.name if ctx.gpu is not None else "the planned hardware"
        return f" once built under {policy} on {gpu}"
    return f" once the model is built under {policy}"


def _example(value: int, result: float, vocabulary: int) -> str:
    beyond = " (out of range)" if result >= vocabulary else ""
    return f"{value} -> {result:.0f}{beyond}"
