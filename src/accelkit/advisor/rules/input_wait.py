"""Input-bound: the training loop waits for its next batch.

The meters time the wait for each batch (the gap between steps, or the time
blocked in the iterator), so the share of step time it takes is measured, and
removing it speeds the step up by at most 1 / (1 - share). The figure claimed is
also bounded by what the suggested change can do (`types.removing_share`):

- N loader workers where there were W: batches are prepared at most N / W times
  as fast; from none (W = 0, the training process loads) they also overlap the
  step, which then takes at least max(compute, loading / N): at most N + 1 times
  less, reached when the two balance.
- tf.data's parallel map: the same, with one call per CPU core.
- nothing left to parallelise (workers on every core, a pipeline that prefetches):
  the gain depends on how much cheaper a batch gets to prepare; 2x is claimed,
  a batch half as costly (a loader-bound step is as long as preparing a batch).
- a DataLoader over a ``TensorDataset`` (the loader fact's ``dataset``): the samples are
  in memory, so workers would only copy them between processes; fetching a batch with
  one index instead of one ``__getitem__`` per sample and a collate is the change, and
  2x is claimed for it, as above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity, removing_share, removing_share_text

HIGH = 0.20  # a fifth of every step idle: the pipeline is the bottleneck
MODERATE = 0.05
_PYDATASET_WORKERS = 8  # what the Keras action suggests
_UNSEEN = (
    "the loader's settings were not recorded (a Meter does not see the loader: "
    "meter.facts.update(accelkit.torch.measuring.facts.loader_facts(loader)) records them)"
)


@needs(
    "figure:input_wait_share",
    optional=("figure:step_time_s", "fact:loader"),
    evidence={
        "input_wait_share": None,
        "step_time_ms": "figure:step_time_s",
        "input_wait_per_step_ms": "figure:step_time_s",
        "loader.*": "fact:loader",
    },
)
def input_bound(ctx: Context) -> Advice | None:
    """Fires when `input_wait_share` >= 5% (info) or >= 20% (warning).

    Example:
        >>> ctx = Context.build(None, None, {"input_wait_share": 0.35, "step_time_s": 0.02})
        >>> round(input_bound(ctx).speedup, 2)
        1.54
    """
    share = ctx.get("input_wait_share")
    if share is None or share < MODERATE:
        return None
    step = ctx.get("step_time_s")
    loader = ctx.fact("loader")  # None: not seen, so nothing is said about its settings
    evidence: dict[str, Any] = {"input_wait_share": round(share, 4)}
    if step:
        evidence["step_time_ms"] = round(step * 1e3, 3)
        evidence["input_wait_per_step_ms"] = round(share * step * 1e3, 3)
    evidence.update({f"loader.{k}": v for k, v in (loader or {}).items() if v is not None})
    cap, bound = _cap(ctx, loader)
    speedup = removing_share(share, cap)
    high = share >= HIGH
    return Advice(
        id="input_bound",
        severity=Severity.WARNING if high else Severity.INFO,
        title=(
            f"{'input-bound' if high else 'input wait'}: {share:.0%} of step time is spent "
            "waiting for the next batch"
        ),
        evidence=evidence,
        action=_torch_action(ctx, loader) if ctx.torch else _tf_action(loader),
        expected_gain=removing_share_text(
            share, cap, "the wait (the measured input-wait share)", bound
        ),
        speedup=speedup,
    )


def _suggested_workers(ctx: Context) -> int:
    """One worker per CPU core left over after one per GPU process; 2 when the count is
    unknown (a what-if or older report), said as such rather than a made-up core count."""
    cpus = ctx.hardware.cpu_count
    return min(max(cpus // max(ctx.hardware.gpu_count, 1) - 1, 2), 16) if cpus else 2


def _cap(ctx: Context, loader: Mapping[str, Any] | None) -> tuple[float, str]:
    """The most the suggested change can speed the step up, and why (module docstring).

    With the loader unseen its workers are unknown; the bound is then the one from none,
    the largest the suggested workers can give, and the text says it assumes so."""
    if loader is None:
        added = _suggested_workers(ctx) if ctx.torch else ctx.hardware.cpu_count or 2
        return float(added + 1), (
            f"{added} loading processes overlap the step, which then "
            f"takes at least max(compute, loading / {added}), if it "
            "loads in the training process now: "
            + (
                "the loader's settings were not recorded"
                if ctx.torch
                else "the input pipeline was not recorded"
            )
        )
    kind = loader.get("type")
    if ctx.torch and _in_memory(loader):
        return 2.0, (
            "claimed for a batch half as costly to fetch: one index per batch instead of "
            "a __getitem__ per sample and a collate (not measured); workers would not help "
            "a TensorDataset, in memory already"
        )
    if ctx.torch:
        workers = 0 if kind not in (None, "DataLoader") else int(loader.get("num_workers") or 0)
        added = _suggested_workers(ctx)
    elif kind == "PyDataset":
        workers, added = int(loader.get("workers") or 0), _PYDATASET_WORKERS
    elif kind != "tf.data.Dataset" or (loader.get("map") and not loader.get("parallel_map")):
        workers, added = 0, ctx.hardware.cpu_count or 2
    else:
        return 2.0, (
            (
                "the map already runs in parallel"
                if loader.get("map")
                else "no map to run in parallel"
            )
            + ": prefetching overlaps loading with the step, which then takes at least "
            "max(compute, loading); what a cache saves is not measured"
        )
    if added <= workers:
        return 2.0, (
            "nothing left to run in parallel; claimed for a batch half as costly to "
            "prepare (a loader-bound step lasts as long as preparing a batch)"
        )
    if workers == 0:
        return float(added + 1), (
            f"{added} loading processes overlap the step, which then "
            f"takes at least max(compute, loading / {added})"
        )
    return added / workers, f"{added} loading processes instead of {workers}"


def _in_memory(loader: Mapping[str, Any]) -> bool:
    """A DataLoader over a `TensorDataset`: its samples are tensors in memory already."""
    return loader.get("type") in (None, "DataLoader") and loader.get("dataset") == "TensorDataset"


def _batched_fetch(ctx: Context, loader: Mapping[str, Any]) -> str:
    """The action for a DataLoader over a TensorDataset: workers cannot help (there is
    nothing to prepare, and they would copy each batch between processes); one index per
    batch instead of a `__getitem__` per sample and a collate can."""
    batch = loader.get("batch_size") or "B"
    pin = ", pin_memory=True" if ctx.hardware.gpus else ""
    return (
        "sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(dataset), "
        f"batch_size={batch}, drop_last=False)\n"
        f"DataLoader(dataset, sampler=sampler, batch_size=None{pin})\n"
        "the data is a TensorDataset, in memory already: loader workers would not prepare "
        "it faster, only copy each batch between processes; the sampler hands the dataset "
        "a batch of indices, which TensorDataset fetches with one index per tensor instead "
        "of one __getitem__ per sample and a collate (or keep the tensors on the GPU and "
        "index them there)"
    )


def _torch_action(ctx: Context, loader: Mapping[str, Any] | None) -> str:
    cpus = ctx.hardware.cpu_count
    suggested = _suggested_workers(ctx)
    pin = bool(ctx.hardware.gpus)  # page-locked buffers only help host-to-GPU copies
    if loader is None:
        return (
            f"DataLoader(dataset, batch_size=..., num_workers={suggested}"
            f"{', pin_memory=True' if pin else ''}, persistent_workers=True, "
            f"prefetch_factor=4)\n{_UNSEEN}: with fewer workers than that, about one per "
            "free CPU core "
            + (f"({cpus} cores here)" if cpus else "(CPU count unknown: start at 2)")
            + "; workers survive between epochs; 4 batches queued per worker"
        )
    if loader.get("type") not in (None, "DataLoader"):
        return (
            f"DataLoader(dataset, batch_size=..., num_workers={suggested}"
            f"{', pin_memory=True' if pin else ''}, persistent_workers=True, "
            f"prefetch_factor=4)\ninstead of {loader['type']}: batches are then prepared "
            "in worker processes while the model trains"
        )
    if _in_memory(loader):
        return _batched_fetch(ctx, loader)
    workers = int(loader.get("num_workers") or 0)
    batch = loader.get("batch_size")
    args = [f"batch_size={batch}" if batch else "batch_size=..."]
    why = []
    if workers < suggested:
        args.append(f"num_workers={suggested}")
        why.append(
            f"num_workers is {workers}: about one worker per free CPU core "
            + (f"({cpus} cores here)" if cpus else "(CPU count unknown: start at 2)")
        )
    else:
        args.append(f"num_workers={workers}")
        why.append(
            f"{workers} workers already: make __getitem__ cheaper (decode once and "
            "cache, move augmentation to the GPU)"
        )
    if pin and not loader.get("pin_memory"):
        args.append("pin_memory=True")
        why.append("pinned buffers make host-to-device copies asynchronous")
    if not loader.get("persistent_workers"):
        args.append("persistent_workers=True")
        why.append("workers survive between epochs")
    if (loader.get("prefetch_factor") or 2) < 4:
        args.append("prefetch_factor=4")
        why.append("4 batches queued per worker")
    return f"DataLoader(dataset, {', '.join(args)})\n" + "; ".join(why)


def _tf_action(loader: Mapping[str, Any] | None) -> str:
    if loader is None:
        return (
            "the input pipeline was not recorded: with tf.data, "
            ".map(fn, num_parallel_calls=tf.data.AUTOTUNE), .cache() after the expensive "
            "steps and .prefetch(tf.data.AUTOTUNE) last; with arrays or a generator, feed "
            "model.fit such a tf.data pipeline"
        )
    kind = loader.get("type")
    if kind == "tf.data.Dataset":
        steps = []
        if loader.get("map") and not loader.get("parallel_map"):
            steps.append(".map(fn, num_parallel_calls=tf.data.AUTOTUNE)")
        if not loader.get("cache"):
            steps.append(
                ".cache() after the expensive, deterministic steps (to a file: "
                ".cache(path) when it does not fit in memory)"
            )
        if not loader.get("prefetch"):
            steps.append(".prefetch(tf.data.AUTOTUNE) as the last step")
        steps = steps or [
            (
                ".interleave(..., num_parallel_calls=tf.data.AUTOTUNE) for file "
                "reading, and move per-sample Python (tf.py_function) into TF ops"
            )
        ]
        return "tf.data: dataset" + "".join(f"\n  {s}" for s in steps)
    if kind == "PyDataset":
        return (
            f"keras.utils.PyDataset(workers={_PYDATASET_WORKERS}, use_multiprocessing=True, "
            "max_queue_size=16), "
            "or a tf.data pipeline with .map(num_parallel_calls=tf.data.AUTOTUNE) and "
            ".prefetch(tf.data.AUTOTUNE)"
        )
    return (
        "feed model.fit a tf.data pipeline: tf.data.Dataset.from_tensor_slices(...)"
        ".map(fn, num_parallel_calls=tf.data.AUTOTUNE).cache().batch(B)"
        ".prefetch(tf.data.AUTOTUNE)"
    )
