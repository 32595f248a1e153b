"""`accelkit.torch.fit`: a training loop that applies the plan and measures itself."""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from accelkit.configure import auto_configure, current_plan
from accelkit.hardware import environment
from accelkit.planning import Plan, Status
from accelkit.planning.keys import Key
from accelkit.profiling import world
from accelkit.profiling.flops_torch import count_train_step_flops
from accelkit.profiling.run_report import RunReport
from accelkit.torch import distributed as parallel
from accelkit.torch import precision
from accelkit.torch.meter import Meter
from accelkit.utils.imports import require


def fit(model: Any, loader: Iterable[Any], optimizer: Any, loss_fn: Callable[..., Any] | None,
        *, epochs: int = 1, steps: int | None = None, plan: Plan | None = None,
        device: Any = None, accumulation_steps: int = 1, compile: bool | None = None,
        channels_last: bool | None = None, max_grad_norm: float | None = None,
        flops_per_step: float | None = None, tokens_per_sample: int | None = None,
        warmup: int = 3, window: int = 50, calibrate: bool = False,
        progress: bool = True, distributed: bool = True,
        single_device: Any = None) -> RunReport:
    """Train `model` on `loader` with the plan's settings and return the measured run.

    Each batch is ``(inputs, targets)`` (inputs a tensor, tuple or dict) and the
    loss is ``loss_fn(model(inputs), targets)``; with ``loss_fn=None`` the model
    is called on the whole batch and must return the loss.

    What it does per the plan: autocast in bf16/fp16 with the loss inside it (where
    PyTorch computes softmax and losses in float32), a GradScaler for fp16,
    channels-last for conv nets,
    ``torch.compile`` when asked, gradient accumulation, ``zero_grad(set_to_none=True)``,
    non-blocking host-to-device copies. A KeyboardInterrupt ends the fit early and
    returns a partial report (``report.interrupted``); any other error (yours or
    PyTorch's) propagates unchanged after the GPU sampler has stopped.

    Under ``torchrun`` (a process group of several ranks, which `auto_configure`
    starts): the model is wrapped in ``DistributedDataParallel`` on this rank's GPU
    (``DataParallel`` is never used); a ``DataLoader`` gets a ``DistributedSampler``
    (the loader is rebuilt with the same settings; ``set_epoch`` is called each
    epoch) so each rank trains on its share; accumulation micro-steps run under
    ``model.no_sync()``; only rank 0 prints. At the end every rank's figures are
    gathered once, and every rank returns the report of the whole run
    (``world_size``, ``global_samples_per_second``, ``ranks``, ``slowest_rank``,
    ``scaling_efficiency`` when `single_device` is given); ``report.save`` writes on
    rank 0 only. Several GPUs and no launcher: the fit trains on one and prints
    the ``torchrun`` command that would use them all. If the process group could
    not start (see ``ACCELKIT_DIST_TIMEOUT``), each process trains alone and says so.

    Args:
        model, loader, optimizer, loss_fn: the usual.
        epochs: passes over `loader`.
        steps: stop after this many steps in all (None: run every epoch to the end).
        plan: the plan to follow; defaults to the last `auto_configure()` plan, or calls
            `auto_configure(framework="torch")` when there is none.
        device: where to train; defaults to the GPU of this rank, or the CPU.
        accumulation_steps: batches per optimizer step.
        compile: ``torch.compile`` the model (default: the plan's choice).
        channels_last: convert conv models to channels-last (default: the plan's choice).
        max_grad_norm: clip gradients to this norm.
        flops_per_step: FLOPs of one step, if known; counted automatically otherwise.
        tokens_per_sample: for tokens/s when the batch has no (B, T) token-id tensor.
        warmup, window: see `accelkit.torch.Meter`.
        calibrate: also report MFU against a matmul rate measured on this device.
        progress: print live throughput to stderr every `window` steps (rank 0 only).
        distributed: use DistributedDataParallel when a process group of several
            ranks is initialised; False trains this process alone (no sampler, no
            gathering), e.g. for a single-device reference run on rank 0.
        single_device: the same run on one device, for ``report.scaling_efficiency``:
            a `RunReport`, the path of one saved with ``report.save``, or its samples/s
            (same per-device batch).

    Returns:
        The `RunReport` (throughput, FLOPs, MFU, input wait, GPU figures, losses).

    Raises:
        ValueError: bad arguments (including a `single_device` that is not a
            single-device run), or a loader that yields no batch.
        TypeError: a `single_device` of another type.

    Example:
        >>> plan = accelkit.auto_configure()
        >>> report = accelkit.torch.fit(model, loader, optimizer, nn.CrossEntropyLoss(), epochs=2)
        >>> print(report)
    """
    torch = require("torch")
    _check(epochs, steps, accumulation_steps, warmup, window)
    single = world.single_device_rate(single_device)
    plan = plan or current_plan() or auto_configure(framework="torch", verbose=False)
    group = parallel.world() if distributed else None
    rank_zero = group.is_zero if group is not None else (
        not distributed or parallel.is_rank_zero())
    progress = progress and rank_zero
    alone = _say_why_alone(plan, group, distributed, progress)
    inner = parallel.unwrap(model)  # FLOPs are counted, and facts read, on the module
    layout = None
    if inner is not model:  # the script's own DDP (its options kept): already placed
        device = next(inner.parameters()).device
    else:
        device = torch.device(device) if device is not None else _default_device(torch, plan)
        model = inner = model.to(device)
        conv = any(isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d)) for m in model.modules())
        if (plan.value(Key.CHANNELS_LAST, False) if channels_last is None
                else channels_last) and conv:
            model = inner = model.to(memory_format=torch.channels_last)
            layout = torch.channels_last  # images follow: the first conv needs no transpose
    sampling = None
    if group is not None:
        model = parallel.wrap(model, device)
        loader, sampling = parallel.shard(loader, group)
    else:
        model = inner  # distributed=False: the module alone, even if the script wrapped it

    def autocast() -> Any:
        return plan.autocast(device.type)

    # Loss scaling exists for fp16 on CUDA; elsewhere the scaler passes calls through.
    scaler = torch.amp.GradScaler(device.type, enabled=(
        device.type == "cuda" and bool(plan.value(Key.GRAD_SCALER, False))))

    amp_dtype = precision.autocast_dtype(plan)

    def forward_loss(batch: Any) -> Any:
        # The loss runs under autocast, where PyTorch computes softmax, log-softmax and
        # the losses in float32 from 16-bit outputs inside the kernel: the float32 head
        # without a separate cast pass (an explicit .float() of GPT-2's logits costs 8%
        # of the step on an H200). torch.autocast itself, so torch.compile traces it.
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            if loss_fn is None:
                return _call(model, batch)
            inputs, targets = _split(batch)
            return loss_fn(_call(model, inputs), targets)

    # Compiling forward and loss together lets the compiler fuse the loss into the
    # output layer's epilogue.
    compiled = plan.compile if compile is None else compile
    step = torch.compile(forward_loss) if compiled else forward_loss

    model.train()
    meter = Meter(inner, plan=plan, flops_per_step=flops_per_step,
                  tokens_per_sample=tokens_per_sample, warmup=warmup, window=window,
                  calibrate=calibrate, epochs=epochs, count_flops=False, optimizer=optimizer,
                  grad_scaler=scaler, gather=group is not None, single_device=single)
    meter.facts.update(_loader_facts(loader), compiled=compiled)
    if group is not None:
        meter.facts.update(distributed=True, sampler=sampling)
    done = 0
    running = torch.zeros((), device=device)
    meter.on_window = _watch_loss(meter, running,
                                  _progress_printer(meter, steps) if progress else None)
    with meter:
        try:
            for epoch in range(epochs):
                epoch_steps = 0
                running.zero_()
                if group is not None:
                    parallel.set_epoch(loader, epoch)
                for batch in loader:
                    batch = _to_device(batch, device, layout)
                    if done == 0 and flops_per_step is None:
                        meter.set_flops(_count(inner, batch, loss_fn, autocast))
                    with meter.step(batch):
                        done += 1
                        epoch_steps += 1
                        stepping = done % accumulation_steps == 0
                        # Micro-steps that do not step the optimizer skip DDP's all-reduce;
                        # the gradients are summed locally and reduced on the stepping one.
                        with _no_sync(model, group is not None and not stepping):
                            loss = step(batch)
                            scaler.scale(loss / accumulation_steps).backward()
                        if stepping:
                            _optimizer_step(torch, model, optimizer, scaler, max_grad_norm)
                        running += loss.detach().float()
                    if steps is not None and done >= steps:
                        break
                else:
                    meter.facts.setdefault("steps_per_epoch", epoch_steps)
                if epoch_steps:
                    meter.record_loss((running / epoch_steps).item())
                    if not math.isfinite(meter.losses[-1]):
                        meter.facts.setdefault("first_nonfinite_loss_step", done)
                if steps is not None and done >= steps:
                    break
            if done == 0:
                raise ValueError("the loader yielded no batch: nothing to train on")
            if done % accumulation_steps:
                if group is not None:  # the last micro-steps ran under no_sync()
                    parallel.sync_gradients(model, group)
                _optimizer_step(torch, model, optimizer, scaler, max_grad_norm)
        except KeyboardInterrupt:
            meter.interrupted = True
            where = f"rank {group.rank}: " if group is not None else ""
            print(f"accelkit: {where}interrupted after {done} steps; returning a partial "
                  "report", file=sys.stderr)
    if progress and sys.stderr.isatty() and meter.clock.steps >= window:
        print(file=sys.stderr)
    report = meter.report()
    if alone:
        report.note("world_size", alone)
    return report


def _check(epochs: int, steps: int | None, accumulation_steps: int, warmup: int,
           window: int) -> None:
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs={epochs!r} must be a whole number >= 1")
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps={steps!r} must be a whole number >= 1, or None for whole epochs")
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps!r} must be >= 1")
    if warmup < 0 or window < 1:
        raise ValueError(f"warmup={warmup!r} must be >= 0 and window={window!r} >= 1")


def _no_sync(model: Any, skip: bool) -> Any:
    return model.no_sync() if skip else contextlib.nullcontext()


def _say_why_alone(plan: Plan, group: parallel.World | None, distributed: bool,
                   chatty: bool) -> str | None:
    """Say so when a run that could use several devices trains on one; the reason
    the process group is missing, if it failed to start."""
    if group is not None or not distributed:
        return None
    backend = plan.get(Key.TORCH_PROCESS_GROUP)
    launched = environment.world_size()
    if backend is not None and backend.status is Status.FAILED:
        why = backend.detail
    elif launched > 1:
        why = (f"WORLD_SIZE={launched} but no process group is initialised (the plan's "
               f"process group: {backend.status.value if backend else 'not planned'}); "
               "call accelkit.auto_configure() without ACCELKIT_DISABLE or dry_run, or "
               "torch.distributed.init_process_group(), before fit")
    else:
        why = None
    if why:
        why = f"trained this process alone, without DistributedDataParallel: {why}"
        parallel.warn(why)  # on every rank: the failing one may not be rank 0
        return why
    hint = parallel.launch_hint(plan)
    if hint and chatty:
        parallel.warn(hint)
    return None


def _default_device(torch: Any, plan: Plan) -> Any:
    if torch.cuda.is_available() and plan.hardware.gpus:
        rank = plan.hardware.launcher.local_rank or 0
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def _count(model: Any, batch: Any, loss_fn: Any, autocast: Any) -> Any:
    """FLOPs of one step on the uncompiled model (FlopCounterMode cannot see inside
    compiled graphs); the model's state is restored afterwards."""
    if loss_fn is None:
        return count_train_step_flops(model, batch, None, None, autocast=autocast)
    inputs, targets = _split(batch)
    return count_train_step_flops(model, inputs, targets, loss_fn, autocast=autocast)


def _optimizer_step(torch: Any, model: Any, optimizer: Any, scaler: Any,
                    max_grad_norm: float | None) -> None:
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def _split(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        return batch[0], batch[1] if len(batch) == 2 else tuple(batch[1:])
    raise ValueError("each batch must be (inputs, targets) when loss_fn is given; "
                     f"got {type(batch).__name__}")


def _call(model: Any, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (list, tuple)):
        return model(*inputs)
    return model(inputs)


def _to_device(batch: Any, device: Any, layout: Any = None) -> Any:
    """Copy a batch to `device` (non-blocking: overlaps when the loader pins memory);
    4-d float tensors take `layout` (channels-last) when given."""
    if hasattr(batch, "to") and hasattr(batch, "shape"):
        if layout is not None and batch.dim() == 4 and batch.is_floating_point():
            return batch.to(device, non_blocking=True, memory_format=layout)
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device, layout) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device, layout) for k, v in batch.items()}
    return batch


def _loader_facts(loader: Any) -> dict[str, Any]:
    from accelkit.torch.facts import loader_facts, steps_per_epoch

    facts: dict[str, Any] = {"loader": loader_facts(loader)}
    length = steps_per_epoch(loader)
    if length:
        facts["steps_per_epoch"] = length
    return facts


def _watch_loss(meter: Meter, running: Any,
                then: Callable[[float, int], None] | None) -> Callable[[float, int], None]:
    """At each window boundary, where the device is synchronised anyway, note the first
    non-finite running loss: a NaN stays in the epoch's sum, so one look per window finds
    it without a per-step `.item()`."""
    def on_window(step_s: float, step: int) -> None:
        if "first_nonfinite_loss_step" not in meter.facts and not bool(running.isfinite()):
            meter.facts["first_nonfinite_loss_step"] = step
        if then is not None:
            then(step_s, step)

    return on_window


def _progress_printer(meter: Meter, steps: int | None) -> Callable[[float, int], None]:
    interactive = sys.stderr.isatty()
    started = time.perf_counter()
    last = [0.0]

    def show(step_s: float, step: int) -> None:
        now = time.perf_counter()
        if not interactive and now - last[0] < 10.0:  # a log file gets a line every 10 s
            return
        last[0] = now
        rate = (meter.last_batch_size or 0) / step_s if step_s else 0.0
        total = f"/{steps}" if steps else ""
        line = (f"accelkit: step {step}{total}  {rate:,.1f} samples/s  "
                f"{step_s * 1e3:.1f} ms/step  {now - started:.0f} s")
        print(("\r" if interactive else "") + line, end="" if interactive else "\n",
              file=sys.stderr, flush=True)

    return show
