"""What differs between two runs' set-ups: hardware, software, the plan, what tune kept,
batch and shapes, the model. Each is read from the report as it was saved; what a run
does not say is None and differs only from a run that does."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from accelkit.hardware.info import HardwareInfo
from accelkit.profiling.run_report import RunReport
from accelkit.report.comparison.types import Change
from accelkit.report.render import describe_hardware
from accelkit.utils import units

_Items = dict[str, str | None]


def differences(base: RunReport, new: RunReport) -> tuple[Change, ...]:
    """Every set-up item whose text differs between the runs, by group."""
    found: list[Change] = []
    for group, items in _GROUPS:
        before, after = items(base), items(new)
        found += [
            Change(group, name, before.get(name), after.get(name))
            for name in dict.fromkeys([*before, *after])
            if before.get(name) != after.get(name)
        ]
    return tuple(found)


def hardware(run: RunReport) -> _Items:
    """The GPUs, their count, the driver and its CUDA version, the devices the run used."""
    info = HardwareInfo.from_dict(run.hardware) if run.hardware else None
    items: _Items = {"device": run.device, "devices used": str(run.world_size)}
    if info is None:
        return items
    builds = {b.framework: " ".join(_present(b.version, b.detail)) for b in info.frameworks}
    return {
        **items,
        "GPU": describe_hardware(info),
        "GPU count": str(len(info.gpus)),
        "driver": info.driver_version,
        "CUDA (driver)": info.cuda_driver_version,
        "CPU cores": _text(info.cpu_count),
        **{f"{name} build": text or None for name, text in builds.items()},
    }


def software(run: RunReport) -> _Items:
    """The versions the run recorded: accelkit, Python and the frameworks and libraries
    it used (torch or TensorFlow, Keras, transformers, Lightning)."""
    return dict(sorted(run.versions.items()))


def run_settings(run: RunReport) -> _Items:
    """The framework and the precision that ran."""
    return {
        "framework": run.framework,
        "precision": run.precision,
        "matmul dtype": run.matmul_dtype,
        "float8 share": _share(run.float8_share),
        "interrupted": "yes" if run.interrupted else None,
    }


def plan(run: RunReport) -> _Items:
    """The plan's choices and each setting's value (with its status where it was not
    applied as planned)."""
    saved: Mapping[str, Any] = run.plan or {}
    items: _Items = {
        name: _text(saved.get(name)) for name in ("precision", "distribution", "compile")
    }
    for setting in saved.get("settings") or []:
        status = setting.get("status")
        shown = _text(setting.get("value"))
        if status and status not in ("applied", "planned"):
            shown = f"{shown} ({status})"
        items[str(setting.get("key"))] = shown
    return items


def tune(run: RunReport) -> _Items:
    """What tune kept, and how much faster it measured it; nothing for a run not tuned."""
    tuning = run.tuning or {}
    speedup = tuning.get("speedup")
    return {
        "kept": _text(tuning.get("chosen")) if tuning else "not tuned",
        "speed-up": f"{speedup:.2f}x" if isinstance(speedup, (int, float)) else None,
    }


def shapes(run: RunReport) -> _Items:
    """Batch size, tokens per sample, steps per epoch and the matmul layers' shapes."""
    tokens = (
        run.tokens_per_second / run.samples_per_second
        if run.tokens_per_second and run.samples_per_second
        else None
    )
    layers = run.facts.get("layers") or []
    return {
        "batch size": _text(run.batch_size),
        "tokens per sample": f"{tokens:,.0f}" if tokens else None,
        "steps per epoch": _text(run.facts.get("steps_per_epoch")),
        "world size": str(run.world_size),
        "matmul layers": _layers(layers) if isinstance(layers, list) and layers else None,
    }


def model(run: RunReport) -> _Items:
    """The model's name, parameters and FLOPs per step (and how they were counted)."""
    parameters = run.facts.get("parameters")
    return {
        "model": run.model,
        "parameters": f"{parameters:,}" if isinstance(parameters, int) else None,
        "FLOPs per step": units.flops(run.flops_per_step) if run.flops_per_step else None,
        "FLOPs counted by": run.flops_method,
    }


_GROUPS: tuple[tuple[str, Callable[[RunReport], _Items]], ...] = (
    ("hardware", hardware),
    ("software", software),
    ("run", run_settings),
    ("plan", plan),
    ("tune", tune),
    ("shapes", shapes),
    ("model", model),
)


def _layers(layers: Iterable[Any]) -> str:
    """Matmul layers as ``count: in->out, ...`` (the first few), so two models of one
    architecture and different widths differ here."""
    shown = []
    for layer in layers:
        dims = layer.get("dims") if isinstance(layer, Mapping) else None
        if isinstance(dims, Mapping) and dims:
            shown.append("x".join(str(v) for v in dims.values()))
    count = len(list(layers)) if not isinstance(layers, list) else len(layers)
    more = ", ..." if len(shown) > 4 else ""
    return f"{count}: {', '.join(shown[:4])}{more}" if shown else str(count)


def _present(*parts: str | None) -> list[str]:
    return [p for p in parts if p]


def _share(value: float | None) -> str | None:
    return f"{value:.1%}" if value is not None else None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return f"{value:,.0f}"
    return str(value)
