"""Several GPUs: FSDP2 and DDP runs of Llama-3.2-3B- and Llama-3-8B-shaped models, the
plan's layout checked against the other one, and the trainers with the plan (issue 40).

The model (`--model`) is a transformers ``LlamaForCausalLM`` built from its config on each
rank's GPU (nothing downloads): ``3b`` is Llama 3.2 3B's shape (hidden 3072, MLP 8192, 28
layers, 24 query / 8 key-value heads, vocabulary 128,256, embeddings tied to the head:
3.21B parameters), ``8b`` Llama 3 8B's (hidden 4096, MLP 14336, 32 layers, 32 / 8 heads,
vocabulary 128,256, untied: 8.03B); ``--smoke`` a 2-layer one of the same kind
(models_people_train.LLAMA_TINY, its MLP 2048 wide so that float8 converts a layer)
that checks the script, not speed. Batches are random token ids with labels,
`--batch-size` x `--seq-len` per GPU (3b: 4 x 2048, 8b: 2 x 2048; about 110 GB per GPU
for 3B under DDP and 100 GB for 8B under FSDP2 on 2 GPUs, by the 1B's measured
activations scaled; `--batch-size 1` if a first run runs out of memory), the model
computing its loss; SDPA attention; AdamW as users write it.

Variants (`--variants`), each in its own torchrun of `--gpus` processes (one per GPU),
in paired rounds whose order alternates (ABBA...), as benchmarks/trainers_tuned.py does:

- `fit_plan`: ``accelkit.torch.fit`` under the plan the planner gives this model's size
  on these GPUs (``accelkit.auto_configure()``, then ``accelkit.planning.plan(hardware,
  accelkit.Request(params=N))``: `auto_configure` takes no model size), so the plan
  chooses DDP, FSDP2, checkpointing or offload;
- `fit_ddp`, `fit_fsdp2`: the same fit with the layout asked for
  (``Request(distribute="ddp")`` / ``"fsdp"``, params given); skipped, with the
  reason, where it is the plan's own choice (`fit_plan` is that run) or where the
  plan finds that it does not fit (DDP of an 8B model: its state does not fit one GPU);
- `fit_single`, added by `--single`: `fit_plan` on one GPU (torchrun of one process),
  the reference of the scaling; skipped where the model does not fit one GPU whole;
- `hf_plan`: the Hugging Face ``Trainer`` with ``TrainingArguments(**accelkit.hf.
  training_arguments(plan))`` and ``accelkit.hf.AccelkitCallback(plan=plan)`` (its FSDP2
  through Accelerate when the plan shards; the Trainer's own optimizer, fused AdamW);
- `lightning_plan`: ``lightning.Trainer(**accelkit.lightning.trainer_kwargs(plan,
  model=module), callbacks=[accelkit.lightning.AccelkitCallback(plan=plan)])`` (its
  ``FSDPStrategy``, FSDP1, when the plan shards);
- `fit_fsdp2_compile`, `fit_fsdp2_float8` (not in the default list): FSDP2 with
  ``fit(compile=True)``, and the same with torchao's float8 training converted by the
  script before the fit (``convert_to_float8_training`` of the layers accelkit's float8
  lever finds eligible, ``Float8LinearConfig(enable_fsdp_float8_all_gather=True)``, the
  scales precomputed after each optimizer step as torchtitan does): float8 needs
  compile to pay, so the compiled FSDP2 run is its baseline. Skipped, with the reason,
  without torchao or a GPU of compute capability 8.9 or later (the H200 image has no
  torchao: carry it as wheels, /work/.library/device/README.md); the CPU check runs it
  on torchao's emulation.

Tune is off in every variant (``tune=False``): the rows compare layouts, not levers.

Per variant, from rank 0: tokens/s per GPU from `--windows` timed windows of `--steps`
optimizer steps after `--warmup` steps (the device synchronised at each window's edges,
at the end of an optimizer step; median over the windows, then over the rounds), the
MFU accelkit reported, the peak memory per GPU (``torch.cuda.max_memory_allocated``,
the largest of the ranks; None on the CPU), the memory the run's estimate predicts per GPU
(the report's ``predicted_memory_bytes``: the plan's memory model with the activations
measured on the first step) and the plan's estimate made before the model existed
(``plan.memory.per_gpu_bytes``, activations unknown), each against the peak, the world
size, each variant's speed against `fit_plan` in the same rounds (``x fit_plan``:
`fit_plan`'s step time over its own, round by round; above 1 is faster), and the
scaling against `fit_single` (tokens/s per GPU over one GPU's). The verdict says whether
the plan's layout is the faster of DDP and FSDP2 where both ran. `--out` is rewritten
after every run, so a run cut short keeps what it measured; a run that would start with
too little of `--budget` left (90 s, or 1.1 x the longest run so far) is listed as
skipped; a run's processes end themselves (SIGALRM) 10 s before its `--timeout`, so
that none lives on holding a GPU. NVLink multicast stays off: the children get
``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and
``NVSHMEM_DISABLE_NVLS=1`` unless the caller set them (accelkit never turns it on).

Commands (one device call each, at most 10 minutes; the estimates are not measured: about
30 s to start a run (imports, NCCL, the model built on the GPUs), then 35 steps of about
0.4-0.6 s for 3B at 4 x 2048 per GPU and 8B at 2 x 2048; so about 1-1.5 minutes per fit
run of 3B, 1.5-2 for 8B and for each trainer run, 2-3 for a compiled one; a session's
30 minutes of device time hold about three such calls, the most important rows first)::

    # 2 x H200, call 1 (about 8 min): 3B, the plan's DDP against FSDP2, one GPU for scaling
    PYTHONPATH=src python3 benchmarks/sharding.py --model 3b --gpus 2 --single \\
        --variants fit_plan fit_ddp fit_fsdp2 --rounds 2 --budget 540 --out $OUT/h200x2_3b.json
    # 2 x H200, call 2 (about 7 min): 8B, FSDP2 the only layout that holds it (fit_ddp and
    # fit_single are skipped with the plan's numbers), and the trainers' FSDP
    PYTHONPATH=src python3 benchmarks/sharding.py --model 8b --gpus 2 --single \\
        --variants fit_plan fit_ddp hf_plan lightning_plan --budget 540 \\
        --out $OUT/h200x2_8b.json
    # 2 x H200, call 3 (about 9 min): 3B through the trainers, float8 all-gather (torchao wheels)
    PYTHONPATH=src python3 benchmarks/sharding.py --model 3b --gpus 2 \\
        --variants hf_plan lightning_plan fit_fsdp2_compile fit_fsdp2_float8 --budget 540 \\
        --out $OUT/h200x2_3b_trainers.json
    # 4 x H200: the same three calls with --gpus 4 (each run a little longer to start)
    PYTHONPATH=src python3 benchmarks/sharding.py --model 3b --gpus 4 --single \\
        --variants fit_plan fit_ddp fit_fsdp2 --rounds 2 --budget 540 --out $OUT/h200x4_3b.json
    PYTHONPATH=src python3 benchmarks/sharding.py --model 8b --gpus 4 \\
        --variants fit_plan fit_ddp hf_plan lightning_plan --budget 540 \\
        --out $OUT/h200x4_8b.json
    # the CPU check (gloo, 2 processes, about a minute on 2 cores)
    PYTHONPATH=src python3 benchmarks/sharding.py --smoke --gpus 2 --single \\
        --variants fit_plan fit_ddp fit_fsdp2 hf_plan lightning_plan fit_fsdp2_float8 \\
        --out /tmp/sharding.json

The default `--variants` are fit_plan, fit_ddp, fit_fsdp2, hf_plan and lightning_plan.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models_people_train as models  # same folder: the tiny Llama, the optimizer
from gpu_compare import run_child, write_json
from trainers_tuned import _ratios as paired_ratios

if importlib.util.find_spec("accelkit") is None:  # a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

# Llama 3.2 3B's and Llama 3 8B's shapes (meta-llama's config.json files; rope scaling
# left out: it changes no FLOP or byte of a step), and the tiny one of the CPU check.
SHAPES: dict[str, dict[str, Any]] = {
    "3b": {**models.LLAMA_3B, "tie_word_embeddings": True},
    "8b": {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "tie_word_embeddings": False,
    },
    # an MLP wide enough (2048 out features) for float8's size filter to convert a layer
    "tiny": {**models.LLAMA_TINY, "intermediate_size": 2048, "tie_word_embeddings": True},
}  # fmt: skip
BATCH = {"3b": 4, "8b": 2, "tiny": 2}  # per GPU: what fits 141 GB with DDP's or FSDP2's state
SEQ_LEN = {"3b": 2048, "8b": 2048, "tiny": 64}

VARIANTS = (
    "fit_plan",
    "fit_ddp",
    "fit_fsdp2",
    "fit_single",
    "hf_plan",
    "lightning_plan",
    "fit_fsdp2_compile",
    "fit_fsdp2_float8",
)
DEFAULT_VARIANTS = ["fit_plan", "fit_ddp", "fit_fsdp2", "hf_plan", "lightning_plan"]
# The `distribute` each variant asks the planner for ("auto": the plan chooses).
DISTRIBUTE = {
    "fit_ddp": "ddp",
    "fit_fsdp2": "fsdp",
    "fit_fsdp2_compile": "fsdp",
    "fit_fsdp2_float8": "fsdp",
}
COMPILED = ("fit_fsdp2_compile", "fit_fsdp2_float8")
# NVLink multicast off in NCCL, PyTorch and NVSHMEM (the device README: a program that
# uses it can take the host's GPUs out of service); a value the caller set is kept.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# A run is not started with less of the budget left than this, or than 1.1 x the longest
# run so far (seconds).
SHORTEST_RUN_S = {"gpu": 90.0, "smoke": 10.0}
# A run's processes end themselves (SIGALRM's default action, which a process blocked in
# a collective cannot delay) this long before the parent would kill torchrun alone,
# whose workers would otherwise live on holding their GPUs.
DEADLINE_MARGIN_S = 10.0


# -- the model ---------------------------------------------------------------------------


def shape_name(args: argparse.Namespace) -> str:
    return "tiny" if args.smoke else args.model


def llama_config(name: str, length: int) -> Any:
    """The ``LlamaConfig`` of `SHAPES[name]` for sequences of `length`, SDPA attention."""
    from transformers import LlamaConfig

    return LlamaConfig(
        **SHAPES[name], max_position_embeddings=max(length, 2048), attn_implementation="sdpa"
    )


def parameter_count(name: str, length: int) -> int:
    """The model's parameters, counted on the meta device (no memory, no time); tied
    embeddings counted once."""
    import torch
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(name, length))
    return sum(p.numel() for p in model.parameters())


def build(args: argparse.Namespace, device: Any) -> tuple[Any, dict[str, Any]]:
    """The model, initialised where it trains (seconds, not minutes, for 8B), and one
    batch of random token ids with labels, `--batch-size` x `--seq-len`, on `device`."""
    import torch
    from transformers import LlamaForCausalLM

    config = llama_config(shape_name(args), args.seq_len)
    torch.manual_seed(0)  # every rank the same weights and batch
    with torch.device(device):
        model = LlamaForCausalLM(config)
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
    return model, {"input_ids": ids, "labels": ids}


# -- one variant, on each rank of its torchrun --------------------------------------------


class Windows:
    """Seconds per step of `count` windows of `steps` optimizer steps after `warmup`:
    `step_done` is called at the end of each optimizer step, and synchronises the device
    and reads the clock at the windows' edges."""

    def __init__(self, torch: Any, device: Any, warmup: int, steps: int, count: int) -> None:
        self._torch, self._device, self.steps = torch, device, steps
        self.edges = {warmup + steps * window for window in range(count + 1)}
        self.total = max(self.edges)
        self.done = 0
        self.marks: list[float] = []

    def step_done(self) -> None:
        self.done += 1
        if self.done in self.edges:
            if self._device.type == "cuda":
                self._torch.cuda.synchronize(self._device)
            self.marks.append(time.perf_counter())

    def seconds_per_step(self) -> list[float]:
        return [(b - a) / self.steps for a, b in zip(self.marks, self.marks[1:], strict=False)]


def variant_plan(base: Any, params: int, variant: str) -> Any:
    """The plan this variant trains under: the planner's for `params` parameters on
    `base`'s hardware and launcher, with the variant's `distribute` (ValueError where
    the planner refuses it)."""
    import accelkit
    from accelkit.planning import plan

    request = accelkit.Request(
        framework="torch", params=params, distribute=DISTRIBUTE.get(variant, "auto")
    )
    return plan(base.hardware, request)


def run_fit(args: argparse.Namespace, plan: Any, model: Any, batch: Any, timer: Windows) -> Any:
    """``accelkit.torch.fit`` of the model under `plan`; float8 converted first for
    `fit_fsdp2_float8`, compiled for the `COMPILED` variants."""
    import torch

    import accelkit.torch
    from accelkit.bench.torch_models import SyntheticBatches

    optimizer = models.optimizer_for(torch, model, "llama-1b")
    converted = to_float8(model, optimizer) if args.variant == "fit_fsdp2_float8" else None
    optimizer.register_step_post_hook(lambda *_: timer.step_done())
    report = accelkit.torch.fit(
        model,
        SyntheticBatches(batch, timer.total),
        optimizer,
        None,
        plan=plan,
        tune=False,
        progress=False,
        compile=args.variant in COMPILED,
        warmup=args.warmup,
        window=args.steps,
        tokens_per_sample=args.seq_len,
    )
    if converted:
        report.note("float8", converted)
    return report


def to_float8(model: Any, optimizer: Any) -> str:
    """torchao's float8 training on the linear layers accelkit's float8 lever finds
    eligible (not the head), with float8 all-gather under FSDP2 and the scales
    computed once per step for every shard (torchao's FSDP2 recipe, torchtitan's use);
    emulated off CUDA (the CPU check). Returns what was converted."""
    from torchao.float8 import (  # type: ignore[import-untyped]
        Float8LinearConfig,
        convert_to_float8_training,
        precompute_float8_dynamic_scale_for_fsdp,
    )

    from accelkit.torch.tuning.float8 import eligible

    names = set(eligible(model).names)
    emulate = next(model.parameters()).device.type != "cuda"
    convert_to_float8_training(
        model,
        config=Float8LinearConfig(enable_fsdp_float8_all_gather=True, emulate=emulate),
        module_filter_fn=lambda _, fqn: fqn in names,
    )
    optimizer.register_step_post_hook(lambda *_: precompute_float8_dynamic_scale_for_fsdp(model))
    how = "emulated (torchao on the CPU: checks the code, not speed)" if emulate else "float8"
    return f"{len(names)} linear layers {how}, float8 all-gather under FSDP2"


def run_hf(args: argparse.Namespace, plan: Any, model: Any, batch: Any, timer: Windows) -> Any:
    """The Hugging Face Trainer with ``training_arguments(plan)`` and the callback."""
    import tempfile

    from transformers import Trainer, TrainerCallback, TrainingArguments

    import accelkit.hf

    class StepEnds(TrainerCallback):
        def on_step_end(self, arguments: Any, state: Any, control: Any, **_: Any) -> None:
            timer.step_done()

    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    ids = batch["input_ids"].cpu()
    rows = [{"input_ids": ids[i], "labels": ids[i]} for i in range(len(ids))]
    fields: dict[str, Any] = {
        "output_dir": tempfile.mkdtemp(), "max_steps": timer.total, "report_to": [],
        "per_device_train_batch_size": args.batch_size, "logging_steps": 10**6,
        "save_strategy": "no", "disable_tqdm": True,
        "use_cpu": batch["input_ids"].device.type == "cpu",
    }  # fmt: skip
    measured = accelkit.hf.AccelkitCallback(
        plan=plan, tune=False, warmup=args.warmup, window=args.steps
    )
    arguments = TrainingArguments(**accelkit.hf.training_arguments(plan), **fields)
    trainer = Trainer(
        model, arguments, train_dataset=rows * timer.total * ranks, callbacks=[StepEnds(), measured]
    )
    trainer.train()
    return measured.report


def run_lightning(
    args: argparse.Namespace, plan: Any, model: Any, batch: Any, timer: Windows
) -> Any:
    """Lightning's Trainer with ``trainer_kwargs(plan, model=...)`` and the callback."""
    import lightning as L  # Lightning's convention
    import torch

    import accelkit.lightning
    from accelkit.bench.torch_models import SyntheticBatches

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, data: Any, index: int) -> Any:
            return self.net(**data).loss

        def configure_optimizers(self) -> Any:
            return models.optimizer_for(torch, self, "llama-1b")

    class StepEnds(L.Callback):
        def on_train_batch_end(self, *_: Any) -> None:
            timer.step_done()

    module = Module()
    measured = accelkit.lightning.AccelkitCallback(
        plan=plan, tune=False, warmup=args.warmup, window=args.steps
    )
    trainer = L.Trainer(
        **accelkit.lightning.trainer_kwargs(plan, model=module), max_steps=timer.total,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[StepEnds(), measured],
    )  # fmt: skip
    trainer.fit(module, train_dataloaders=SyntheticBatches(batch, timer.total))
    return measured.report


def run_variant(args: argparse.Namespace) -> dict[str, Any] | None:
    """Train `args.variant` on this rank; rank 0's figures (None on the other ranks)."""
    import torch

    import accelkit

    base = accelkit.auto_configure(framework="torch", verbose=False)  # the process group
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    model, batch = build(args, device)
    plan = variant_plan(base, sum(p.numel() for p in model.parameters()), args.variant)
    timer = Windows(torch, device, args.warmup, args.steps, args.windows)
    door = {"fit": run_fit, "hf": run_hf, "lightning": run_lightning}[args.variant.split("_")[0]]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    report = door(args, plan, model, batch, timer)
    peaks = _peaks_of_ranks(torch, device)
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    return figures(args, plan, report, timer, peaks)


def _peaks_of_ranks(torch: Any, device: Any) -> list[int | None]:
    """Every rank's ``torch.cuda.max_memory_allocated`` (None on the CPU), in rank order."""
    from accelkit.torch.distributed import parallel

    peak = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
    if parallel.world() is None:
        return [peak]
    return [rank["peak"] for rank in parallel.gather({"peak": peak}, device)]


def figures(
    args: argparse.Namespace, plan: Any, report: Any, timer: Windows, peaks: list[int | None]
) -> dict[str, Any]:
    """What rank 0 tells the comparison: its windows, the report's figures, the memory
    measured on every rank, and what the plan and the run's estimate predicted."""
    facts, notes = report.facts, report.notes
    measured = "activation_bytes" in facts  # the run's estimate, activations measured
    memory = plan.memory
    known = [peak for peak in peaks if peak is not None]
    return {
        "step_s": timer.seconds_per_step(),
        "tokens_per_step_per_gpu": args.batch_size * args.seq_len,
        "world_size": report.world_size,
        "layout": layout(report),
        "plan_distribution": plan.distribution.value,
        "plan_choice": None if memory is None else memory.choice,
        "plan_reason": None if memory is None else memory.reason,
        "planned_memory_bytes": None if memory is None else memory.per_gpu_bytes,
        "predicted_memory_bytes": facts.get("predicted_memory_bytes") if measured else None,
        "choice_with_activations": facts.get("memory_choice") if measured else None,
        "activation_bytes": facts.get("activation_bytes"),
        "peak_memory_bytes": max(known) if known else None,
        "peak_memory_bytes_per_rank": peaks,
        "mfu": report.mfu,
        "report_tokens_per_second": report.tokens_per_second,
        "notes": {
            key: notes[key]
            for key in ("mfu", "peak_memory_bytes", "activation_bytes", "sharding", "float8")
            if key in notes
        },
        "memory_estimate": facts.get("memory_estimate"),
        "sharding": facts.get("sharding"),
        "compiled": facts.get("compiled"),
        "model_changes": facts.get("model_changes"),
    }


def layout(report: Any) -> str:
    """How the run held the model: ``fsdp2`` / ``fsdp1`` with ``+checkpointing`` and
    ``+offload`` where so, ``ddp`` for several replicas, ``none`` for one process."""
    sharded = report.facts.get("sharding")
    if not sharded:
        return "ddp" if report.world_size > 1 else "none"
    extras = [name for name in ("checkpointing", "offload") if sharded.get(name)]
    return "+".join([sharded.get("kind", "fsdp2"), *extras])


# -- the comparison, in the parent --------------------------------------------------------


def torchrun_environ(ranks: int) -> dict[str, str]:
    """This environment as rank 0 of a torchrun of `ranks` processes sees it."""
    ranks_text = str(ranks)
    launched = {"RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    launched.update(WORLD_SIZE=ranks_text, LOCAL_WORLD_SIZE=ranks_text, MASTER_PORT="29500")
    return {**os.environ, **launched}


def setting(args: argparse.Namespace, hardware_of: Any = None) -> dict[str, Any]:
    """What the children will plan, planned here as they plan it: the model's size, and
    per variant its plan on these GPUs as torchrun's ranks see them, or why the planner
    refuses it; and why float8 cannot run here, if it cannot.

    Args:
        args: the comparison's arguments (model, GPUs, variants).
        hardware_of: the `HardwareInfo` rank 0 of a torchrun of N processes sees, given
            N; default: this machine's (NVML, no CUDA context), ``accelkit.detect``.
    """
    import accelkit
    from accelkit.planning import plan

    def detected(ranks: int) -> Any:
        return accelkit.detect(environ=torchrun_environ(ranks))

    hardware_of = hardware_of or detected
    params = parameter_count(shape_name(args), args.seq_len)
    plans: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for variant in args.variants:
        hardware = hardware_of(1 if variant == "fit_single" else args.gpus)
        distribute = DISTRIBUTE.get(variant, "auto")
        request = accelkit.Request(framework="torch", params=params, distribute=distribute)
        try:
            plans[variant] = plan(hardware, request)
        except ValueError as error:
            refused[variant] = str(error)
    return {
        "params": params,
        "plans": plans,
        "refused": refused,
        "float8": float8_absent(args.smoke),
    }


def float8_absent(smoke: bool) -> str | None:
    """Why torchao's float8 training cannot run on these GPUs, or None; the CPU check
    runs it emulated (torchao's own emulation) where torchao is installed."""
    import accelkit
    from accelkit.hardware import capabilities

    if importlib.util.find_spec("torchao") is None:
        return "torchao is not installed (pip install torchao; on the H200 image, as wheels)"
    gpus = accelkit.detect().gpus
    if smoke and not gpus:
        return None
    if not gpus or not all(capabilities.has_fp8(gpu.compute_capability) for gpu in gpus):
        names = ", ".join(sorted({gpu.name for gpu in gpus})) or "no GPU"
        return f"float8 matmuls need compute capability 8.9 or later (this machine: {names})"
    return None


def skip_reason(variant: str, found: dict[str, Any]) -> str | None:
    """Why `variant` is not run, or None: the planner refuses it, it does not fit, it is
    the plan's own choice (`fit_plan` is that run), one GPU does not hold the model, or
    float8 cannot run here."""
    own = found["plans"].get("fit_plan")
    if variant in found["refused"]:
        numbers = f"; {own.memory.reason}" if own is not None and own.memory else ""
        return f"the planner refuses it: {found['refused'][variant]}{numbers}"
    chosen = found["plans"][variant]
    memory = chosen.memory
    if memory is not None and not memory.fits:
        return f"the plan finds no layout that fits: {memory.reason}"
    if variant == "fit_fsdp2_float8" and found["float8"]:
        return found["float8"]
    same = own is not None and own.distribution == chosen.distribution
    if variant in ("fit_ddp", "fit_fsdp2") and same:
        return f"the plan chooses {chosen.distribution.value} itself: fit_plan is this run"
    if variant == "fit_single" and memory is not None and memory.choice != "none":
        return f"one GPU does not hold the model whole (its plan: {memory.choice})"
    return None


def schedule(variants: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, variant) in the order they run: each round reverses the last (ABBA...)."""
    runs = []
    for number in range(rounds):
        order = variants if number % 2 == 0 else variants[::-1]
        runs += [(number, variant) for variant in order]
    return runs


def command(variant: str, args: argparse.Namespace, deadline: float) -> list[str]:
    """``-m torch.distributed.run ... sharding.py --variant V ...`` for one run whose
    processes end themselves after `deadline` seconds."""
    ranks = 1 if variant == "fit_single" else args.gpus
    line = ["-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--standalone"]
    line += [str(Path(__file__).resolve()), "--variant", variant, "--model", args.model]
    for flag in ("batch_size", "seq_len", "steps", "windows", "warmup"):
        line += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    line += ["--deadline", str(max(1, int(deadline)))]
    return line + (["--smoke"] if args.smoke else [])


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Every run in its own torchrun, in the budget; the result so far is written to
    `--out` after each run."""
    found = setting(args)
    skipped = {v: why for v in args.variants if (why := skip_reason(v, found))}
    runs = schedule([v for v in args.variants if v not in skipped], args.rounds)
    needed = SHORTEST_RUN_S["smoke" if args.smoke else "gpu"]
    rounds: list[dict[str, Any]] = [{} for _ in range(args.rounds)]
    started = time.perf_counter()
    for number, variant in runs:
        left = args.budget - (time.perf_counter() - started)
        if left < needed:  # not started where it would likely be cut short
            rounds[number][variant] = {"skipped": f"budget of {args.budget:.0f} s spent"}
            continue
        begun, timeout = time.perf_counter(), min(args.timeout, left - 5)
        result = run_child(command(variant, args, timeout - DEADLINE_MARGIN_S), timeout)
        rounds[number][variant] = result
        needed = max(needed, 1.1 * (time.perf_counter() - begun))
        state = "error" if "error" in result else f"{result['process_s']:.0f} s"
        print(f"  round {number + 1} {variant}: {state}", file=sys.stderr, flush=True)
        write_json(args.out, summarise(args, found, skipped, rounds, started))
    return summarise(args, found, skipped, rounds, started)


def row(variant: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's figures over its rounds: the median step, the largest peak."""
    runs = [r[variant] for r in rounds if variant in r]
    timed = [run for run in runs if run.get("step_s")]
    out: dict[str, Any] = {"variant": variant, "rounds": len(timed)}
    if not timed:
        errors = [run["error"][-600:] for run in runs if "error" in run]
        out["error" if errors else "skipped"] = (
            errors[-1]
            if errors
            else next(
                (r["skipped"] for r in runs if "skipped" in r),
                "no timed window: fewer steps than --warmup + --steps x --windows",
            )
        )
        return out
    last = timed[-1]
    step = statistics.median(statistics.median(run["step_s"]) for run in timed)
    peaks = [run["peak_memory_bytes"] for run in timed if run["peak_memory_bytes"] is not None]
    mfus = [run["mfu"] for run in timed if run["mfu"] is not None]
    out.update(
        {key: last[key] for key in ("world_size", "layout", "plan_choice", "plan_distribution")},
        step_ms=step * 1e3,
        step_ms_rounds=[statistics.median(run["step_s"]) * 1e3 for run in timed],
        tokens_per_s_per_gpu=last["tokens_per_step_per_gpu"] / step,
        report_tokens_per_s_per_gpu=last["report_tokens_per_second"],
        mfu=statistics.median(mfus) if mfus else None,
        peak_memory_gb=max(peaks) / 1e9 if peaks else None,
        predicted_memory_gb=_gb(last["predicted_memory_bytes"]),
        planned_memory_gb=_gb(last["planned_memory_bytes"]),
        choice_with_activations=last["choice_with_activations"],
        notes=last["notes"],
        errors=[run["error"][-600:] for run in runs if "error" in run],
    )
    for name in ("predicted", "planned"):
        guess = out[f"{name}_memory_gb"]
        out[f"peak_over_{name}"] = out["peak_memory_gb"] / guess if peaks and guess else None
    return out


def _gb(value: int | None) -> float | None:
    return None if value is None else value / 1e9


def summarise(
    args: argparse.Namespace,
    found: dict[str, Any],
    skipped: dict[str, str],
    rounds: list[dict[str, Any]],
    started: float,
) -> dict[str, Any]:
    """The result: a row per variant (measured, skipped with why, or its error), each
    against `fit_plan` in the same rounds and against one GPU, and the layouts' verdict."""
    rows = [
        {"variant": v, "skipped": skipped[v]} if v in skipped else row(v, rounds)
        for v in args.variants
    ]
    single = next((r for r in rows if r["variant"] == "fit_single" and "step_ms" in r), None)
    for measured in (r for r in rows if "step_ms" in r):
        ratios = paired_ratios(rounds, measured["variant"], "fit_plan")
        measured["speed_vs_fit_plan"] = statistics.median(ratios) if ratios else None
        measured["speed_vs_fit_plan_rounds"] = ratios
        measured["scaling_vs_one_gpu"] = (
            measured["tokens_per_s_per_gpu"] / single["tokens_per_s_per_gpu"]
            if single and measured["world_size"] > 1
            else None
        )
    return {
        "benchmark": "sharding",
        "model": shape_name(args),
        "params": found["params"],
        "gpus": args.gpus,
        "batch_per_gpu": args.batch_size,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "windows": args.windows,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "budget_s": args.budget,
        "seconds": round(time.perf_counter() - started, 1),
        "plans": {v: _plan_summary(p) for v, p in found["plans"].items()},
        "multicast_env": {name: os.environ.get(name) for name in MULTICAST_OFF},
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "rows": rows,
        "verdict": verdict(rows),
        "raw": rounds,
    }


def _plan_summary(plan: Any) -> dict[str, Any]:
    memory = plan.memory
    return {
        "distribution": plan.distribution.value,
        "precision": plan.precision.value,
        "choice": None if memory is None else memory.choice,
        "per_gpu_gb": None if memory is None else memory.per_gpu_bytes / 1e9,
        "reason": None if memory is None else memory.reason,
    }


def verdict(rows: list[dict[str, Any]]) -> str | None:
    """Whether the plan's layout is the faster of DDP and FSDP2 where both were measured
    (paired rounds: the other's speed over `fit_plan`'s, with the rounds' range)."""
    by_name = {r["variant"]: r for r in rows}
    plan = by_name.get("fit_plan", {})
    if "step_ms" not in plan:
        return None
    other = "fit_fsdp2" if plan["layout"] == "ddp" else "fit_ddp"
    if other not in by_name:
        return f"the plan's {plan['layout']}: {other} not among --variants"
    found = by_name[other]
    ratios = found.get("speed_vs_fit_plan_rounds")
    if not ratios:
        why = found.get("skipped") or found.get("error") or "no round with both"
        return f"the plan's {plan['layout']}: {other} not measured ({why[:200]})"
    median, low, high = statistics.median(ratios), min(ratios), max(ratios)
    spread = f"{median:.3f}x fit_plan's speed, rounds {low:.3f}-{high:.3f}"
    if high < 1:
        return f"the plan's {plan['layout']} is faster: {found['layout']} ran at {spread}"
    if low > 1:
        return (
            f"{found['layout']} is faster than the plan's {plan['layout']} ({spread}): "
            "the rule should change, with this measurement as its reason"
        )
    return f"{found['layout']} and the plan's {plan['layout']} within the rounds' spread ({spread})"


HEADER = (
    "variant", "layout", "GPUs", "tokens/s per GPU", "x fit_plan", "MFU", "peak GB per GPU",
    "predicted GB", "peak / predicted", "planned GB", "peak / planned", "x one GPU",
)  # fmt: skip
# (row key, format) of each column after the variant, layout and GPUs
FIGURES = (
    ("tokens_per_s_per_gpu", "{:,.0f}"), ("speed_vs_fit_plan", "{:.3f}"), ("mfu", "{:.1%}"),
    ("peak_memory_gb", "{:.2f}"), ("predicted_memory_gb", "{:.2f}"),
    ("peak_over_predicted", "{:.3f}"), ("planned_memory_gb", "{:.2f}"),
    ("peak_over_planned", "{:.3f}"), ("scaling_vs_one_gpu", "{:.1%}"),
)  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    """The rows as the table docs/benchmarks.md holds, then the verdict."""
    title = (
        f"{result['model']} ({_count(result['params'])} params), {result['gpus']} GPUs, "
        f"{result['batch_per_gpu']} x {result['seq_len']} tokens per GPU, {result['rounds']} "
        f"round(s) of {result['windows']} x {result['steps']} steps after {result['warmup']}"
    )
    lines = [title, "", _line(HEADER), _line(["---"] * len(HEADER))]
    for r in result["rows"]:
        if "step_ms" not in r:
            why = r.get("skipped") or f"error: {failure(r.get('error') or '?')}"
            lines.append(_line([r["variant"], why[:160], *["-"] * (len(HEADER) - 2)]))
            continue
        cells = [_num(r[key], fmt) for key, fmt in FIGURES]
        lines.append(_line([r["variant"], r["layout"], str(r["world_size"]), *cells]))
    return "\n".join([*lines, "", f"verdict: {result['verdict'] or '-'}"])


def failure(error: str) -> str:
    """The line of a run's error output that says what went wrong: its deadline, the
    last Python exception named, else the last line with words."""
    if "SIGALRM" in error:
        return "stopped at its deadline (--timeout)"
    lines = [line.strip() for line in error.splitlines() if line.strip(" =-")]
    named = [line for line in lines if "Error" in line or "Exception" in line]
    return (named or lines or ["?"])[-1]


def _count(params: int) -> str:
    return f"{params / 1e9:.2f}B" if params >= 1e8 else f"{params / 1e6:.2f}M"


def _line(cells: Any) -> str:
    return "| " + " | ".join(cells) + " |"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("3b", "8b"), default="3b")
    parser.add_argument("--gpus", type=int, default=2, help="processes (GPUs) per run")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=DEFAULT_VARIANTS)
    parser.add_argument("--single", action="store_true", help="add fit_single (one GPU)")
    parser.add_argument("--batch-size", type=int, default=None, help="per GPU (3b: 4, 8b: 2)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sample (2048)")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per window")
    parser.add_argument("--windows", type=int, default=3, help="timed windows per run")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=1, help="paired rounds (ABBA)")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for all runs")
    parser.add_argument("--timeout", type=float, default=420.0, help="seconds per run")
    parser.add_argument("--smoke", action="store_true", help="tiny Llama, few steps: a check")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one, internal
    parser.add_argument("--deadline", type=int, help=argparse.SUPPRESS)  # its seconds
    parser.add_argument("--out", help="write the result as JSON here (after every run)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.windows, args.warmup = 2, 2, 1
    args.batch_size = args.batch_size or BATCH[shape_name(args)]
    args.seq_len = args.seq_len or SEQ_LEN[shape_name(args)]
    if args.single and "fit_single" not in args.variants:
        fits = [v for v in args.variants if v.startswith("fit_") and v not in COMPILED]
        at = args.variants.index(fits[-1]) + 1 if fits else 0
        args.variants = [*args.variants[:at], "fit_single", *args.variants[at:]]
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.variant:
        if args.deadline:
            signal.alarm(args.deadline)
        found = run_variant(args)
        if found is not None:
            print(json.dumps(found, default=str))
        return 0
    for name, value in MULTICAST_OFF.items():
        os.environ.setdefault(name, value)
    result = compare(args)
    print(markdown(result))
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
