"""`accelkit.torch.fit`: a training loop that applies the plan and measures itself.

`fit` walks three parts, each in its own module: `prepare` (the model on its
device and layout, in DDP under a process group, the loader sharded), `make_step`
(autocast with the loss inside it, the gradient scaler, ``torch.compile``) and
`loop.train` (epochs, accumulation, the optimizer step, the losses), measured by
a `Meter`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from accelkit.configure import auto_configure, current_plan
from accelkit.planning import Plan
from accelkit.planning.keys import Float8, Key
from accelkit.profiling.options import MeterOptions
from accelkit.profiling.run_report import RunReport
from accelkit.torch.distributed import parallel, sharding, wrapping
from accelkit.torch.measuring.facts import loader_facts, steps_per_epoch
from accelkit.torch.measuring.meter import Meter
from accelkit.torch.training import loop
from accelkit.torch.training import scheduling as lr_scheduling
from accelkit.torch.training.evaluate import evaluator
from accelkit.torch.training.loop import Schedule
from accelkit.torch.training.model_size import plan_with_model
from accelkit.torch.training.prepare import Prepared, prepare, restore
from accelkit.torch.training.scheduling import Scheduling
from accelkit.torch.training.step import Step, check_optimizer, make_step
from accelkit.torch.tuning import attention, float8, levers
from accelkit.torch.tuning.registry import trial_steps
from accelkit.torch.tuning.trials import TuneResult, check_mode
from accelkit.torch.tuning.tuner import Tuner
from accelkit.utils import arguments
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")


def fit(
    model: Any,
    loader: Iterable[Any],
    optimizer: Any,
    loss_fn: Callable[..., Any] | None,
    *,
    epochs: int = 1,
    steps: int | None = None,
    plan: Plan | None = None,
    device: Any = None,
    accumulation_steps: int = 1,
    compile: bool | None = None,
    channels_last: bool | None = None,
    max_grad_norm: float | None = None,
    eval_loader: Iterable[Any] | None = None,
    progress: bool = True,
    distributed: bool = True,
    tune: bool | str = "auto",
    ddp: Mapping[str, Any] | None = None,
    scheduler: Any = None,
    scheduler_interval: str = "step",
    **options: Any,
) -> RunReport:
    """Train `model` on `loader` with the plan's settings and return the measured run.

    Batches follow the model libraries (`accelkit.profiling.torch_batches`): a dict is
    the model's keyword arguments, a tuple is ``(inputs, targets)``. With a `loss_fn`
    the loss is ``loss_fn(output, targets)``, where `output` is exactly what the model
    returned (e.g. a transformers ``ModelOutput``) and `targets` the tuple's second item
    or the dict's ``"labels"``. With ``loss_fn=None`` the whole batch goes to the model
    and the loss is its output (0-d), ``.loss``, ``["loss"]``, the sum of a dict's 0-d
    ``loss...`` entries (torchvision's detection models, said in ``report.notes``) or a
    tuple's one 0-d tensor (several: refused, naming them). A batch of a list of images
    and one target dict per image (torchvision's detection) gives the list as one
    argument. A batch or output that cannot be used raises ValueError naming what it got.
    A submodule the script put in eval mode (a frozen BatchNorm) stays in eval mode.

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
    When the plan shards the model (``Distribution.FSDP``), FSDP2's ``fully_shard`` takes
    DDP's place: each block and the root sharded, with the plan's mixed precision,
    checkpointing and offload, the optimizer pointed at the sharded parameters
    (`accelkit.torch.distributed.sharding`; ``report.facts["sharding"]``). A plan for
    GPUs made without the model's size (``plan.memory`` None, as `auto_configure()`
    gives) is first laid out for this model, before it is prepared: its parameters,
    trainable ones, optimizer and frozen weights' dtype go to the planner
    (`accelkit.planning.with_model_size`), which shards with FSDP2 where a whole replica
    does not fit a GPU; ``report.notes["layout"]`` says so, ``report.plan["memory"]``
    has the numbers.

    Args:
        model, loader, optimizer, loss_fn: the usual.
        epochs: passes over `loader`.
        steps: stop after this many steps in all (None: run every epoch to the end).
        plan: the plan to follow; defaults to the last `auto_configure()` plan, or calls
            `auto_configure(framework="torch")` when there is none. A default plan that
            was not applied (``dry_run=True``, ``ACCELKIT_DISABLE=1``) is not applied here
            either: the model trains in float32, without channels-last or compile
            (`Plan.without_helpers`), and ``report.notes["precision"]`` says so. A plan
            given here is followed whatever its origin (a what-if plan from `plan_for`
            trains under its precision on this machine).
        device: where to train; defaults to the GPU of this rank, or the CPU. One that
            cannot train here (a bad name, an absent GPU, ``"meta"``) is refused first.
        accumulation_steps: batches per optimizer step.
        compile: ``torch.compile`` the model (default: the plan's choice).
        channels_last: convert conv models to channels-last (default: the plan's choice).
        max_grad_norm: clip gradients to this norm.
        eval_loader: batches to evaluate on after each epoch (eval mode, no gradients,
            the plan's autocast, the fit's loss); ``report.eval_losses`` has the mean
            loss of each evaluation, and its time is reported apart from training
            (``report.evaluation_seconds``): it counts in no training figure.
        progress: print live throughput to stderr every `window` steps (rank 0 only).
        distributed: use DistributedDataParallel when a process group of several
            ranks is initialised; False trains this process alone (no sampler, no
            gathering), e.g. for a single-device reference run on rank 0.
        tune: measure the options on this model during the first steps and keep the
            fastest (`accelkit.torch.tune`: the optimizer's fused implementation, then
            ``torch.compile``; only those the script left open). ``"auto"`` tunes a GPU
            run of 200 steps or more estimated at 10 minutes or more from the baseline's
            step time (`accelkit.torch.tuning.trials`), unless the script asked for
            deterministic algorithms; True always; False never. ``report.tuning`` says
            what was measured and kept. Under DDP it also tries bf16 gradients, larger
            buckets and a static graph (`accelkit.torch.tuning.levers`).
        scheduler: the LR scheduler of `optimizer` (a ``torch.optim.lr_scheduler.LRScheduler``),
            stepped as a loop steps it: after each optimizer step, or after each epoch with
            ``scheduler_interval="epoch"``; tune's trial steps step it too. An optimizer with
            a scheduler bound to it and none given trains at its current learning rate,
            with a warning (`accelkit.torch.training.scheduling`).
        scheduler_interval: ``"step"`` or ``"epoch"`` (Lightning's names).
        ddp: options of the `DistributedDataParallel` accelkit builds (``{"bucket_cap_mb":
            100}``; ``"compression": "bf16"``: a bf16 all-reduce), kept, not tuned. The
            wait for the all-reduce is measured (``report.communication_share``, per rank).
        **options: what to measure and how, as in every door
            (`accelkit.profiling.options.MeterOptions`): ``flops_per_step``,
            ``tokens_per_sample``, ``warmup``, ``window``, ``sample_gpu``, ``calibrate``,
            ``single_device`` (the same run on one device, for
            ``report.scaling_efficiency``: a `RunReport`, the path of one saved with
            ``report.save``, or its samples/s, same per-device batch).

    The model is changed in place where the plan says (moved to the device, converted
    to channels-last); ``report.facts["model_changes"]`` lists what was done, and the
    channels-last conversion is undone when the fit raises. A loader that runs dry
    before `epochs` (a generator, a one-shot iterator) ends the fit there:
    ``report.epochs`` is the epochs trained, with a note and a warning saying so.

    Returns:
        The `RunReport` (throughput, FLOPs, MFU, input wait, GPU figures, losses).

    Raises:
        ValueError: bad arguments (including a `single_device` that is not a
            single-device run, or an optimizer that needs a closure, such as LBFGS), or
            a loader that yields no batch.
        TypeError: a `single_device` of another type.

    Example:
        >>> import accelkit
        >>> import torch
        >>> plan = accelkit.auto_configure(verbose=False)
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
        ...                             torch.nn.Linear(32, 4))
        >>> data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
        >>> loader = torch.utils.data.DataLoader(data, batch_size=32)
        >>> optimizer = torch.optim.AdamW(model.parameters())
        >>> report = accelkit.torch.fit(model, loader, optimizer, torch.nn.CrossEntropyLoss(),
        ...                             epochs=2, progress=False)
        >>> report.steps
        16
        >>> print(report)  # doctest: +SKIP
        accelkit run: torch, sequential on cpu, precision fp32 (matmuls fp32), 16 steps ...
    """
    require("torch")  # the install hint comes before any argument error
    schedule = Schedule(epochs=epochs, steps=steps, accumulation_steps=accumulation_steps)
    return _fit(
        model,
        loader,
        optimizer,
        loss_fn,
        schedule,
        plan=plan,
        device=device,
        compile=compile,
        channels_last=channels_last,
        max_grad_norm=max_grad_norm,
        eval_loader=eval_loader,
        progress=progress,
        distributed=distributed,
        tune=tune,
        ddp=ddp,
        scheduling=lr_scheduling.check(
            scheduler, optimizer, scheduler_interval, refuse_unbound=False
        ),
        options=options,
    )


def _fit(
    model: Any,
    loader: Iterable[Any],
    optimizer: Any,
    loss_fn: Callable[..., Any] | None,
    schedule: Schedule,
    *,
    plan: Plan | None,
    device: Any,
    compile: bool | None,
    channels_last: bool | None,
    max_grad_norm: float | None,
    eval_loader: Iterable[Any] | None,
    progress: bool,
    distributed: bool,
    tune: bool | str,
    ddp: Mapping[str, Any] | None,
    scheduling: Scheduling,
    options: dict[str, Any],
) -> RunReport:
    """`fit` on a checked `schedule` (`tune` gives one whose run goes on past it)."""
    measuring = MeterOptions.of(options)
    arguments.positive("max_grad_norm", max_grad_norm, none="no clipping")
    check_optimizer(optimizer)
    check_mode(tune)
    ddp_options = wrapping.check_options(ddp)
    plan, held_back = _plan_to_follow(plan)
    # an unapplied plan trains as the script is: no layout of accelkit's
    plan, sized = (plan, "") if held_back else plan_with_model(plan, model, optimizer)
    group, progress, alone = _where(plan, distributed, progress)
    run = prepare(
        model,
        loader,
        plan,
        device=device,
        channels_last=channels_last,
        group=group,
        ddp=ddp_options,
        optimizer=optimizer,
        shard_alone=distributed,
    )
    run = _float8_by_plan(run, plan)
    try:
        report = _train(
            run,
            plan,
            loss_fn,
            optimizer,
            schedule,
            tune=tune,
            compile=compile,
            max_grad_norm=max_grad_norm,
            scheduling=scheduling,
            measuring=measuring,
            evaluate=evaluator(run, eval_loader) if eval_loader is not None else None,
            progress=progress,
        )
    except BaseException:
        restore(run)
        raise
    _say_why(report, plan, alone=alone, held_back=held_back, sized=sized)
    return report


def _float8_by_plan(run: Prepared, plan: Plan) -> Prepared:
    """Under precision="fp8", every eligible linear layer of the module in float8
    (`accelkit.torch.tuning.float8.eligible`), as a change the report lists; a model
    without one trains in bf16, with the reason."""
    if plan.value(Key.FLOAT8) != Float8.ON:
        return run
    found = float8.eligible(run.module)
    if not found.names:
        _log.warning("precision='fp8': %s; the run trains in bf16", found.why_none())
        return run
    float8.Float8Layers(run.module, found.names, emulate=run.device.type != "cuda").on()
    change = f"{len(found.names)} linear layers run their matmuls in float8 (precision='fp8')"
    return dataclasses.replace(run, changes=(*run.changes, change))


def _where(plan: Plan, distributed: bool, progress: bool) -> tuple[Any, bool, str | None]:
    """The process group this fit trains in (None: alone), whether this process shows
    progress (rank 0 only), and why it trains alone where it could use several devices."""
    group = parallel.world() if distributed else None
    rank_zero = group.is_zero if group is not None else (not distributed or parallel.is_rank_zero())
    progress = progress and rank_zero
    return group, progress, parallel.why_alone(plan, group, distributed, chatty=progress)


def _say_why(
    report: RunReport, plan: Plan, *, alone: str | None, held_back: str, sized: str
) -> None:
    """The report's notes on how the run differs from what was asked: trained alone, the
    plan's helpers held back, the layout planned from the model (`plan_with_model`),
    GPUs here that this torch build cannot use."""
    if alone:
        report.note("world_size", alone)
    if held_back:
        report.note("precision", held_back)
    if sized:
        report.note("layout", sized)
    if plan.hardware.gpus_unusable:
        report.note("device", plan.hardware.gpus_unusable)


def _plan_to_follow(given: Plan | None) -> tuple[Plan, str]:
    """The plan the fit follows, and why it is not the current one when it is not: a
    current plan `auto_configure` did not apply is followed without its helpers."""
    if given is not None:
        return given, ""
    plan = current_plan("torch") or auto_configure(framework="torch", verbose=False)
    if not plan.not_applied:
        return plan, ""
    why = (
        f"the current plan was not applied ({plan.not_applied}), so neither is its "
        f"{plan.precision.value} autocast, channels-last or compile: trained as the "
        "script is; pass plan= to train under a plan"
    )
    _log.info("accelkit.torch.fit: %s", why)
    return plan.without_helpers(), why


def _train(
    run: Prepared,
    plan: Plan,
    loss_fn: Callable[..., Any] | None,
    optimizer: Any,
    schedule: Schedule,
    *,
    tune: bool | str,
    compile: bool | None,
    max_grad_norm: float | None,
    scheduling: Scheduling,
    measuring: MeterOptions,
    evaluate: Callable[[Step], float | None] | None,
    progress: bool,
) -> RunReport:
    """Build the step, the tuner and the meter for `run` and train it."""
    step = make_step(
        run,
        plan,
        loss_fn,
        optimizer,
        compile=compile,
        max_grad_norm=max_grad_norm,
        scheduling=scheduling,
    )
    tuner = _tuner(tune, step, run, optimizer, plan, compile, schedule)
    meter = _meter(run, plan, optimizer, step, schedule, measuring, tuned=tuner is not None)
    _run_facts(meter, run, plan, step)
    with meter:
        kept = loop.train(
            run,
            step,
            meter,
            schedule,
            count_flops=measuring.flops_per_step is None and step.compiled,
            progress=progress,
            tuner=tuner,
            evaluate=evaluate,
        )
        _kept_facts(meter, kept, tuner)
    if run.wrapping is not None:  # after the meter's last window: not a step's time
        run.wrapping.finish(run.module, kept.ddp)
    if progress:
        loop.end_progress(meter)
    return meter.report()


def _meter(
    run: Prepared,
    plan: Plan,
    optimizer: Any,
    step: Step,
    schedule: Schedule,
    measuring: MeterOptions,
    *,
    tuned: bool,
) -> Meter:
    """The meter of the fit; tune's trials are its warm-up, at least one step of it."""
    warmup = max(measuring.warmup, 1) if tuned else measuring.warmup
    # FLOPs are counted on the first real step as it trains, so the model and loss run no
    # extra pass; FlopCounterMode cannot see inside a compiled graph, so a step compiled
    # from the start is counted in a pass of its own through the uncompiled module (the loop's).
    return Meter(
        run.module,
        epochs=schedule.epochs,
        count_flops=measuring.flops_per_step is None and not step.compiled,
        optimizer=optimizer,
        grad_scaler=step.scaler,
        gather=run.group is not None,
        **measuring.to_kwargs(plan=plan, warmup=warmup),
    )


def _kept_facts(meter: Meter, kept: Step, tuner: Tuner | None) -> None:
    """What the report says of the step the run went on with, and of tune's trials."""
    meter.facts["compiled"] = kept.compiled
    for key, why in kept.notes.items():
        meter.note(key, why)
    if kept.ddp:
        meter.facts["ddp"] = dict(kept.ddp)
    if tuner is not None and tuner.result is not None:
        meter.tuning = tuner.result.to_dict()


def tune(
    model: Any,
    loader: Iterable[Any],
    optimizer: Any,
    loss_fn: Callable[..., Any] | None,
    *,
    plan: Plan | None = None,
    device: Any = None,
    accumulation_steps: int = 1,
    max_grad_norm: float | None = None,
    steps: int | None = None,
    scheduler: Any = None,
    scheduler_interval: str = "step",
) -> TuneResult:
    """Measure the fit's options on `model` and keep the fastest, for a hand-written loop.

    Trains the first batches of `loader` through each candidate in turn (at most
    `accelkit.torch.tuning.registry.trial_steps` optimizer steps of `accumulation_steps`
    batches: 42 on the CPU, 78 on a GPU, 114 on the CPU and 132 on a GPU under DDP, and
    18 more each for the SDPA and the float8 candidates), exactly as ``fit(tune=True)``
    does: the plan's settings, the optimizer's fused (or foreach) implementation,
    ``torch.compile`` of forward and loss, and on a GPU its CUDA graphs, then
    max-autotune where your loop's `steps` pay for its compilation (without them it is
    not tried, and the result says why), and float8 on a GPU that has it.
    These are real training steps: the model and optimizer come back trained on them, so
    continue from the next batch (pass an iterator, ``batches = iter(loader)``, and loop
    over the same one afterwards). Your loop's LR scheduler steps with them: pass it as
    `scheduler` (an optimizer with a scheduler bound to it and none given is refused,
    since its trials would all train at the schedule's first learning rate).

    What it keeps: the optimizer is switched in place when its fused implementation won
    (the object stays the same, so an LR scheduler bound to it keeps working); whether
    to compile is ``result.compile`` - apply it in your loop with ``torch.compile(model,
    mode=...)``: ``result.compile_mode`` where set (max-autotune), else
    ``"reduce-overhead"`` where ``result.cudagraphs``, else the default. A step that
    replays CUDA graphs (``result.cudagraphs``) calls
    ``torch.compiler.cudagraph_mark_step_begin()`` before each step and clones the loss
    out of the graph (the next replay overwrites it). A kept SDPA switch
    (``result.attention``) and kept float8 layers (``result.float8``: the eligible linear
    layers as torchao ``Float8Linear`` on the same parameters) stay on the model.

    Args:
        model, loader, optimizer, loss_fn: as for `accelkit.torch.fit` (batches and
            outputs follow the same conventions).
        plan: the plan to follow (default: the last `auto_configure()` plan).
        device: where to train (default: the GPU of this rank, or the CPU).
        accumulation_steps: batches per optimizer step, as in your loop.
        max_grad_norm: clip gradients to this norm, as in your loop.
        steps: the batches your loop trains in all, these trials included, counted as
            `fit`'s ``steps=`` (under accumulation, each batch; None: unknown): what
            max-autotune's compile time is weighed against.
        scheduler: your loop's LR scheduler of `optimizer`, stepped after each trial's
            optimizer step as your loop steps it (``scheduler_interval="epoch"``: your
            loop steps it after each epoch, and the trials, inside the first, do not).
        scheduler_interval: ``"step"`` or ``"epoch"``.

    Returns:
        The `TuneResult`: each candidate's median step time and spread, compile seconds,
        status and reason; ``result.speedup`` of the kept one over the plan's settings.

    Example:
        >>> import accelkit
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
        ...                             torch.nn.Linear(32, 4))
        >>> data = torch.utils.data.TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))
        >>> loader = torch.utils.data.DataLoader(data, batch_size=32)
        >>> optimizer, loss_fn = torch.optim.AdamW(model.parameters()), torch.nn.CrossEntropyLoss()
        >>> batches = iter(loader)
        >>> result = accelkit.torch.tune(model, batches, optimizer, loss_fn)
        >>> if result.compile:
        ...     model = torch.compile(model)
        >>> for x, y in batches:   # the rest of the data
        ...     ...
    """
    torch = require("torch")
    arguments.whole("accumulation_steps", accumulation_steps, 1)
    arguments.whole("steps", steps, 1, none="a loop of unknown length")
    scheduling = lr_scheduling.check(scheduler, optimizer, scheduler_interval, refuse_unbound=True)
    cuda = torch.device(device).type == "cuda" if device is not None else torch.cuda.is_available()
    on = torch.device(device) if device is not None else torch.device("cuda" if cuda else "cpu")
    trials = trial_steps(
        accumulation_steps,
        data_parallel=parallel.world() is not None,
        cuda=cuda,
        attention=attention.candidate(model)[0] is not None,
        float8=float8.trial_count(model, on, torch) > 0,
    )
    report = _fit(
        model,
        loader,
        optimizer,
        loss_fn,
        Schedule(steps=trials, accumulation_steps=accumulation_steps, partial=True, planned=steps),
        plan=plan,
        device=device,
        compile=None,
        channels_last=None,
        max_grad_norm=max_grad_norm,
        eval_loader=None,
        progress=False,
        distributed=True,
        tune=True,
        ddp=None,
        scheduling=scheduling,
        options={},
    )
    if report.tuning is None:  # interrupted during the trials: fit returned early
        raise KeyboardInterrupt
    return TuneResult.from_dict(report.tuning)


def _run_facts(meter: Meter, run: Prepared, plan: Plan, step: Step) -> None:
    """What the report says of how the run was laid out: the loader, DDP or FSDP2, the
    changes made to the model, and the plan's predicted memory per GPU beside the peak
    the meter measures (``facts["predicted_memory_bytes"]``, `accelkit.planning.memory`)."""
    meter.facts.update(_loader_facts(run.loader), compiled=step.compiled)
    if run.group is not None:
        meter.facts.update(distributed=True, sampler=run.sampling)
    if run.wrapping is not None:
        run.wrapping.measure(meter)
    if run.sharded is not None:
        meter.facts["sharding"] = run.sharded.to_dict()
    elif sharding.wanted(plan):
        why = "the script's DistributedDataParallel is kept" if run.group else "distributed=False"
        meter.note("sharding", f"the plan shards with FSDP2, not applied: {why}")
    if run.changes:
        meter.facts["model_changes"] = list(run.changes)
    if plan.memory is not None:
        meter.facts.update(
            predicted_memory_bytes=plan.memory.per_gpu_bytes, memory_choice=plan.memory.choice
        )


def _tuner(
    mode: bool | str,
    step: Step,
    run: Any,
    optimizer: Any,
    plan: Plan,
    compile: bool | None,
    schedule: Schedule,
) -> Tuner | None:
    """The tuner for this fit, or None for ``tune=False``."""
    if not check_mode(mode):
        return None
    length = steps_per_epoch(run.loader)
    known = [n for n in (schedule.steps, length and length * schedule.epochs) if n]
    planned = schedule.planned if schedule.partial else (min(known) if known else None)
    fixed = compile if compile is not None else (True if plan.compile else None)
    decide = (
        (lambda value: parallel.broadcast(value, run.device))
        if run.group is not None
        else (lambda value: value)
    )
    return Tuner(
        step,
        module=run.module,
        optimizer=optimizer,
        device=run.device,
        mode=mode,
        compile_fixed=fixed,
        planned_steps=planned,
        accumulation_steps=schedule.accumulation_steps,
        decide=decide,
        levers=_levers(run, plan),
    )


def _levers(run: Prepared, plan: Plan) -> Any:
    """tune's DDP levers for this run: none alone; skipped, saying why, under FSDP2."""
    if run.wrapping is not None:
        return levers.Levers(run.wrapping, run.module, run.device, plan)
    if run.sharded is not None:
        return levers.NoWrapper("the model is sharded with FSDP2: the DDP levers do not apply")
    return None


def _loader_facts(loader: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {"loader": loader_facts(loader)}
    length = steps_per_epoch(loader)
    if length:
        facts["steps_per_epoch"] = length
    return facts
