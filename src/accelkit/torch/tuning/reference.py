"""What a compiled `tune` candidate must compute: the eager step's loss and gradients.

Before the compiled candidate's first batch trains, the baseline's eager step runs on
the same batch at the same weights (forward and backward, as the loop runs them: the
loss divided by the accumulation, through the gradient scaler) and keeps two kinds of
number: the loss, and a fixed sample of every trainable parameter's gradient
(`GradSample`, at most `SAMPLE` values in all). Gradients are what a wrong step gets
wrong whatever the loss's scale: a compiled graph that computes constant logits or
drops a backward gives gradients nowhere near the eager ones, even where the loss
(a scaled loss, an MSE on normalised targets, late training) is too small to tell.

A forward pass that draws random numbers (dropout) cannot be compared draw for draw:
compiled kernels draw their own. When the eager pass moved a random number generator,
a second eager pass with the next draws gives what two correct steps share and how far
they differ (`Reference.loss_noise`, `Reference.second_grads`), and the check compares
with that (`accelkit.torch.tuning.trial_guards.check_grads`).

Without random draws, two correct steps can still differ by their kernels' rounding, and
a network of convolutions and BatchNorm early in training amplifies it: on ResNet-50 in
bf16, cuDNN's deterministic algorithms put the eager gradients 35% from the benchmarked
ones at step 0 (docs/benchmarks.md). On a CUDA device a second eager pass with cuDNN's
other choice of algorithms (`other_kernels`) measures that spread
(`Reference.kernel_grads`), which the check allows for beyond its own limit.

The reference leaves no trace (`kept`): the gradients are set aside and put back, the
random number generators forked, and every buffer restored by name, also one the
forward reassigns (``self.n = self.n + 1``) rather than updates in place. A trainer's
step is the user's code (a LightningModule's ``training_step``, a model's ``forward``)
and may change the module's Python state as it runs (a counter that anneals a loss
weight, a list of the losses seen): the trainers' checks run each pass on a copy of the
module (`copy_of`), so that the module the trainer trains runs its step only when the
trainer does.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

from accelkit.torch.tuning import trials

# The gradient values kept from every trainable parameter, spread evenly over them
# (a strided slice of each): 4 MiB of float32, whatever the model's size.
SAMPLE = 1 << 20


@dataclasses.dataclass(frozen=True)
class Reference:
    """The eager step's numbers on one batch.

    Attributes:
        loss: the eager loss.
        grads: the `GradSample` of the gradients that batch gives (float32, flat).
        loss_noise: how far a correct step's loss may lie from `loss` for its random draws
            (0: no random numbers drawn).
        second_grads: the second draw's gradient sample (None: no random numbers drawn).
        kernel_grads: the gradient sample with cuDNN's other choice of algorithms, where
            it differs from `grads` (None: the same, not measured, or random draws).
    """

    loss: float
    grads: Any
    loss_noise: float = 0.0
    second_grads: Any = None
    kernel_grads: Any = None


class GradSample:
    """A fixed strided sample of the gradients of `params`: the same positions on every
    call, zeros where a gradient is None.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(4, 2)
        >>> sample = GradSample(list(layer.parameters()), torch)
        >>> layer(torch.ones(3, 4)).sum().backward()
        >>> sample().shape
        torch.Size([10])
    """

    def __init__(self, params: list[Any], torch: Any, size: int = SAMPLE) -> None:
        self._torch = torch
        self._params = params
        # One device for the sample, also for a model spread over several.
        self._device = params[0].device if params else None
        per = max(1, size // max(len(params), 1))
        self._strides = [max(1, math.ceil(p.numel() / per)) for p in params]

    def __call__(self) -> Any:
        parts = []
        for param, stride in zip(self._params, self._strides, strict=True):
            if param.grad is None:
                length = math.ceil(param.numel() / stride)
                parts.append(self._torch.zeros(length, device=self._device))
            else:
                parts.append(param.grad.detach().reshape(-1)[::stride].float().to(self._device))
        return self._torch.cat(parts) if parts else self._torch.zeros(0)


def eager_reference(
    forward_backward: Callable[[Any], Any],
    batch: Any,
    *,
    module: Any,
    params: list[Any],
    sample: GradSample,
    device: Any,
    torch: Any,
    average: Callable[[Any], Any] = lambda grads: grads,
) -> Reference:
    """The `Reference` of `batch`: ``forward_backward(batch) -> loss`` run at the current
    weights, twice when the first run drew random numbers or when cuDNN has another
    choice of algorithms, leaving no trace (`kept`). `average` gives the gradients as the
    candidate will see them (averaged over the ranks when its first step all-reduces
    them)."""
    with kept(module, params, device, torch):
        before = _rng_state(torch, device)
        first = _draw(forward_backward, batch, params, sample)
        if _rng_state(torch, device) == before:  # no random number drawn
            other = _kernel_draw(forward_backward, batch, params, sample, torch, device)
            grads = average(first[1])
            # Averaged on every rank alike (a collective under DDP), whatever this rank's
            # pass gave, then compared: the same verdict on every rank.
            kernel = average(other if other is not None else first[1])
            same = bool(torch.equal(kernel, grads))
            return Reference(first[0], grads, kernel_grads=None if same else kernel)
        second = _draw(forward_backward, batch, params, sample)
    return Reference(first[0], average(first[1]), _loss_noise(first, second), average(second[1]))


def _kernel_draw(
    forward_backward: Callable[[Any], Any],
    batch: Any,
    params: list[Any],
    sample: GradSample,
    torch: Any,
    device: Any,
) -> Any:
    """The gradient sample of `batch` with cuDNN's other choice of algorithms, or None
    (not a CUDA device, no other choice, or that pass failed: the check goes without)."""
    if device.type != "cuda":
        return None
    switch = other_kernels(torch)
    if switch is None:
        return None
    try:
        with switch:
            return _draw(forward_backward, batch, params, sample)[1]
    except Exception:  # noqa: BLE001 - an algorithm cuDNN lacks, memory: no spread measured
        return None


def other_kernels(torch: Any) -> contextlib.AbstractContextManager[None] | None:
    """cuDNN's other choice of convolution algorithms for the duration: its deterministic
    ones, without benchmarking; None where there is no other (cuDNN off or missing, or
    the script asked for deterministic algorithms already, which it keeps).

    Example:
        >>> import torch
        >>> switch = other_kernels(torch)
        >>> with switch:
        ...     torch.backends.cudnn.deterministic
        True
        >>> torch.backends.cudnn.deterministic
        False
    """
    cudnn = torch.backends.cudnn
    if not cudnn.enabled or cudnn.deterministic or torch.are_deterministic_algorithms_enabled():
        return None
    return _deterministic_cudnn(cudnn)


@contextlib.contextmanager
def _deterministic_cudnn(cudnn: Any) -> Iterator[None]:
    saved = cudnn.benchmark, cudnn.deterministic
    cudnn.benchmark, cudnn.deterministic = False, True
    try:
        yield
    finally:
        cudnn.benchmark, cudnn.deterministic = saved


def _loss_noise(first: tuple[float, Any], second: tuple[float, Any]) -> float:
    """How far a correct step's loss may lie from the first draw's: `LOSS_NOISE_FACTOR`
    times the two losses' difference, or the loss times the gradients' relative spread,
    whichever is larger. One pair of losses tells their spread badly (a heavy tail: two
    draws that happen to agree); the gradients, many numbers, tell it well, and a loss,
    an average over the batch, spreads less than they do."""
    (loss, grads), (other, other_grads) = first, second
    norms = float(grads.norm()) + float(other_grads.norm())
    relative = float((grads - other_grads).norm()) / norms if norms else 0.0
    return max(trials.LOSS_NOISE_FACTOR * abs(loss - other), abs(loss) * relative)


def _draw(
    forward_backward: Callable[[Any], Any], batch: Any, params: list[Any], sample: GradSample
) -> tuple[float, Any]:
    for param in params:
        param.grad = None
    loss = forward_backward(batch)
    return float(loss.detach().float()), sample()


def _rng_state(torch: Any, device: Any) -> list[bytes]:
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return [bytes(state.numpy().tobytes()) for state in states]


@contextlib.contextmanager
def kept(module: Any, params: list[Any], device: Any, torch: Any) -> Iterator[None]:
    """Leave `module` as it was: gradients of `params`, buffers, random number generators."""
    grads = [param.grad for param in params]
    devices = [device] if device.type == "cuda" else []
    try:
        with buffers_kept(module), torch.random.fork_rng(devices=devices):
            yield
    finally:
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad


@contextlib.contextmanager
def buffers_kept(module: Any) -> Iterator[None]:
    """Put `module`'s buffers (BatchNorm statistics, counters) back as they were: each
    submodule's buffer by name, the same tensor with the same values, also where the
    forward put a new tensor in its place (``self.n = self.n + 1``).

    Example:
        >>> import torch
        >>> bn = torch.nn.BatchNorm1d(3)
        >>> with buffers_kept(bn):
        ...     _ = bn(torch.randn(8, 3) + 5)
        >>> float(bn.running_mean.abs().max())
        0.0
    """
    saved = [
        (owner, name, buffer, buffer.detach().clone())
        for owner in module.modules()
        for name, buffer in owner.named_buffers(recurse=False)
    ]
    try:
        yield
    finally:
        for owner, name, buffer, value in saved:
            buffer.data.copy_(value)
            owner._buffers[name] = buffer


class NotCopied(RuntimeError):
    """The module holds something `copy_of` cannot copy (a lock, an open file)."""


def copy_of(module: Any) -> Any:
    """`module` anew for one pass of a check, which runs the step on the copy: what the
    step changes in Python (a counter, a list it appends to, an attribute of a
    submodule) changes in the copy only. The parameters and buffers are the module's own
    tensors, not copies (the pass's gradients and buffer updates are put back by
    `kept`), and so are the module's own hooks (a door's batch readers: the pass calls
    the copy's step, not the copy). Costs a copy of the rest, for the length of a pass:
    the module's Python state and any tensor it holds outside its parameters and
    buffers. A bound method set on a module (a compiled candidate's entry, Accelerate's
    autocast ``forward``) is bound to the copy's module in the copy.

    Raises:
        NotCopied: something in the module cannot be copied (its error says what).

    Example:
        >>> import torch
        >>> class Counting(torch.nn.Linear):
        ...     calls = 0
        ...     def forward(self, x):
        ...         self.calls += 1
        ...         return super().forward(x)
        >>> layer = Counting(4, 2)
        >>> twin = copy_of(layer)
        >>> _ = twin(torch.ones(1, 4))
        >>> layer.calls, twin.calls, twin.weight is layer.weight
        (0, 1, True)
    """
    shared: list[Any] = [*module.parameters(), *module.buffers()]
    shared += [value for name, value in vars(module).items() if name.endswith("hooks")]
    memo = {id(value): value for value in shared}
    try:
        return copy.deepcopy(module, memo)
    except Exception as error:  # a lock, a file, a generator: no copy, no check
        raise NotCopied(f"the module could not be copied for the check ({error})") from error
