"""float8 matmuls on the linear layers large enough to gain: a `tune` candidate.

On compute capability 8.9 and later (Ada, Hopper, Blackwell) tensor cores multiply
float8 at twice the bf16 rate (H100/H200 dense: 1,978.9 against 989.4 TFLOP/s).
torchao's float8 training (`torchao.float8`, the ``"tensorwise"`` recipe) swaps an
``nn.Linear`` for a ``Float8Linear`` that shares its weight and bias and runs its three
matmuls (forward, gradient of the input, gradient of the weight) in float8, with one
dynamic scale per tensor. The casts cost memory traffic of their own, so a small layer
runs slower in float8 than in bf16 (torchao's microbenchmark: a 1024x2048x1024 linear at
0.80x), and only ``torch.compile`` fuses them into the neighbouring kernels.

What is converted (`eligible`): every plain ``nn.Linear`` (not a subclass: a
``MultiheadAttention``'s projection is read by its functional attention, not called)
whose dimensions are multiples of 16 (what float8 matmuls need) and that passes
torchao's size filter for the recipe, measured on H100 (`too_small`: in features <= 4096
and out features <= 1024 are left in bf16); never the output head (a model's output
embeddings, else its last linear layer), which stays in bf16 as the loss reads it.
Hugging Face GPT-2's ``Conv1D`` layers are not ``nn.Linear``: the reason says so.

The candidate (`lever`) runs on top of the compiled step kept so far (never without
compile), where the GPU has float8 tensor cores and torchao imports, and where the run
left pays for its compilation (`unpaid`: float8's is slower than bf16's). It is checked
against the bf16 step on its first batch, with a tolerance of its own (`TOLERANCE`:
float8 moves the numbers more than compile does), timed in paired rounds like every
candidate, and undone completely when not kept: each original layer goes back in its
place, its parameters the same tensors, never copied (`Float8Layers.off`). A kept one
stays after the training, as ``report.tuning`` says (``float8``): a loop that goes on
after `accelkit.torch.tune` trains in float8 too; the ``Float8Linear`` layers hold the
same parameters under the same names, so a checkpoint loads into the model as built.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from accelkit.hardware import capabilities
from accelkit.hardware.capabilities import format_capability as _fmt
from accelkit.planning.precision import FLOAT8_NEEDS
from accelkit.profiling.tuning import AUTOTUNE_SHARE, UNKNOWN_LENGTH, Trial, default_compile
from accelkit.torch.tuning import trial_guards as guards
from accelkit.torch.tuning import trials
from accelkit.torch.tuning.candidate import Candidate, Skipped
from accelkit.utils.imports import install_command

if TYPE_CHECKING:
    from accelkit.torch.tuning.engine import Engine

# float8 matmuls (torch._scaled_mm) need both dimensions of the weight multiples of 16.
MULTIPLE = 16
# torchao's size filter for the tensorwise recipe (torchao/float8/float8_linear_utils.py,
# `_auto_filter_for_tensorwise`, from its H100 benchmark tables): a layer with at most
# this many input features and at most SMALL_OUT output features is slower in float8.
SMALL_IN = 4096
SMALL_OUT = 1024
# float8's compile against bf16's on the same step: 96 s against 53 s for a
# Llama-3.2-1B shape on an H200 (torch.compile of forward and backward, issue 36).
COMPILE_FACTOR = 1.8
NAME = "float8"


@dataclasses.dataclass(frozen=True)
class Eligible:
    """The layers of a module that float8 converts, and what it leaves and why.

    Attributes:
        names: the qualified names of the linear layers converted.
        left: each reason a layer is left in bf16, with how many layers it holds.
    """

    names: tuple[str, ...]
    left: dict[str, int]

    def why_none(self) -> str:
        """Why no layer is converted: every reason with its count."""
        reasons = "; ".join(f"{count} {why}" for why, count in self.left.items())
        return f"no linear layer large enough for float8 ({reasons or 'no linear layers'})"


def eligible(module: Any) -> Eligible:
    """The linear layers of `module` that float8 converts (`Eligible`).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        ...                             torch.nn.Linear(4096, 1024), torch.nn.Linear(1024, 10))
        >>> found = eligible(model)
        >>> found.names
        ('0',)
        >>> found.left
        {'smaller than 4096 in x 1024 out features': 1, 'output head kept in bf16': 1}
    """
    import torch

    head = _head(module, torch)
    names: list[str] = []
    left: dict[str, int] = {}
    for name, layer in module.named_modules():
        why = _refusal(layer, layer is head, torch)
        if why is None:
            names.append(name)
        elif why:
            left[why] = left.get(why, 0) + 1
    return Eligible(tuple(names), left)


def _refusal(layer: Any, head: bool, torch: Any) -> str | None:
    """Why `layer` stays in bf16 ("" where it is no linear layer at all), or None."""
    if _conv1d(layer):
        return "Conv1D layers (Hugging Face GPT-2's; torchao converts nn.Linear only)"
    if not isinstance(layer, torch.nn.Linear):
        return ""
    if type(layer) is not torch.nn.Linear:
        return f"subclasses of nn.Linear ({type(layer).__name__}) left as they are"
    if head:
        return "output head kept in bf16"
    out_features, in_features = layer.weight.shape
    if in_features % MULTIPLE or out_features % MULTIPLE:
        return f"with a dimension not a multiple of {MULTIPLE}"
    if too_small(in_features, out_features):
        return f"smaller than {SMALL_IN} in x {SMALL_OUT} out features"
    return None


def too_small(in_features: int, out_features: int) -> bool:
    """torchao's size filter for tensorwise float8 (`SMALL_IN`, `SMALL_OUT`)."""
    return in_features <= SMALL_IN and out_features <= SMALL_OUT


def _conv1d(layer: Any) -> bool:
    kind = type(layer)
    return kind.__name__ == "Conv1D" and kind.__module__.startswith("transformers")


def _head(module: Any, torch: Any) -> Any:
    """The output head: a transformers model's output embeddings, else the last linear
    layer in the module's order (None without one)."""
    for sub in module.modules():
        get = getattr(sub, "get_output_embeddings", None)
        if callable(get):
            try:
                found = get()
            except Exception:  # noqa: BLE001 - a model without one says so its own way
                found = None
            if found is not None:
                return found
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    return linears[-1] if linears else None


class Float8Layers:
    """`names` of `module` as torchao ``Float8Linear`` layers (`on`) and as they were
    (`off`): the same layer objects put back, their parameters never copied. Idempotent.

    Each ``Float8Linear`` shares its layer's weight and bias (so the optimizer steps the
    same tensors either way) and its hooks.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(64, 64))
        >>> layers = Float8Layers(model, ("0",), emulate=True)
        >>> layers.on()
        >>> type(model[0]).__name__, model[0].weight is layers.originals[0].weight
        ('Float8Linear', True)
        >>> layers.off()
        >>> type(model[0]).__name__
        'Linear'
    """

    def __init__(self, module: Any, names: tuple[str, ...], *, emulate: bool = False) -> None:
        from torchao.float8 import Float8LinearConfig  # type: ignore[import-untyped]
        from torchao.float8.float8_linear import Float8Linear  # type: ignore[import-untyped]

        config = Float8LinearConfig(emulate=emulate)
        self._places = [_place(module, name) for name in names]
        self.originals = [getattr(parent, attr) for parent, attr in self._places]
        self._float8 = [_shared(Float8Linear.from_float(o, config), o) for o in self.originals]

    def on(self) -> None:
        for (parent, attr), layer in zip(self._places, self._float8, strict=True):
            setattr(parent, attr, layer)

    def off(self) -> None:
        for (parent, attr), layer in zip(self._places, self.originals, strict=True):
            setattr(parent, attr, layer)


def _place(module: Any, name: str) -> tuple[Any, str]:
    parent_name, _, attr = name.rpartition(".")
    return (module.get_submodule(parent_name) if parent_name else module), attr


def _shared(float8: Any, original: Any) -> Any:
    """`float8` with `original`'s hooks (the same dictionaries) and training mode."""
    for name, value in vars(original).items():
        if name.endswith(("hooks", "hooks_with_kwargs")):
            setattr(float8, name, value)
    float8.train(original.training)
    return float8


def unsupported(torch: Any, device: Any) -> str | None:
    """Why float8 cannot run here, or None: a GPU without float8 tensor cores (compute
    capability below 8.9), or torchao missing; "" off CUDA devices, where no record
    speaks of it (a GPU lever, as the plan says)."""
    if device.type != "cuda":
        return ""
    cc = tuple(torch.cuda.get_device_capability(device))
    if not capabilities.has_fp8(cc):
        name = torch.cuda.get_device_name(device)
        return f"{name} has compute capability {_fmt(cc)}: float8 needs {FLOAT8_NEEDS}"
    if importlib.util.find_spec("torchao") is None:
        return f"torchao is not installed: {install_command('fp8')}"
    return None


def unpaid(engine: Engine) -> str | None:
    """Why the run left would not pay for float8's compilation, or None: `COMPILE_FACTOR`
    times the measured compile against `AUTOTUNE_SHARE` of the run left at the kept step
    time (as max-autotune is priced). The measured compile is tune's own, or where the
    script or trainer compiled, its first unit's overhead in the baseline's trial (none
    where it compiled before tune began: then float8 is tried)."""
    door, kept = engine.door, engine.best_trial()
    compiled = _compiled(engine)
    if compiled is None or compiled.compile_seconds is None:
        return None  # no compile measured
    if door.planned is None:
        return f"{UNKNOWN_LENGTH} (no steps= and no len(loader))"
    if kept.step_seconds is None:
        return None
    left = max(door.planned - engine.steps, 0) * kept.step_seconds / door.unit
    cost = COMPILE_FACTOR * compiled.compile_seconds
    if cost > AUTOTUNE_SHARE * left:
        return (
            f"the run's {left:.0f} s left would not pay back float8's compilation "
            f"(about {cost:.0f} s)"
        )
    return None


def _compiled(engine: Engine) -> Trial | None:
    """The trial whose compile time prices float8's: tune's compile, or the baseline's
    where the script or trainer compiled."""
    if engine.door.compile_fixed:
        return next((t for t in engine.trials if t.status == "baseline"), None)
    return default_compile(engine.trials)


def lever(engine: Engine) -> Iterator[Candidate | Skipped]:
    """tune's float8 lever: the eligible linear layers as ``Float8Linear``, on top of the
    compiled step kept so far, checked against it with `TOLERANCE`."""
    door = engine.door
    why = _not_here(engine)
    if why is not None:
        if why:
            yield Skipped(NAME, why)
        return
    found = eligible(door.module)
    if not found.names:
        yield Skipped(NAME, found.why_none())
        return
    settings = engine.best.settings.with_(float8=True)
    try:
        layers = Float8Layers(door.module, found.names, emulate=door.device.type != "cuda")
    except Exception as error:  # noqa: BLE001 - a torchao that refuses: a finding, not a crash
        yield Skipped(settings.name(), guards.why(error), settings, failed=True)
        return
    yield Candidate(
        settings, on=layers.on, off=layers.off, checked=True, tolerance=TOLERANCE, stays=True
    )


def _not_here(engine: Engine) -> str | None:
    door = engine.door
    if door.under_ddp:
        return "not tried under DDP yet (not measured on several GPUs)"
    if (why := unsupported(engine.torch, door.device)) is not None:
        return why
    if any(type(m).__name__ == "Float8Linear" for m in door.module.modules()):
        return "the model's linear layers run in float8 already (precision='fp8', or the script)"
    if not engine.best.settings.compile:
        return (
            "the kept step is not compiled: float8's casts run as separate kernels "
            "without torch.compile, slower than bf16"
        )
    return unpaid(engine)


def trial_count(module: Any, device: Any, torch: Any) -> int:
    """1 where `lever` may try float8 on `module` on `device`, else 0 (for the trial steps)."""
    if unsupported(torch, device) is not None:
        return 0
    return 1 if eligible(module).names else 0


# How far float8 may move the first batch's loss and gradients from the bf16 step's at
# the same weights (benchmarks/float8_check.py, step 0, every linear layer but the head in
# float8). The loss moved 0.001-0.04% (CPU emulation: Llama of 2-8 layers of 256-512,
# two MLPs) and 0.02% (H200, real float8: a 200M Llama and the Llama-3.2-1B shape), so the
# loss keeps compile's limit. The gradients moved 6-16% of their norm in emulation and
# 22% and 48% on the H200 (the e5m2 gradients keep 2 mantissa bits): 0.75, about 1.5x the
# largest, still refuses a step without gradients or with wrong logits (100% and more).
TOLERANCE = trials.Tolerance(
    loss=trials.LOSS_RTOL,
    grads=0.75,
    source="float8 against bf16 at step 0: gradients up to 48% apart (Llama-3.2-1B shape, H200)",
)
