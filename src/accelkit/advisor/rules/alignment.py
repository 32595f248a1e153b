"""Tensor-core alignment: matmul dimensions that are not multiples of 8 (16 for fp8).

Tensor cores work on tiles 16 bytes wide along each dimension: 8 fp16/bf16
values, 16 fp8 values (NVIDIA, "Matrix Multiplication Background User's
Guide", tensor core requirements). A Linear/Dense layer with 1001 outputs, a
vocabulary of 50257, or a batch of 100 makes cuBLAS pick slower kernels or pad
on every call. Dimensions below 64 are left out: such layers are memory-bound,
and padding them adds work without a tensor-core gain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from accelkit.advisor.context import Context
from accelkit.advisor.types import Advice, Severity
from accelkit.hardware import capabilities

SMALLEST = 64
_SHOWN = 6


class _Dim(NamedTuple):
    layer: str  # layer name, or "batch"
    kind: str  # layer type, e.g. "Linear"
    dim: str  # e.g. "out_features"
    value: int

    def __str__(self) -> str:
        if self.layer == "batch":
            return f"batch_size={self.value}"
        return f"{self.layer} ({self.kind} {self.dim}={self.value})"


def alignment(ctx: Context) -> Advice | None:
    """Names the layers (and the batch) whose dimensions are misaligned.

    Example:
        >>> layers = [{"name": "head", "type": "Linear",
        ...            "dims": {"in_features": 512, "out_features": 1001}}]
        >>> ctx = Context.build(None, None, {"facts": {"layers": layers}})
        >>> alignment(ctx).evidence["misaligned"]
        ['head (Linear out_features=1001)']
    """
    multiple = 16 if ctx.matmul_dtype == "fp8" else 8
    found = list(_misaligned(ctx.fact("layers") or (), multiple))
    batch = ctx.batch_size
    if batch and batch >= SMALLEST and batch % multiple:
        found.append(_Dim("batch", "batch", "batch_size", batch))
    if not found:
        return None
    cc = ctx.compute_capability
    tensor_cores = (capabilities.has_tensor_cores(cc)
                    and ctx.matmul_dtype in ("bf16", "fp16", "tf32", "fp8"))
    described = [str(d) for d in found]
    shown = ", ".join(described[:_SHOWN]) + (
        f" and {len(described) - _SHOWN} more" if len(described) > _SHOWN else "")
    values = sorted({d.value for d in found})
    padding = ", ".join(f"{v}->{_pad(v, multiple)} (+{(_pad(v, multiple) - v) / v:.1%})"
                        for v in values[:_SHOWN])
    return Advice(
        id="alignment",
        severity=Severity.WARNING if tensor_cores else Severity.INFO,
        title=(f"{len(found)} matmul dimension(s) not a multiple of {multiple}: {shown}"
               + ("" if tensor_cores else " (matters once the matmuls run on tensor cores)")),
        evidence={"misaligned": described, "multiple": multiple,
                  "matmul_dtype": ctx.matmul_dtype},
        action=_action(ctx, found, multiple),
        expected_gain=(f"not estimated (it depends on the kernels cuBLAS picks); padding "
                       f"costs {padding} more work on those dimensions"),
    )


def _misaligned(layers: Iterable[Mapping[str, Any]], multiple: int) -> Iterable[_Dim]:
    for layer in layers:
        for dim, value in (layer.get("dims") or {}).items():
            if isinstance(value, int) and value >= SMALLEST and value % multiple:
                yield _Dim(str(layer.get("name", "?")), str(layer.get("type", "?")), dim, value)


def _pad(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _action(ctx: Context, found: list[_Dim], multiple: int) -> str:
    parts = []
    layer = next((d for d in found if d.layer != "batch"), None)
    if layer is not None:
        padded = _pad(layer.value, multiple)
        parts.append(f"{layer.layer}: {layer.dim} {layer.value} -> {padded} ("
                     + ctx.pick(torch=f"nn.{layer.kind}", tensorflow=f"keras.layers.{layer.kind}")
                     + "); the extra outputs are ignored by masking their logits with -inf, "
                       "extra vocabulary rows are never looked up")
    batch = next((d for d in found if d.layer == "batch"), None)
    if batch is not None:
        parts.append(f"batch_size={_pad(batch.value, multiple)}")
    return f"round up to a multiple of {multiple}: " + "; ".join(parts)
