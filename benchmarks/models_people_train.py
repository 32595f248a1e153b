"""The models people train, as they write them, against accelkit's fit and `tune`.

Models (`--model`): `hf-gpt2` (transformers GPT-2 124M from its config, dict batches
``{"input_ids", "attention_mask", "labels"}``, the model computing its loss; SDPA
attention, transformers 5's default), `hf-gpt2-eager` (the same with
``attn_implementation="eager"``: what `tune`'s SDPA candidate replaces),
`timm-vit` (timm ``vit_base_patch16_224``), `resnet50` (torchvision), `gpt2`
(accelkit's built-in GPT-2 small), `fasterrcnn` (torchvision
``fasterrcnn_resnet50_fpn``, no weights, as torchvision writes detection: a batch of a
list of images and a list of target dicts, the model returning a dict of losses that
the loops sum; needs torchvision), `llama-1b` (a Llama-3.2-1B-shaped transformers
``LlamaForCausalLM`` from its config, 1.24B parameters, SDPA attention, batch 8 x 2048
random token ids with labels, the model computing its loss; `--seq-len` sets the
length; off CUDA a 2-layer model of the same kind, which checks the script, not speed).
Optimizers as users write them: ``AdamW(lr)`` (``SGD(lr, momentum)`` for ResNet-50 and
Faster R-CNN), no ``fused=`` or ``foreach=`` set.

Variants (each in its own process, all on the same synthetic batch):

- `plain_fp32`: the plain loop, PyTorch's defaults;
- `auto_configure`: the same loop with only ``accelkit.auto_configure()`` added;
- `readme_autocast`: the README's snippet (``plan.autocast()`` and ``plan.grad_scaler()``);
- `lightning_bf16`: Lightning ``Trainer(precision="bf16-mixed")``;
- `lightning_accelkit`: the same Trainer with `accelkit.lightning.AccelkitCallback`
  (its overhead is 1 - ``x Lightning``); ``MFU rep`` is the MFU accelkit reported
  for the run (the callback's report here, the fit's report for `fit`), beside the
  MFU this script computes from its own timing (``MFU``);
- `fit`: ``accelkit.torch.fit`` with ``tune=False`` (what its default ``"auto"`` does
  in a run as short as a benchmark's);
- `fit_tune`: ``accelkit.torch.fit(tune=True)``; its steady steps are those after the
  trials; the trials' time is reported apart (``tune_seconds``), with what they cost
  beyond the same steps at the kept speed (``tune_overhead_s``), what was kept and how
  much faster than the baseline in tune's paired rounds (speedup and its spread), and
  each trial below the table. max-autotune is tried only with `--planned-steps` long
  enough to pay for its compile (minutes on these models): without it the fit knows
  its data's length, the benchmark's few steps, and tune skips it.

The two fits train their repeats in one call each (the repeats are its windows of
`--steps` steps, ``report.series``), so a tuned fit's repeats run what tune kept, CUDA
graphs included (separate calls passed on ``compile=`` alone, and timed compile without
graphs after the first repeat).

Each variant trains `--warmup` steps then `--repeats` x `--steps` timed steps, the device
synchronised at both ends of each repeat. Ratios compare variants of one run.

    PYTHONPATH=src python3 benchmarks/models_people_train.py --model hf-gpt2 --out r.json
    PYTHONPATH=src python3 benchmarks/models_people_train.py --model gpt2 --smoke   # CPU check
    cd benchmarks && PYTHONPATH=../src python3 models_people_train.py --model llama-1b \
        --variants fit fit_tune --steps 10 --repeats 2 --warmup 5 --out r.json
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import statistics
import sys
import time
from typing import Any

import gpu_compare  # same folder: timing, memory, child-process and JSON helpers

VARIANTS = (
    "plain_fp32",
    "auto_configure",
    "readme_autocast",
    "lightning_bf16",
    "lightning_accelkit",
    "fit",
    "fit_tune",
)
MODELS = (
    "hf-gpt2", "hf-gpt2-eager", "timm-vit", "resnet50", "gpt2", "fasterrcnn", "llama-1b",
    "llama-3b",
)  # fmt: skip

# Llama 3.2 1B's shape (meta-llama/Llama-3.2-1B's config.json; rope scaling left out: it
# changes no FLOP or byte of a step), and a 2-layer model of the same kind for the CPU.
LLAMA_1B = {
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
}  # fmt: skip
# Llama 3.2 3B's (meta-llama/Llama-3.2-3B's config.json; its embeddings tied too).
LLAMA_3B = {
    "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
    "num_attention_heads": 24, "num_key_value_heads": 8, "vocab_size": 128256,
}  # fmt: skip
LLAMA_TINY = {
    "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
}  # fmt: skip
# Each Llama the scripts train: its shape, its batch on one GPU (1B: 8 x 2048 needs about
# 75 GB eager; 3B: 4 x 2048, its bf16 step compiled measured at 374 ms on the H200), name.
LLAMAS = {
    "llama-1b": (LLAMA_1B, 8, "Llama-3.2-1B"),
    "llama-3b": (LLAMA_3B, 4, "Llama-3.2-3B"),
}


# -- the model, its batch and its loss, as the model's library has them --------------------


def build(args: argparse.Namespace, device: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(model on `device`, batch on `device`, loss_fn or None, facts)."""
    import torch

    torch.manual_seed(0)
    smoke = args.smoke
    if args.model in ("hf-gpt2", "hf-gpt2-eager"):
        from transformers import GPT2Config, GPT2LMHeadModel

        config = (
            GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=512, n_positions=64)
            if smoke
            else GPT2Config()
        )
        batch_size, length = args.batch_size or (2 if smoke else 16), config.n_positions
        model = GPT2LMHeadModel(config)
        if args.model == "hf-gpt2-eager":  # as attn_implementation="eager" builds it
            model.set_attn_implementation("eager")
        ids = torch.randint(0, config.vocab_size, (batch_size, length))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
        return (
            model.to(device),
            {k: v.to(device) for k, v in batch.items()},
            None,
            {"tokens_per_sample": length},
        )
    if args.model == "fasterrcnn":
        return detection(args, device)
    if args.model in LLAMAS:
        return llama(args, device)
    if args.model == "timm-vit":
        import timm

        model = timm.create_model("vit_tiny_patch16_224" if smoke else "vit_base_patch16_224")
        batch_size = args.batch_size or (2 if smoke else 64)
        x, y = torch.randn(batch_size, 3, 224, 224), torch.randint(0, 1000, (batch_size,))
        return model.to(device), (x.to(device), y.to(device)), torch.nn.CrossEntropyLoss(), {}
    from accelkit.bench import torch_models

    name = "gpt" if smoke and args.model == "gpt2" else args.model
    model, batch, loss_fn, facts = torch_models.build(name, args.batch_size, device)
    return model.to(device), batch, loss_fn, facts


def llama(args: argparse.Namespace, device: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
    """A Llama-3.2-1B-shaped ``LlamaForCausalLM`` (`LLAMA_1B`, embeddings tied to the head,
    SDPA attention; `LLAMA_3B` for ``--model llama-3b``) built on `device`, and a batch of
    random token ids with labels, ``--batch-size`` x ``--seq-len`` (8 x 2048; 3B: 4 x
    2048), without an attention mask, as packed pre-training batches come. Off CUDA, or
    with --smoke, `LLAMA_TINY` at 2 x 64: a 1.24B model's step would take minutes there.

    Memory on one GPU at 8 x 2048: fp32 weights, gradients and AdamW's moments 19.8 GB;
    the bf16 logits (8 x 2048 x 128,256), their float32 copy for the loss and its
    gradient about 25 GB; the layers' activations about 30 GB.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny = getattr(args, "smoke", False) or device.type != "cuda"
    shape, batch, name = LLAMAS.get(getattr(args, "model", ""), LLAMAS["llama-1b"])
    length = getattr(args, "seq_len", None) or (64 if tiny else 2048)
    config = LlamaConfig(
        **(LLAMA_TINY if tiny else shape),
        max_position_embeddings=max(length, 2048),
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    with torch.device(device):  # initialised where it trains: seconds, not a minute on the CPU
        model = LlamaForCausalLM(config)
    batch_size = args.batch_size or (2 if tiny else batch)
    ids = torch.randint(0, config.vocab_size, (batch_size, length), device=device)
    facts = {"tokens_per_sample": length, "config": "tiny (2 layers)" if tiny else name}
    return model, {"input_ids": ids, "labels": ids}, None, facts


def detection(args: argparse.Namespace, device: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
    """torchvision's Faster R-CNN and a synthetic batch as its reference scripts give it:
    ``(images, targets)``, images of 3 x 512 x 640, two boxes each."""
    import torch
    from torchvision.models import detection as models

    build_model = (
        models.fasterrcnn_mobilenet_v3_large_fpn if args.smoke else models.fasterrcnn_resnet50_fpn
    )
    model = build_model(weights=None, weights_backbone=None, num_classes=91)
    batch_size = args.batch_size or (2 if args.smoke else 8)
    boxes = torch.tensor([[40.0, 60.0, 300.0, 400.0], [200.0, 100.0, 500.0, 480.0]])
    images = [torch.rand(3, 512, 640, device=device) for _ in range(batch_size)]
    targets = [
        {"boxes": boxes.to(device), "labels": torch.tensor([3, 17], device=device)}
        for _ in range(batch_size)
    ]
    return model.to(device), (images, targets), None, {}


def optimizer_for(torch: Any, model: Any, name: str) -> Any:
    if name == "fasterrcnn":  # torchvision's detection reference
        return torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
    if name == "resnet50":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return torch.optim.AdamW(model.parameters(), lr=1e-4)


def forward_loss(model: Any, batch: Any, loss_fn: Any) -> Any:
    if loss_fn is None:
        return model_loss(model, batch)
    inputs, targets = batch
    return loss_fn(model(inputs), targets)


def model_loss(model: Any, batch: Any) -> Any:
    """The loss a model computes itself: a transformers model's ``.loss`` from a dict
    batch; the sum of a torchvision detection model's losses from ``(images, targets)``,
    as torchvision's reference does."""
    if isinstance(batch, dict):
        return model(**batch).loss
    return sum(model(*batch).values())


# -- the variants ------------------------------------------------------------------------


def run_loop(args: argparse.Namespace, *, configure: bool, autocast: bool) -> dict[str, Any]:
    import torch

    plan = None
    if configure:
        import accelkit

        plan = accelkit.auto_configure(framework="torch", verbose=False)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, _ = build(args, device)
    optimizer = optimizer_for(torch, model, args.model)
    scaler = plan.grad_scaler() if autocast else None

    def step() -> None:
        if autocast:  # the README's snippet, as written there
            with plan.autocast():
                if loss_fn is None:
                    loss = model_loss(model, batch)
                else:
                    loss = loss_fn(model(batch[0]).float(), batch[1])
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            forward_loss(model, batch, loss_fn).backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    times = gpu_compare._timed(torch, device, step, args.warmup, args.steps, args.repeats)
    return {"step_s": times, "peak_memory_bytes": gpu_compare._peak_memory(torch, device)}


def run_fit(args: argparse.Namespace, *, tune: bool) -> dict[str, Any]:
    import torch

    import accelkit
    from accelkit.bench.torch_models import SyntheticBatches
    from accelkit.torch.tuning import attention, registry

    plan = accelkit.auto_configure(framework="torch", verbose=False)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, facts = build(args, device)
    optimizer = optimizer_for(torch, model, args.model)
    eager_attention = attention.candidate(model)[0] is not None
    trial_steps = registry.trial_steps(1, attention=eager_attention) if tune else 0
    data = SyntheticBatches(batch, trial_steps + args.warmup + args.repeats * args.steps)
    report = accelkit.torch.fit(
        model,
        iter(data) if args.planned_steps else data,
        optimizer,
        loss_fn,
        plan=plan,
        warmup=args.warmup,
        window=args.steps,
        progress=False,
        tokens_per_sample=facts.get("tokens_per_sample"),
        tune=tune,
        steps=args.planned_steps,
    )
    tuned = report.tuning if tune else None
    times = report.series.get("step_time_s", [])[-args.repeats :] or [report.step_time_s]
    mfu = [report.mfu * report.step_time_s / t if report.mfu else None for t in times]
    result = {
        "step_s": times,
        "mfu_reported": mfu,
        "peak_memory_bytes": gpu_compare._peak_memory(torch, device),
        "precision": plan.precision.value,
    }
    if tuned is not None:
        kept = statistics.median(times)
        result.update(
            tuning=tuned,
            tune_seconds=tuned["seconds"],
            tune_overhead_s=tuned["seconds"] - tuned["steps"] * kept,
        )
    return result


def run_lightning(args: argparse.Namespace, *, measured: bool = False) -> dict[str, Any]:
    import lightning as L  # Lightning's convention
    import torch

    import accelkit.lightning
    from accelkit.bench.torch_models import SyntheticBatches

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, _ = build(args, device)
    name = args.model

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, data: Any, index: int) -> Any:
            return forward_loss(self.net, data, loss_fn)

        def configure_optimizers(self) -> Any:
            return optimizer_for(torch, self.net, name)

    marks: list[float] = []

    class Timer(L.Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, data: Any, index: int) -> None:
            if index >= args.warmup and (index - args.warmup) % args.steps == 0:
                _sync(torch, device)
                marks.append(time.perf_counter())

        def on_train_end(self, trainer: Any, module: Any) -> None:
            _sync(torch, device)
            marks.append(time.perf_counter())

    total = args.warmup + args.steps * args.repeats
    callback = (
        accelkit.lightning.AccelkitCallback(warmup=args.warmup, window=max(args.steps // 2, 1))
        if measured
        else None
    )
    callbacks = [Timer()] + ([callback] if callback is not None else [])
    trainer = gpu_compare.lightning_trainer(L, device, total, callbacks)
    trainer.fit(Module(), train_dataloaders=SyntheticBatches(batch, total))
    times = [(b - a) / args.steps for a, b in itertools.pairwise(marks)]
    result = {
        "step_s": times[: args.repeats],
        "peak_memory_bytes": gpu_compare._peak_memory(torch, device),
    }
    if callback is not None and callback.report is not None:
        result.update(
            mfu_callback=callback.report.mfu,
            callback_step_s=callback.report.step_time_s,
            callback_flops_per_step=callback.report.flops_per_step,
        )
    return result


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    runs = {
        "plain_fp32": lambda: run_loop(args, configure=False, autocast=False),
        "auto_configure": lambda: run_loop(args, configure=True, autocast=False),
        "readme_autocast": lambda: run_loop(args, configure=True, autocast=True),
        "lightning_bf16": lambda: run_lightning(args),
        "lightning_accelkit": lambda: run_lightning(args, measured=True),
        "fit": lambda: run_fit(args, tune=False),
        "fit_tune": lambda: run_fit(args, tune=True),
    }
    return runs[args.variant]()


# -- the comparison -------------------------------------------------------------------------


def _child(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    command = [__file__, *gpu_compare.variant_arguments(args, variant)]
    command += ["--smoke"] if args.smoke else []
    command += ["--planned-steps", str(args.planned_steps)] if args.planned_steps else []
    command += ["--seq-len", str(args.seq_len)] if args.seq_len else []
    return gpu_compare.run_child(command, args.timeout)


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Every variant in its own process, one after another; the table so far is written
    to `--out` after each, so a run cut short keeps what it measured."""
    setting = measure_setting(args)
    results: dict[str, Any] = {}
    for variant in args.variants:
        results[variant] = _child(args, variant)
        print(
            f"  {variant}: {'error' if 'error' in results[variant] else 'done'}",
            file=sys.stderr,
            flush=True,
        )
        gpu_compare.write_json(args.out, tabulate(args, setting, results))
    return tabulate(args, setting, results)


def measure_setting(args: argparse.Namespace) -> dict[str, Any]:
    """What every variant shares, measured once here: the step's FLOPs (accelkit's
    counter), samples per step, the model's facts, the datasheet's bf16 peak."""
    import torch

    import accelkit
    from accelkit.profiling.flops_torch import count_train_step_flops
    from accelkit.profiling.mfu import peak

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, facts = build(args, device)
    if loss_fn is None:  # the model computes its loss from the whole batch
        flops = count_train_step_flops(model, batch).total
    else:
        flops = count_train_step_flops(model, batch[0], batch[1], loss_fn).total
    samples = int(
        next(iter(batch.values())).shape[0]
        if isinstance(batch, dict)
        else len(batch[0])  # a tensor's first dimension, or a detection batch's images
    )
    del model, batch
    if device.type == "cuda":  # give the children the memory the count held
        torch.cuda.empty_cache()
    return {
        "flops": flops,
        "samples": samples,
        "facts": facts,
        "datasheet": peak(accelkit.detect(), "bf16"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }


def tabulate(
    args: argparse.Namespace, setting: dict[str, Any], results: dict[str, Any]
) -> dict[str, Any]:
    """The result: one row per variant measured so far, the children's raw output."""
    flops, samples, facts = setting["flops"], setting["samples"], setting["facts"]
    datasheet = setting["datasheet"]
    medians = {k: statistics.median(v["step_s"]) for k, v in results.items() if v.get("step_s")}
    rows = []
    for variant, result in results.items():
        if variant not in medians:
            rows.append({"variant": variant, "error": result.get("error", "no steps")})
            continue
        step = medians[variant]
        row = {
            "variant": variant,
            "step_ms_median": step * 1e3,
            "step_ms_spread": [min(result["step_s"]) * 1e3, max(result["step_s"]) * 1e3],
            "samples_per_s": samples / step,
            "tokens_per_s": (
                samples * facts["tokens_per_sample"] / step
                if "tokens_per_sample" in facts
                else None
            ),
            "mfu_datasheet": (
                flops / step / 1e12 / datasheet.tflops if flops and datasheet.tflops else None
            ),
            "vs_lightning": (
                medians["lightning_bf16"] / step if "lightning_bf16" in medians else None
            ),
            "vs_fit": medians["fit"] / step if "fit" in medians else None,
            "peak_memory_gb": (result.get("peak_memory_bytes") or 0) / 1e9 or None,
        }
        if reported := [m for m in result.get("mfu_reported") or [] if m is not None]:
            row["mfu_reported"] = statistics.median(reported)
        if result.get("mfu_callback") is not None:
            row["mfu_reported"] = result["mfu_callback"]
        for key in ("tune_seconds", "tune_overhead_s"):
            if key in result:
                row[key] = result[key]
        if "tuning" in result:
            tuning = result["tuning"]
            row["tune_chosen"] = tuning["chosen"]
            row["tune_speedup"] = tuning.get("speedup")  # over tune's baseline, paired
            row["tune_speedup_spread"] = tuning.get("speedup_spread")
        rows.append(row)
    return {
        "benchmark": "models_people_train",
        "model": args.model,
        "model_config": facts.get("config"),
        "samples_per_step": samples,
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "planned_steps": args.planned_steps,
        "flops_per_step": flops,
        "device": setting["device"],
        "torch": setting["torch"],
        "datasheet_peak": {"tflops": datasheet.tflops, "source": datasheet.source},
        "rows": rows,
        "raw": results,
    }


def show(result: dict[str, Any]) -> None:
    config = f" ({result['model_config']})" if result.get("model_config") else ""
    print(
        f"{result['model']}{config} on {result['device']}, {result['samples_per_step']} "
        f"samples/step, {result['repeats']} repeats x {result['steps']} steps; FLOPs/step "
        f"{result['flops_per_step'] or 0:.4e}"
    )
    print(
        f"{'variant':<17}{'step ms':>9}{'spread':>17}{'samples/s':>11}{'tokens/s':>11}"
        f"{'MFU':>7}{'MFU rep':>8}{'x Lightning':>12}{'x fit':>7}{'mem GB':>8}  tuning"
    )

    def fmt(value: Any, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    for row in result["rows"]:
        if "error" in row:
            print(f"{row['variant']:<17} error: {row['error'][-400:]}")
            continue
        spread = f"{row['step_ms_spread'][0]:.2f}-{row['step_ms_spread'][1]:.2f}"
        tuning = (
            f"kept {row['tune_chosen']}{_speedup(row)}, trials {row['tune_seconds']:.1f} s "
            f"(+{row['tune_overhead_s']:.1f} s)"
            if "tune_chosen" in row
            else ""
        )
        print(
            f"{row['variant']:<17}{row['step_ms_median']:>9.2f}{spread:>17}"
            f"{row['samples_per_s']:>11,.1f}{fmt(row['tokens_per_s'], ',.0f'):>11}"
            f"{fmt(row['mfu_datasheet'], '.1%'):>7}{fmt(row.get('mfu_reported'), '.1%'):>8}"
            f"{fmt(row['vs_lightning'], '.3f'):>12}"
            f"{fmt(row['vs_fit'], '.2f'):>7}{fmt(row['peak_memory_gb'], '.1f'):>8}  {tuning}"
        )


def _speedup(row: dict[str, Any]) -> str:
    """`` (2.31x baseline, 2.28-2.35)``: what tune's paired rounds measured for the kept
    candidate; empty for a record without them."""
    if not row.get("tune_speedup"):
        return ""
    spread = row.get("tune_speedup_spread")
    within = f", {spread[0]:.2f}-{spread[1]:.2f}" if spread else ""
    return f" ({row['tune_speedup']:.2f}x baseline{within})"


def show_trials(result: dict[str, Any]) -> None:
    """Each tuned variant's candidates as tune measured them, in the same run: the step,
    how many times faster than the candidate it was paired with (its pairs' spread)."""
    for variant, raw in result["raw"].items():
        for trial in (raw.get("tuning") or {}).get("candidates", []):
            step = trial.get("step_seconds")
            compiled = trial.get("compile_seconds")
            paired, spread = trial.get("paired_speedup"), trial.get("paired_spread")
            against = (
                f"  {paired:.3f}x {trial.get('against')}"
                + (f" ({spread[0]:.3f}-{spread[1]:.3f})" if spread else "")
                if paired
                else ""
            )
            print(
                f"  {variant} trial {trial['name']:<28}{trial['status']:>9}"
                f"{'-' if step is None else f'{step * 1e3:.2f} ms':>12}{against}"
                f"{'' if compiled is None else f'  compile {compiled:.1f} s'}"
                f"  {trial.get('why') or ''}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="hf-gpt2")
    parser.add_argument("--batch-size", type=int, default=None, help="default: per model")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per variant")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one, internal
    parser.add_argument("--timeout", type=int, default=300, help="seconds per variant")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny models, a few steps, CPU: checks the script, not speed",
    )
    parser.add_argument(
        "--planned-steps",
        type=int,
        default=None,
        help="the run length the fits are told (steps=N, data without a len()), so that "
        "tune tries what pays only in long runs (max-autotune); the data still ends "
        "after the benchmark's steps",
    )
    parser.add_argument(
        "--seq-len", type=int, default=None, help="tokens per sample of the Llamas (2048)"
    )
    parser.add_argument("--out", help="write the results as JSON here (after each variant)")
    args = parser.parse_args(argv)
    if args.model == "fasterrcnn" and importlib.util.find_spec("torchvision") is None:
        print(f"--model {args.model} needs torchvision: pip install torchvision", file=sys.stderr)
        return 2
    if args.smoke:
        args.steps, args.warmup, args.repeats = 2, 1, 2
    if args.variant:
        print(json.dumps(run_variant(args)))
        return 0
    result = compare(args)
    show(result)
    show_trials(result)
    gpu_compare.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
