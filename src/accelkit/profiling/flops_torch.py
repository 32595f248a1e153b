"""Count the FLOPs of one PyTorch training step by running it once under
`torch.utils.flop_counter.FlopCounterMode`.

Convention (the one MFU figures use; PaLM appendix B, Lightning's `measure_flops`):

- A multiply-add is 2 FLOPs. Counted ops are matmuls (`mm`, `addmm`, `bmm`,
  `baddbmm`, `_scaled_mm`), convolutions and fused attention (SDPA); elementwise
  ops, normalisation, softmax, the loss's reductions and the optimizer update
  are not counted.
- A matmul's backward is two matmuls of the forward's size (gradient of its
  input and of its weight), so a layer costs 3x its forward - except where the
  layer's input needs no gradient (the first layer, fed by the data): its
  backward computes only the weight gradient, and it costs 2x its forward.
- Fused attention is counted over the full T x T score matrix even when causal
  (FlopCounterMode's formula ignores the mask): forward 4·B·T²·D (QKᵀ and AV),
  backward 8·B·T²·D (gradients of Q, K, V and of the scores), which is PaLM's
  12·L·T·D per token and what the unfused path (plain `bmm`s) counts.
  FlopCounterMode's formulas for the fused kernels add the recomputation of
  QKᵀ that flash/memory-efficient kernels do in backward (2·B·T²·D); that is
  hardware work, not model work, so it is taken out again (half the forward
  attention count) and the amount is stated in `notes`.
- Activation checkpointing's recomputed forward is hardware work, not model work
  (PaLM appendix B: MFU excludes rematerialisation, HFU counts it): `total` leaves it
  out and `recomputed` holds it (`accelkit.profiling.flops_recompute` says how it is
  told apart). The fused kernels' own recomputation of QKᵀ is in neither.

- A convolution's backward costs its forward once per gradient it computes (input,
  weight), grouped and depthwise convolutions included.
- Grouped-query attention (fewer key/value heads than query heads) is counted
  over every query head, as the kernel computes it.

PyTorch registers no formula for the CPU flash-attention kernel, so without help
SDPA on CPU counts 0 FLOPs; the CPU and "overrideable" fused kernels are given
the same formulas as the CUDA ones here. Two of PyTorch's formulas are corrected:
a grouped convolution's weight gradient (counted `groups` times over) and, on
PyTorch 2.11 and older, attention whose key and value have fewer heads than the
query (refused).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from accelkit.profiling import flops_sliced, torch_batches
from accelkit.profiling.flop_count import FlopCount

_METHOD = (
    "torch.utils.flop_counter.FlopCounterMode over one forward + loss + backward"
    " (no optimizer step)"
)

# The fused attention ops, each with the op whose registered formula it takes when it
# has none of its own (PyTorch registers none for the CPU and "overrideable" kernels;
# they share the CUDA flash kernel's argument order) and where its query is: forward
# ops take (query, key, value, ...), backward ones (grad_out, query, key, value, ...).
_SDPA = {
    "_scaled_dot_product_flash_attention": ("_scaled_dot_product_flash_attention", 0),
    "_scaled_dot_product_efficient_attention": ("_scaled_dot_product_efficient_attention", 0),
    "_scaled_dot_product_cudnn_attention": ("_scaled_dot_product_cudnn_attention", 0),
    "_scaled_dot_product_flash_attention_for_cpu": ("_scaled_dot_product_flash_attention", 0),
    "_scaled_dot_product_fused_attention_overrideable": ("_scaled_dot_product_flash_attention", 0),
}
_SDPA.update(
    {f"{name}_backward": (f"{source}_backward", 1) for name, (source, _) in list(_SDPA.items())}
)


def count_train_step_flops(
    model: Callable[..., Any],
    batch_inputs: Any,
    targets: Any = None,
    loss_fn: Callable[..., Any] | None = None,
    *,
    autocast: Any = None,
    sliced: bool | None = None,
) -> FlopCount:
    """FLOPs of one training step of `model` on one batch: forward, loss and backward.

    Runs the step for real under `FlopCounterMode`: on a GPU, on slices of 1, 2 and 3
    samples of a batch of 8 or more, extrapolated to the batch when the counts are affine
    in its size (`accelkit.profiling.flops_sliced`: the pass then holds a few samples'
    device memory), else once on the whole batch. Each pass puts the model back as it
    was: parameters' `.grad`, buffers (BatchNorm running statistics,
    `num_batches_tracked`), each module's train/eval mode and the random number
    generators are restored, and no optimizer step is taken. `forward` is read from the
    same pass, before the backward starts.

    Never raises: if the step cannot be counted (an op the counter cannot run,
    an error from the model itself) `total` is None and `notes` says why; an
    error from the model will surface again in the training loop.

    Args:
        model: an `nn.Module` (or any callable of tensors). A `torch.compile`d
            module or a `DistributedDataParallel`/`DataParallel` wrapper is
            counted through the module it wraps: same FLOPs, no compilation and
            no collective on one rank.
        batch_inputs: what the model takes: a tensor (`model(x)`), a tuple or
            list (`model(*x)`) or a mapping (`model(**x)`, e.g. a transformers
            batch with its `labels`), already on the device.
        targets: passed to `loss_fn(output, targets)`; ignored without `loss_fn`.
        loss_fn: `loss_fn(output, targets)`, or `loss_fn(output)` when
            `targets` is None; `output` is what the model returned, as it returned
            it. Without it, the loss the model returned is used (a 0-d tensor, a
            `"loss"` entry or `.loss` such as a transformers `ModelOutput`'s, or a
            0-d tensor in a returned tuple: `accelkit.profiling.torch_batches`),
            else the sum of the outputs; `notes` says which.
        autocast: a context manager, or a factory of one such as
            `plan.autocast`, entered around forward and loss so the counted
            ops are the ones training runs.
        sliced: count on slices of the batch (True), on the whole batch (False), or on
            slices where the batch is on a CUDA device (None): the count's pass then
            competes with training for the device's memory, and on the CPU the model is
            called once, as a script may expect of one extra forward pass.

    Returns:
        A `FlopCount` whose `total` is forward + backward FLOPs for the batch.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(4, 2)
        >>> count_train_step_flops(model, torch.randn(8, 4)).total   # 2·8·4·2 fwd + weight grad
        256
    """

    if sliced not in (True, False, None):
        raise ValueError(f"sliced={sliced!r} is not valid; use True, False or None (on a GPU)")

    def count_on(inputs: Any, cut_targets: Any) -> FlopCount:
        return _count_whole(model, inputs, cut_targets, loss_fn, autocast)

    first = torch_batches.first_tensor(batch_inputs)
    if sliced or (sliced is None and first is not None and first.is_cuda):
        found = flops_sliced.extrapolated(count_on, batch_inputs, targets)
        if found is not None:
            return found
    return count_on(batch_inputs, targets)


def _count_whole(
    model: Callable[..., Any], batch_inputs: Any, targets: Any, loss_fn: Any, autocast: Any
) -> FlopCount:
    """`count_train_step_flops` on this batch as it is."""
    try:
        import torch
        import torch.utils.flop_counter
    except ImportError as error:
        return _failed(f"{error}; FlopCounterMode needs `pip install 'torch>=2.1'`")

    notes: list[str] = []
    model = _unwrap(model, torch, notes)
    forward: int | None = None
    counter = None
    try:
        with _restored(model, batch_inputs, torch), torch.enable_grad():
            counter = flop_counter()
            with counter:
                with _autocast_context(autocast):
                    output = torch_batches.call(model, batch_inputs)
                    loss = _loss(output, targets, loss_fn, torch, notes)
                forward = counter.get_total_flops()
                if not loss.requires_grad:
                    notes.append(
                        "the loss does not require grad (no trainable parameter reached):"
                        " no backward to count"
                    )
                    return FlopCount(None, forward, _by_op(counter), _METHOD, tuple(notes))
                loss.backward()
    except Exception as error:  # noqa: BLE001 - counting must never break training
        notes.append(f"FLOP counting failed: {type(error).__name__}: {error}")
        counts = _by_op(counter) if counter is not None else {}
        return FlopCount(None, forward, counts, _METHOD, tuple(notes))
    return counted(counter, forward=forward, method=_METHOD, notes=notes)


def counted(
    counter: Any, *, forward: int | None = None, method: str = _METHOD, notes: Sequence[str] = ()
) -> FlopCount:
    """The `FlopCount` of what `counter` (a `flop_counter()`, exited) saw: model FLOPs in
    `total` (without the forward activation checkpointing recomputed, and without the
    fused attention kernels' own recomputation of QKᵀ), the recomputed forward in
    `recomputed`, the ops as they ran in `by_op`.

    Example:
        >>> import torch
        >>> with flop_counter() as counter:
        ...     torch.nn.Linear(4, 2)(torch.randn(8, 4)).sum().backward()
        >>> count = counted(counter, method="example")
        >>> count.total, count.recomputed, count.hardware
        (256, 0, 256)
    """
    notes = list(notes)
    counts = _by_op(counter)
    recomputed_by_op = counter.recomputed_by_op()
    model_counts = {op: n - recomputed_by_op.get(op, 0) for op, n in counts.items()}
    recomputed = sum(recomputed_by_op.values())
    total = sum(model_counts.values()) - _attention_recompute(model_counts, notes)
    if recomputed:
        notes.append(
            f"activation checkpointing recomputed {recomputed:.4g} FLOPs of forward in backward:"
            " in hardware_flops_per_step (HFU), not in flops_per_step (MFU; PaLM appendix B)"
        )
    if total == 0:
        notes.append("no matmul, convolution or attention op was counted: total is 0")
    return FlopCount(total, forward, counts, method, tuple(notes), recomputed=recomputed)


def _failed(note: str) -> FlopCount:
    return FlopCount(None, None, {}, _METHOD, (f"FLOP counting failed: {note}",))


def _unwrap(model: Any, torch: Any, notes: list[str]) -> Any:
    """The module under a compile or data-parallel wrapper: same ops, no side effects."""
    while True:
        if type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod"):
            notes.append("counted the module under torch.compile (same FLOPs, no compilation)")
            model = model._orig_mod
        elif isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            wrapper = type(model).__name__
            notes.append(f"counted the module under {wrapper}: FLOPs of this process's batch")
            model = model.module
        else:
            return model


def flop_counter() -> Any:
    """A `FlopCounterMode` with accelkit's formulas for what PyTorch's registry misses
    (`_extra_formulas`) that counts the forward activation checkpointing recomputes
    apart (`accelkit.profiling.flops_recompute.StepFlopCounter`): the counter every door
    counts a step with; `counted` turns what it saw into a `FlopCount`.

    Example:
        >>> import torch
        >>> with flop_counter() as counter:
        ...     _ = torch.nn.Linear(4, 2)(torch.randn(8, 4))
        >>> counter.get_total_flops()
        128
    """
    import torch

    from accelkit.profiling.flops_recompute import StepFlopCounter

    return StepFlopCounter(custom_mapping=_extra_formulas(torch))


def _extra_formulas(torch: Any) -> dict[Any, Callable[..., int]]:
    """Formulas for what PyTorch's flop registry misses or miscounts: the CPU fused
    attention kernels, grouped-query attention, grouped convolutions' weight gradient."""
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    mapping: dict[Any, Callable[..., int]] = {aten.convolution_backward: _conv_backward}
    for name, (source, query_at) in _SDPA.items():
        op = getattr(aten, name, None)
        formula = flop_registry.get(op) or flop_registry.get(getattr(aten, source, None))
        if op is not None and formula is not None:
            mapping[op] = _heads_broadcast(formula, query_at, torch)
    return mapping


def _heads_broadcast(formula: Callable[..., int], query_at: int, torch: Any) -> Callable[..., int]:
    """`formula` (a registry entry: it takes tensors) with key and value given the query's
    head count, as grouped-query attention broadcasts them: the kernel multiplies every
    query head by its group's keys and values, and PyTorch 2.11's formula refuses K and V
    with fewer heads. `_get_raw` stops FlopCounterMode re-wrapping the entry."""

    def raw(*args: Any, **kwargs: Any) -> int:
        args_list = list(args)
        heads = args_list[query_at].shape[1]
        for at in (query_at + 1, query_at + 2):
            shape = args_list[at].shape
            if len(shape) == 4 and shape[1] != heads:  # a shape passes through unchanged
                args_list[at] = torch.Size((shape[0], heads, *shape[2:]))
        return formula(*args_list, **kwargs)

    raw._get_raw = True  # type: ignore[attr-defined]
    return raw


def _conv_backward(
    grad_out_shape: Any,
    x_shape: Any,
    w_shape: Any,
    _bias: Any,
    _stride: Any,
    _padding: Any,
    _dilation: Any,
    transposed: bool,
    _output_padding: Any,
    _groups: Any,
    output_mask: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """A convolution's backward: each gradient it computes (input, weight) is the
    forward's multiply-adds again. PyTorch's formula counts the weight gradient of a
    grouped convolution over every input channel, not the group's: `groups` times too
    many, 100x for ConvNeXt's depthwise 7x7 (fixed upstream in pytorch/pytorch#183405)."""
    spatial = (x_shape if transposed else grad_out_shape)[2:]  # as the forward's formula
    forward = 2 * x_shape[0] * math.prod(spatial) * math.prod(w_shape)  # w: (out, in/groups, k..)
    return forward * (bool(output_mask[0]) + bool(output_mask[1]))


def _autocast_context(autocast: Any) -> contextlib.AbstractContextManager[Any]:
    if autocast is None:
        return contextlib.nullcontext()
    if hasattr(autocast, "__enter__"):
        return autocast
    return autocast()


def _loss(
    output: Any, targets: Any, loss_fn: Callable[..., Any] | None, torch: Any, notes: list[str]
) -> Any:
    if loss_fn is not None:
        result = loss_fn(output) if targets is None else loss_fn(output, targets)
        return torch_batches.loss_of(result, source=torch_batches.LOSS_FN)
    if targets is not None:
        notes.append("targets given without loss_fn: ignored")
    try:
        loss = torch_batches.loss_of(output)
        notes.append("loss: the scalar loss the model returned")
        return loss
    except ValueError:  # a model without a loss still has FLOPs to count
        pass
    tensors = [t for t in _tensors(output, torch) if t.is_floating_point()]
    if not tensors:
        kind = type(output).__name__
        raise TypeError(f"the model returned no floating-point tensor to take a loss of ({kind})")
    notes.append(
        "loss: no loss_fn and no scalar loss returned, so the sum of the model's outputs"
        " (its FLOPs are not counted)"
    )
    return sum(t.float().sum() for t in tensors)


def _tensors(value: Any, torch: Any) -> Iterator[Any]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item, torch)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item, torch)


def _attention_recompute(counts: Mapping[str, int], notes: list[str]) -> int:
    """FLOPs of the QKᵀ the fused attention backward recomputes: half the forward
    attention count (QKᵀ and AV are the same size when Q, K, V share a head width)."""
    if not any("attention" in op and "backward" in op for op in counts):
        return 0
    forward = sum(n for op, n in counts.items() if "attention" in op and "backward" not in op)
    if forward:
        notes.append(
            f"fused attention's recomputation of QKᵀ in backward ({forward // 2:.4g} "
            "FLOPs) is not counted: model FLOPs, as in PaLM appendix B"
        )
    return forward // 2


def _by_op(counter: Any) -> dict[str, int]:
    return {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items() if n}


@contextlib.contextmanager
def _restored(model: Any, batch_inputs: Any, torch: Any) -> Iterator[None]:
    """Leave `model` (and the inputs' grads, and the RNGs) exactly as they were."""
    modules = list(model.modules()) if isinstance(model, torch.nn.Module) else []
    modes = [(module, module.training) for module in modules]
    buffers = [
        (module, name, buffer, buffer.detach().clone())
        for module in modules
        for name, buffer in module._buffers.items()
        if buffer is not None
    ]
    leaves = list(model.parameters()) if modules else []
    leaves += [t for t in _tensors(batch_inputs, torch) if t.requires_grad and t.is_leaf]
    grads = [(leaf, leaf.grad) for leaf in leaves]
    for leaf in leaves:  # with .grad None, backward writes fresh tensors; saved ones stay intact
        leaf.grad = None
    on_device = leaves + [buffer for _, _, buffer, _ in buffers]
    devices = sorted({t.device.index or 0 for t in on_device if t.is_cuda})
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        with torch.no_grad():
            for leaf, grad in grads:
                leaf.grad = grad
            for module, name, buffer, saved in buffers:
                module._buffers[name] = buffer
                buffer.copy_(saved)
        for module, training in modes:
            module.training = training
