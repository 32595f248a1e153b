"""Tensor-core alignment: matmul dimensions that are not multiples of 8 (16 for fp8),
and vocabularies that are not multiples of 64.

Tensor cores work on tiles 16 bytes wide along each dimension: 8 fp16/bf16
values, 16 fp8 values (NVIDIA, "Matrix Multiplication Background User's
Guide", tensor core requirements). A Linear/Dense layer with 1001 outputs, or a
batch of 100, makes cuBLAS pick slower kernels or pad on every call.
Dimensions below 64 are left out: such layers are memory-bound, and padding
them adds work without a tensor-core gain.

A vocabulary is held to a larger multiple. The same guide finds performance
better still with dimensions aligned to 128 bytes on A100: 64 16-bit values
(128 fp8 ones). The vocabulary is the largest dimension of a language model's
output layer and the one most often odd (GPT-2's 50,257), and padding it is
free of consequence: the extra rows are never looked up. nanoGPT pads GPT-2's to
50,304, "nearest multiple of 64 for efficiency" (karpathy/nanoGPT model.py,
``GPTConfig.vocab_size``); nanoPALM measured the same padding at 1.19 -> 1.24
it/s on an RTX 3090 (github.com/RobertRiachi/nanoPALM/pull/6). A vocabulary is
an ``Embedding``'s size, and the output features of a Linear/Dense layer of the
same size or named ``lm_head``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from accelkit.advisor.context import Context
from accelkit.advisor.rules import float8
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity
from accelkit.hardware import capabilities

SMALLEST = 64
_SHOWN = 6
_VOCAB_DIMS = ("num_embeddings", "input_dim")  # nn.Embedding, keras.layers.Embedding
VOCAB_EFFECT = (
    "cited, not measured on this run: nanoGPT pads GPT-2's 50,257 to 50,304 "
    "'for efficiency' (karpathy/nanoGPT model.py); the same padding took "
    "nanoPALM from 1.19 to 1.24 it/s on an RTX 3090, +4% "
    "(github.com/RobertRiachi/nanoPALM/pull/6); NVIDIA finds dimensions aligned "
    "to 128 bytes faster on A100 (Matrix Multiplication Background User's Guide, "
    "tensor core requirements)"
)


class _Dim(NamedTuple):
    layer: str  # layer name, or "batch"
    kind: str  # layer type, e.g. "Linear"
    dim: str  # e.g. "out_features"
    value: int

    def __str__(self) -> str:
        if self.layer == "batch":
            return f"batch_size={self.value}"
        return f"{self.layer} ({self.kind} {self.dim}={self.value})"


@needs(
    ("fact:layers", "batch_size"),
    optional=("compute_capability", "figure:matmul_dtype", "plan", "measured_here", "tuning"),
    evidence={
        "misaligned": None,
        "multiple": None,
        "matmul_dtype": None,
        "vocabulary": "fact:layers",
        "vocabulary_multiple": "fact:layers",
    },
)
def alignment(ctx: Context) -> Advice | None:
    """Names the vocabulary, layers and batch whose dimensions are misaligned.

    Example:
        >>> layers = [{"name": "head", "type": "Linear",
        ...            "dims": {"in_features": 512, "out_features": 1001}}]
        >>> ctx = Context.build(None, None, {"facts": {"layers": layers}})
        >>> alignment(ctx).evidence["misaligned"]
        ['head (Linear out_features=1001)']
    """
    # float8 runs inside bf16 autocast: precision="fp8" or tune's kept float8 say so
    dtype = "fp8" if float8.kept(ctx) else ctx.matmul_dtype
    multiple, vocab_multiple = (float8.MULTIPLE, 128) if dtype == "fp8" else (8, 64)
    layers = list(ctx.fact("layers") or ())
    vocab = [d for d in _vocabulary(layers) if d.value % vocab_multiple]
    found = vocab + [d for d in _misaligned(layers, multiple) if d not in vocab]
    batch = ctx.batch_size
    if batch and batch >= SMALLEST and batch % multiple:
        found.append(_Dim("batch", "batch", "batch_size", batch))
    if not found:
        return None
    cc = ctx.compute_capability
    tensor_cores = capabilities.has_tensor_cores(cc) and dtype in (
        "bf16",
        "fp16",
        "tf32",
        "fp8",
    )
    # A vocabulary that is a multiple of 8 (16) already runs on tensor cores: the larger
    # multiple is the smaller, cited gain.
    coarse = [d for d in found if d.value % multiple]
    evidence: dict[str, Any] = {
        "misaligned": [str(d) for d in found],
        "multiple": multiple,
        "matmul_dtype": dtype,
    }
    if vocab:
        evidence.update(vocabulary=[str(d) for d in vocab], vocabulary_multiple=vocab_multiple)
    later = "" if tensor_cores else " (matters once the matmuls run on tensor cores)"
    return Advice(
        id="alignment",
        severity=Severity.WARNING if tensor_cores and coarse else Severity.INFO,
        title=_title(vocab, [d for d in found if d not in vocab], multiple, vocab_multiple) + later,
        evidence=evidence,
        action=_action(ctx, vocab, found, multiple, vocab_multiple),
        expected_gain=_gain(vocab, found, multiple, vocab_multiple),
    )


def _vocabulary(layers: list[Mapping[str, Any]]) -> list[_Dim]:
    sizes = {
        value
        for layer in layers
        for dim, value in (layer.get("dims") or {}).items()
        if dim in _VOCAB_DIMS and isinstance(value, int)
    }
    found = []
    for layer in layers:
        name = str(layer.get("name", "?"))
        for dim, value in (layer.get("dims") or {}).items():
            if not isinstance(value, int) or value < SMALLEST:
                continue
            head = dim == "out_features" and (value in sizes or name.endswith("lm_head"))
            if dim in _VOCAB_DIMS or head:
                found.append(_Dim(name, str(layer.get("type", "?")), dim, value))
    return found


def _misaligned(layers: Iterable[Mapping[str, Any]], multiple: int) -> Iterable[_Dim]:
    for layer in layers:
        for dim, value in (layer.get("dims") or {}).items():
            if isinstance(value, int) and value >= SMALLEST and value % multiple:
                yield _Dim(str(layer.get("name", "?")), str(layer.get("type", "?")), dim, value)


def _pad(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _shown(dims: list[_Dim]) -> str:
    described = [str(d) for d in dims]
    return ", ".join(described[:_SHOWN]) + (
        f" and {len(described) - _SHOWN} more" if len(described) > _SHOWN else ""
    )


def _title(vocab: list[_Dim], others: list[_Dim], multiple: int, vocab_multiple: int) -> str:
    if not vocab:
        return f"{len(others)} matmul dimension(s) not a multiple of {multiple}: {_shown(others)}"
    sizes = sorted({d.value for d in vocab})
    padded = ", ".join(f"{v:,} -> {_pad(v, vocab_multiple):,}" for v in sizes)
    title = (
        f"vocabulary of {', '.join(f'{v:,}' for v in sizes)} not a multiple of "
        f"{vocab_multiple} ({padded}): {_shown(vocab)}"
    )
    if others:
        title += f"; and {len(others)} matmul dimension(s) not a multiple of {multiple}: " + (
            _shown(others)
        )
    return title


def _gain(vocab: list[_Dim], found: list[_Dim], multiple: int, vocab_multiple: int) -> str:
    costs = []
    for value in sorted({d.value for d in found}):
        target = _pad(value, vocab_multiple if any(d.value == value for d in vocab) else multiple)
        costs.append(f"{value}->{target} (+{(target - value) / value:.2%})")
    text = (
        f"not estimated for this run (it depends on the kernels cuBLAS picks); padding "
        f"costs {', '.join(costs[:_SHOWN])} more work on those dimensions"
    )
    return f"{text}; the vocabulary's padding, {VOCAB_EFFECT}" if vocab else text


def _action(
    ctx: Context, vocab: list[_Dim], found: list[_Dim], multiple: int, vocab_multiple: int
) -> str:
    parts = []
    if vocab:
        size = max(d.value for d in vocab)
        padded = _pad(size, vocab_multiple)
        parts.append(
            ctx.pick(
                torch=(
                    f"pad the vocabulary to {padded}: model.resize_token_embeddings("
                    f"len(tokenizer), pad_to_multiple_of={vocab_multiple}) (Hugging Face), or "
                    f"nn.Embedding({padded}, d) and nn.Linear(d, {padded}) (nanoGPT's "
                    f"vocab_size={padded})"
                ),
                tensorflow=(
                    f"pad the vocabulary to {padded}: keras.layers.Embedding({padded}, d) "
                    f"and keras.layers.Dense({padded})"
                ),
            )
            + "; ids past the tokenizer's never occur, so the extra rows are never looked "
            "up and their logits train toward zero (or mask them with -inf)"
        )
    layer = next((d for d in found if d.layer != "batch" and d not in vocab), None)
    if layer is not None:
        padded = _pad(layer.value, multiple)
        parts.append(
            f"round up to a multiple of {multiple}: {layer.layer}: {layer.dim} "
            f"{layer.value} -> {padded} ("
            + ctx.pick(torch=f"nn.{layer.kind}", tensorflow=f"keras.layers.{layer.kind}")
            + "); the extra outputs are ignored by masking their logits with -inf"
        )
    batch = next((d for d in found if d.layer == "batch"), None)
    if batch is not None:
        parts.append(f"batch_size={_pad(batch.value, multiple)}")
    return "; ".join(parts)
