"""Facts about a PyTorch model and its input, for the advisor; read once per run.

Called by `accelkit.torch.Meter` and `accelkit.torch.fit`. Every function
returns plain data and never raises into the run: a model it cannot read
gives fewer facts, not an error.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from accelkit.hardware import float_formats

_MAX_LAYERS = 2000


def model_facts(model: Any, optimizer: Any = None) -> dict[str, Any]:
    """Matmul layer dimensions, parameter sizes, DataParallel/DDP wrapping, whether the
    model is a ``torch.compile`` module, the optimizer's implementation
    (`optimizer_facts`), and the attention of its Hugging Face models (`attention_facts`).

    Example:
        >>> import torch
        >>> model_facts(torch.nn.Linear(512, 1001))["layers"]
        [{'name': 'Linear', 'type': 'Linear', 'dims': {'in_features': 512, 'out_features': 1001}}]
    """
    import torch

    facts: dict[str, Any] = {}
    try:
        nn = torch.nn
        facts["data_parallel"] = isinstance(model, nn.DataParallel)
        facts["distributed"] = isinstance(model, nn.parallel.DistributedDataParallel) or (
            torch.distributed.is_available() and torch.distributed.is_initialized()
        )
        if facts["data_parallel"]:
            facts["devices_used"] = max(len(model.device_ids or ()), 1)
        # A hand-written loop that compiles its model hands the meter the compiled module;
        # accelkit.torch.fit says whether it compiled the step with its own `compiled` fact.
        facts["model_compiled"] = _is_compiled(model)
        facts["layers"] = _layers(torch, model)
        params = [p for p in model.parameters() if p.requires_grad]
        facts["parameters"] = sum(p.numel() for p in params)
        facts["parameter_bytes"] = sum(p.numel() * p.element_size() for p in params)
        state = facts["parameter_bytes"] + sum(
            p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None
        )
        if optimizer is not None:
            state += _optimizer_bytes(torch, optimizer)
            facts["optimizer"] = optimizer_facts(optimizer)
        facts["model_state_bytes"] = state
        if attention := attention_facts(model):
            facts["attention"] = attention
    except Exception as error:  # noqa: BLE001 - facts are optional; the run goes on
        facts["facts_error"] = f"{type(error).__name__}: {error}"
    return facts


def model_device(torch: Any, model: Any) -> Any:
    """The device of `model`'s first parameter; without one, the current CUDA device
    when CUDA is in use, else the CPU."""
    if model is not None:
        for tensor in model.parameters():
            return tensor.device
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def transformers_models(model: Any) -> list[Any]:
    """The outermost Hugging Face ``PreTrainedModel``s in `model`'s module tree: the model
    itself, or those inside a LightningModule or a wrapper (a ``GPT2LMHeadModel``, not
    also the ``GPT2Model`` inside it, which shares its config). Empty where transformers'
    models were never imported (none can be in the tree then; nothing is imported here).
    """
    modelling = sys.modules.get("transformers.modeling_utils")
    if modelling is None or not hasattr(model, "named_modules"):
        return []
    found: list[tuple[str, Any]] = []
    for name, module in model.named_modules():
        inside = any(name.startswith(f"{outer}.") or not outer for outer, _ in found)
        if not inside and isinstance(module, modelling.PreTrainedModel):
            found.append((name, module))
    return [module for _, module in found]


def sdpa_refusal(model: Any) -> str | None:
    """Why the transformers `model` cannot switch its attention to SDPA in place
    (``torch.nn.functional.scaled_dot_product_attention``), or None: it can.

    transformers says so by the class's ``_supports_sdpa`` and
    ``_can_set_attn_implementation()`` (attention read through its AttentionInterface at
    each forward, which ``set_attn_implementation`` switches); attention weights returned
    to the caller (``output_attentions``) exist only in the eager implementation.
    """
    name = type(model).__name__
    if not getattr(model, "_supports_sdpa", False):
        return f"{name} has no SDPA attention in this transformers version"
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if not callable(can_set) or not can_set():
        return f"{name} cannot switch its attention in place (set_attn_implementation)"
    if getattr(model.config, "output_attentions", False):
        return f"{name} returns its attention weights (output_attentions=True): eager only"
    return None


def attention_facts(model: Any) -> list[dict[str, Any]]:
    """Per Hugging Face model in `model` (`transformers_models`): its class, the attention
    implementation its config holds (``"eager"``, ``"sdpa"``, ``"flash_attention_2"``...),
    whether it could run SDPA, and why not.

    Example:
        >>> import torch
        >>> attention_facts(torch.nn.Linear(4, 2))
        []
    """
    facts = []
    for found in transformers_models(model):
        refusal = sdpa_refusal(found)
        entry = {
            "model": type(found).__name__,
            "implementation": getattr(found.config, "_attn_implementation", None),
            "sdpa": refusal is None,
        }
        facts.append(entry if refusal is None else {**entry, "why": refusal})
    return facts


def _is_compiled(model: Any) -> bool:
    """`torch.compile(module)` returns an ``OptimizedModule`` holding the original as
    ``_orig_mod``; a DataParallel/DDP wrapper holds it as ``module``."""
    inner = getattr(model, "module", model)
    return any(
        type(m).__name__ == "OptimizedModule" or hasattr(m, "_orig_mod") for m in (model, inner)
    )


def optimizer_facts(optimizer: Any) -> dict[str, Any]:
    """Which implementation a ``torch.optim`` optimizer's step runs, decided as PyTorch does.

    PyTorch has three (torch.optim docs, "Algorithms"): a for-loop over the parameter
    tensors, launching each update's kernels per tensor; ``foreach``, a few multi-tensor
    kernels over lists of tensors; ``fused``, one kernel per group of tensors. With
    ``fused`` and ``foreach`` both left at None, ``torch.optim.optimizer.
    _default_to_fused_or_foreach`` picks foreach when every parameter is a plain tensor on
    a device with foreach kernels (CUDA, XPU, MTIA: not the CPU) and the optimizer is not
    ``differentiable``, and the for-loop otherwise; fused is never the default. Setting
    either flag (True or False) bypasses that choice: ``fused=False`` alone means the
    for-loop. Adam and AdamW also stay on the for-loop by default for a tensor ``lr``
    without ``capturable``.

    Returns:
        ``{"type", "implementation": "fused" | "foreach" | "for-loop", "foreach_available",
        "fused_available", "set_by_user", "parameter_tensors", "param_groups"}``: the
        implementation of the group holding most tensors; ``*_available`` when the
        optimizer has that option and every parameter qualifies (fused: floating point, on
        a device with fused kernels); ``set_by_user`` when a group sets fused or foreach;
        ``parameter_tensors``, the tensors the step walks. Only ``type`` for an object
        that is not a ``torch.optim.Optimizer``.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(4, 4)
        >>> optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
        >>> optimizer_facts(optimizer)  # doctest: +NORMALIZE_WHITESPACE
        {'type': 'AdamW', 'implementation': 'for-loop', 'foreach_available': False,
         'fused_available': True, 'set_by_user': True, 'parameter_tensors': 2, 'param_groups': 1}
    """
    facts: dict[str, Any] = {"type": type(optimizer).__name__}
    try:
        import torch

        if not isinstance(optimizer, torch.optim.Optimizer):
            return facts
        foreach_devices, fused_devices = _kernel_devices()
        defaults = optimizer.defaults
        adam = isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))
        tensors: dict[str, int] = {}
        params = []
        for group in optimizer.param_groups:
            group_params = [p for p in group["params"] if p.requires_grad]
            params += group_params
            kind = _implementation(torch, group, group_params, foreach_devices, adam)
            tensors[kind] = tensors.get(kind, 0) + len(group_params)
        plain = all(type(p) in (torch.Tensor, torch.nn.Parameter) for p in params)
        differentiable = bool(defaults.get("differentiable"))
        facts.update(
            implementation=max(tensors, key=tensors.__getitem__) if tensors else "for-loop",
            foreach_available="foreach" in defaults
            and not differentiable
            and plain
            and all(p.device.type in foreach_devices for p in params),
            fused_available="fused" in defaults
            and not differentiable
            and all(p.device.type in fused_devices and p.is_floating_point() for p in params),
            set_by_user=any(
                group.get("fused") is not None or group.get("foreach") is not None
                for group in optimizer.param_groups
            ),
            parameter_tensors=len(params),
            param_groups=len(optimizer.param_groups),
        )
    except Exception as error:  # noqa: BLE001 - facts are optional; the run goes on
        facts["facts_error"] = f"{type(error).__name__}: {error}"
    return facts


def _kernel_devices() -> tuple[list[str], list[str]]:
    """Device types with foreach and with fused optimizer kernels, from PyTorch itself."""
    try:
        from torch.utils._foreach_utils import (
            _get_foreach_kernels_supported_devices,
            _get_fused_kernels_supported_devices,
        )

        return _get_foreach_kernels_supported_devices(), _get_fused_kernels_supported_devices()
    except ImportError:  # a PyTorch without them (< 2.1): CUDA has both
        return ["cuda"], ["cuda"]


def _implementation(
    torch: Any, group: Mapping[str, Any], params: list[Any], foreach_devices: list[str], adam: bool
) -> str:
    """The implementation one param group's step runs (torch.optim's functional entry
    points: adam.adam, sgd.sgd, ... and optimizer._default_to_fused_or_foreach)."""
    fused, foreach = group.get("fused"), group.get("foreach")
    if fused:
        return "fused"
    if foreach:
        return "foreach"
    if fused is not None or foreach is not None or "foreach" not in group:
        return "for-loop"  # the user chose it, or the optimizer has no other
    if group.get("differentiable"):
        return "for-loop"
    if adam and isinstance(group.get("lr"), torch.Tensor) and not group.get("capturable"):
        return "for-loop"  # adam.py: no default foreach for a tensor lr without capturable
    on_foreach_devices = all(
        type(p) in (torch.Tensor, torch.nn.Parameter) and p.device.type in foreach_devices
        for p in params
    )
    return "foreach" if on_foreach_devices else "for-loop"


def _layers(torch: Any, model: Any) -> list[dict[str, Any]]:
    nn = torch.nn
    lazy = nn.modules.lazy.LazyModuleMixin  # not materialised yet: no sizes to read
    root = type(model).__name__
    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not isinstance(module, lazy):
            dims = {"in_features": module.in_features, "out_features": module.out_features}
        elif isinstance(module, nn.Embedding):
            dims = {"num_embeddings": module.num_embeddings, "embedding_dim": module.embedding_dim}
        elif isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) and not isinstance(module, lazy):
            dims = {"in_channels": module.in_channels, "out_channels": module.out_channels}
        else:
            continue
        # Children of a Sequential are named "0", "1"...: say whose.
        label = f"{root}.{name}" if name[:1].isdigit() else name or root
        found.append({"name": label, "type": type(module).__name__, "dims": dims})
        if len(found) >= _MAX_LAYERS:
            break
    return found


def _optimizer_bytes(torch: Any, optimizer: Any) -> int:
    total = 0
    for state in getattr(optimizer, "state", {}).values():
        for value in state.values() if isinstance(state, dict) else ():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
    return total


def loader_facts(loader: Any) -> dict[str, Any]:
    """The input pipeline's settings: a `DataLoader`'s worker and pinning options.

    Example:
        >>> import torch
        >>> loader_facts(torch.utils.data.DataLoader(range(10), batch_size=2))["num_workers"]
        0
    """
    try:
        from torch.utils.data import DataLoader

        if not isinstance(loader, DataLoader):
            return {"type": type(loader).__name__}
        return {
            "type": "DataLoader",
            "num_workers": loader.num_workers,
            "pin_memory": bool(loader.pin_memory),
            "persistent_workers": bool(loader.persistent_workers),
            "prefetch_factor": loader.prefetch_factor,
            "batch_size": loader.batch_size,
            "dataset": type(loader.dataset).__name__,
        }
    except Exception as error:  # noqa: BLE001 - facts are optional
        return {"type": type(loader).__name__, "facts_error": str(error)}


def steps_per_epoch(loader: Any) -> int | None:
    """`len(loader)` when it has one (a DataLoader over a sized dataset), else None."""
    try:
        return len(loader)
    except Exception:  # noqa: BLE001 - iterables without a length are fine
        return None


def half_integer_inputs(batch: Any) -> list[dict[str, Any]]:
    """Tensors of a (first) batch in float16/bfloat16 that hold only whole numbers, some of
    them small, some past what the dtype holds exactly (fp16: 2048, bf16: 256).

    Token ids (or counts, years) cast to a 16-bit float with the batch, e.g.
    ``{k: v.to(device, torch.bfloat16) for k, v in batch.items()}``, arrive rounded:
    in bfloat16, 12345 -> 12352. Above half the limit every value of the dtype is whole,
    so a tensor counts only when it also holds a nonzero whole number below that, where
    real-valued data would show fractions. One pass over the batch's half tensors.

    Returns:
        ``[{"input", "dtype", "shape", "max", "exact_up_to"}]``; ``input`` is the dict key
        or ``batch[i]``.

    Example:
        >>> import torch
        >>> half_integer_inputs({"input_ids": torch.tensor([[5, 12345]]).bfloat16()})[0]["max"]
        12352.0
    """
    try:
        import torch

        found = []
        for name, tensor in _named_tensors(batch, "batch"):
            if tensor.dtype not in (torch.float16, torch.bfloat16) or tensor.numel() < 2:
                continue
            dtype = str(tensor.dtype).replace("torch.", "")
            limit = float_formats.exact_limit(dtype) or 0
            values = tensor.detach()
            top = float(values.max())
            if (
                top <= limit
                or float(values.min()) < 0
                or not bool((values == values.round()).all())
            ):
                continue
            if not bool(((values > 0) & (values < limit / 2)).any()):
                continue  # only large values: whole because the dtype holds nothing finer
            found.append(
                {
                    "input": name,
                    "dtype": dtype,
                    "shape": list(tensor.shape),
                    "max": top,
                    "exact_up_to": limit,
                }
            )
        return found
    except Exception:  # noqa: BLE001 - facts are optional: no finding
        return []


def _named_tensors(batch: Any, name: str, depth: int = 0) -> list[tuple[str, Any]]:
    """(name, tensor) for the tensors of a batch: a tensor, a dict, a list or tuple."""
    if hasattr(batch, "dtype") and hasattr(batch, "numel"):
        return [(name, batch)]
    if depth > 2:
        return []
    if isinstance(batch, Mapping):
        items = [(str(key), value) for key, value in batch.items()]
    elif isinstance(batch, (list, tuple)):
        items = [(f"{name}[{i}]", value) for i, value in enumerate(batch)]
    else:
        return []
    return [found for key, value in items for found in _named_tensors(value, key, depth + 1)]
