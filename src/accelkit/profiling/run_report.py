"""`RunReport`: what a profiled run measured, as plain data that saves to JSON.

The profiling stage fills it (`accelkit.profiling.assemble`), the advisor reads
it, `accelkit.report.assemble` puts the advice in, and `accelkit.report.render`
draws it; the record itself calls none of them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from accelkit.hardware import environment
from accelkit.profiling import report_schema
from accelkit.utils.files import write_atomic
from accelkit.utils.log import EVERY_RANK

logger = logging.getLogger("accelkit")

SCHEMA = "accelkit.run_report/1"


@dataclasses.dataclass
class RunReport:
    """The measurements of one profiled run (on this process's devices).

    Every figure that could not be measured is None, with the reason in
    `notes[field]`. Steady-state figures exclude the warm-up steps.

    Attributes:
        samples_per_second: steady-state training throughput of this process.
        tokens_per_second: token positions the model processed per second, padding
            included (the (batch, sequence) shape of the token ids, or samples/s x
            `tokens_per_sample`), when known.
        real_tokens_per_second: the same without the padding: the ones of the batches'
            `attention_mask`. None, with a note, when the token ids came without one.
        flops_per_step: model FLOPs of one training step (forward + backward, once),
            counted (`flops_method` says how) or given by the user. The forward that
            activation checkpointing recomputes in backward is not in it (PaLM
            appendix B: model FLOPs exclude rematerialisation).
        hardware_flops_per_step: the FLOPs the hardware ran for one step: the model's
            and the recomputed forward. Equal to flops_per_step when nothing is
            recomputed; None (with a note) when flops_per_step was given by the user.
        achieved_tflops: flops_per_step x steady steps / steady seconds / 1e12.
        hardware_tflops: the same with hardware_flops_per_step.
        peak_tflops: the dense datasheet peak for `matmul_dtype`, times the devices used.
        peak_source: the datasheet row's source, or why there is none.
        mfu: achieved_tflops / peak_tflops: model FLOPs utilisation.
        hfu: hardware_tflops / peak_tflops: hardware FLOPs utilisation (PaLM appendix B),
            above mfu by the recomputed forward's share.
        float8_share: the share of flops_per_step that ran in float8 (torchao's
            Float8Linear: forward, grad-input and grad-weight matmuls of each converted
            ``nn.Linear``); None where none did, with no note.
        precision_mfu: the time the step's FLOPs would take at the peaks they could
            reach (the float8 ones at the fp8 dense peak, the rest at peak_tflops) over
            the step time: mfu x (1 - float8_share + float8_share x peak / fp8 peak),
            at most mfu. mfu itself stays against peak_tflops, so that runs compare
            across precisions (`accelkit.profiling.metrics.float8_figures`). None
            without float8, and, with a note, without the fp8 peak.
        calibrated_tflops, mfu_calibrated: the same against a matmul rate measured
            on the device at hand (`calibrate=True`).
        input_wait_share: share of steady-state time spent waiting for input.
        gpu_utilization: mean NVML utilisation (percent) over the steady state.
        peak_memory_bytes: the framework's peak device memory allocation.
        world_size, global_samples_per_second, scaling_efficiency: across the devices of
            a data-parallel run (a single device: 1, samples_per_second, None).
        ranks, slowest_rank: each process's figures (throughput, step time, input
            wait) and the rank with the longest steps.
        single_device_samples_per_second: the reference scaling efficiency is against.
        communication_s, communication_share: seconds per step this process waited for
            the gradient all-reduce after its backward pass (the part DDP did not overlap
            with it), and their share of the step; ``facts["communication"]`` says how it
            was measured, how long an all-reduce was in flight, the buckets and gradient
            bytes (PyTorch DDP runs; `accelkit.torch.distributed.communication`).
        run_seconds, training_seconds, evaluation_seconds, other_seconds: the run's wall
            time and its three phases: training steps (warm-up included), evaluation,
            and the rest (epoch boundaries, checkpoints, other callbacks). Every training
            figure above (step time, throughput, MFU, input wait, GPU figures) comes
            from the training steps alone.
        evaluation_share: evaluation_seconds / run_seconds.
        losses, eval_losses: the mean training loss of each epoch, and the mean loss of
            each evaluation where the door evaluates (``accelkit.torch.fit(eval_loader=)``).
        advice: the advisor's verdicts (`Advice.to_dict()`), most important first.
        facts: what the meters noticed for the advisor (layer sizes, loader settings,
            loss scale...; `accelkit.advisor.context` lists them).
        history, epoch, params: what Keras' `History` holds (`accelkit.keras.fit`), so
            ``history = accelkit.keras.fit(...)`` works where ``model.fit``'s return did:
            ``history.history["loss"]``, ``history.epoch``.
        trained_model: the model that trained (`accelkit.keras.fit`; not saved).
        series: the run over time, for charts (`accelkit.report.html`), each list at
            most 512 points (neighbouring windows averaged; the first and last kept). Per
            steady-state window: ``time_s`` (its end, seconds since the run started),
            ``step``, ``step_time_s``, ``samples_per_second``, ``input_wait_s`` (per
            step). Per NVML tick, on its own axis ``gpu_time_s``: ``gpu_utilization``
            (percent, mean of the devices), ``gpu_memory_used_bytes`` (the largest),
            ``power_w``, ``sm_clock_mhz`` (means). Empty when nothing was measured.
        tuning: what `accelkit.torch.fit(tune=...)` measured and kept (see
            `accelkit.torch.tuning.trials.TuneResult.to_dict`: decision, chosen, speedup, seconds,
            candidates with their median step time, spread, compile seconds and status);
            None when the run was not tuned.
    """

    framework: str
    model: str
    device: str
    precision: str
    matmul_dtype: str
    epochs: int | None = None
    steps: int = 0
    warmup_steps: int = 0
    warmup_seconds: float | None = None
    steady_steps: int = 0
    steady_seconds: float | None = None
    step_time_s: float | None = None
    batch_size: float | None = None
    samples_per_second: float | None = None
    tokens_per_second: float | None = None
    real_tokens_per_second: float | None = None
    flops_per_step: float | None = None
    flops_method: str | None = None
    hardware_flops_per_step: float | None = None
    achieved_tflops: float | None = None
    hardware_tflops: float | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    mfu: float | None = None
    hfu: float | None = None
    float8_share: float | None = None
    precision_mfu: float | None = None
    calibrated_tflops: float | None = None
    calibration_method: str | None = None
    mfu_calibrated: float | None = None
    input_wait_share: float | None = None
    gpu_utilization: float | None = None
    gpu_memory_used_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    peak_memory_bytes: int | None = None
    world_size: int = 1
    global_samples_per_second: float | None = None
    scaling_efficiency: float | None = None
    # Per-process figures of a data-parallel run (accelkit.profiling.world).
    ranks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    slowest_rank: int | None = None
    single_device_samples_per_second: float | None = None
    communication_s: float | None = None
    communication_share: float | None = None
    run_seconds: float | None = None
    training_seconds: float | None = None
    evaluation_seconds: float | None = None
    other_seconds: float | None = None
    evaluation_share: float | None = None
    losses: list[float] = dataclasses.field(default_factory=list)
    eval_losses: list[float] = dataclasses.field(default_factory=list)
    interrupted: bool = False
    advice: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)
    hardware: dict[str, Any] = dataclasses.field(default_factory=dict)
    plan: dict[str, Any] = dataclasses.field(default_factory=dict)
    versions: dict[str, str | None] = dataclasses.field(default_factory=dict)
    # What Keras' History holds, so the report stands in for it (accelkit.keras.fit):
    # metric -> one value per epoch, the epoch numbers, and the fit's parameters.
    history: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    epoch: list[int] = dataclasses.field(default_factory=list)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    tuning: dict[str, Any] | None = None
    series: dict[str, list[float | None]] = dataclasses.field(default_factory=dict)
    # The model that trained (accelkit.keras.fit may have given it a float32 head);
    # not serialised.
    trained_model: Any = dataclasses.field(default=None, repr=False, compare=False)

    def note(self, field: str, reason: str) -> None:
        """Record why `field` is missing (or how it was obtained)."""
        self.notes[field] = reason if field not in self.notes else f"{self.notes[field]}; {reason}"

    def to_dict(self) -> dict[str, Any]:
        data = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "trained_model"
        }
        data["schema"] = SCHEMA
        return data

    def save(self, path: str | os.PathLike[str], *, every_rank: bool = False) -> bool:
        """Write the report as JSON (render it later with `accelkit report PATH`).

        The file is written whole or not at all: to a temporary file beside it, then
        renamed over it, so an error (a full disk, an unwritable folder) leaves any
        earlier report at `path` as it was. Values are made JSON-safe: numpy scalars
        become numbers, NaN and infinity become null with a note naming the field.

        Under torchrun every rank holds the whole run's report, so only rank 0
        writes (ranks writing one path would overwrite each other mid-write), and the
        other ranks log that they did not; ``every_rank=True`` writes on every rank,
        e.g. to a path with the rank in it. Returns True when this process wrote the file.

        As with ``open(path, "w")``, the file keeps the mode of the report it replaces,
        or gets the umask's; a report this process may not write (``chmod 444``) is
        refused; a symlink is written through to the file it points to; a path that is
        not a regular file (a FIFO, a device, a symlink to one) is refused
        (`accelkit.utils.files.write_atomic`).

        Raises:
            PermissionError: the report at `path`, or its folder, may not be written.
            OSError: the file could not be written, or `path` is not a regular file;
                the error names `path` and the earlier file is untouched.
        """
        if not every_rank and not environment.is_rank_zero():
            logger.info(
                "report not saved to %s on rank %d: rank 0 saves the whole run's "
                "report (save(path, every_rank=True) writes on every rank)",
                path,
                environment.rank(),
                extra={EVERY_RANK: True},
            )
            return False
        data, replaced = _json_safe(self.to_dict())
        if replaced:
            data["notes"] = {
                **data.get("notes", {}),
                "saved": "not finite, saved as null: " + ", ".join(replaced),
            }
        write_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n")
        return True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunReport:
        """The report `to_dict` gave, each field checked against its annotation above
        (`accelkit.profiling.report_schema`); keys of a newer report are ignored.

        Raises:
            ValueError: `data` is not a mapping, a required field is missing, or a
                field has the wrong type; the message names the field.
        """
        return cls(**report_schema.check_report(data, cls))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunReport:
        """The report saved at `path` (`save`), checked field by field.

        Raises:
            OSError: the file cannot be read.
            ValueError: it is not JSON, not a run report, or a field is missing or of
                the wrong type; the message names the file and the field.

        Example:
            >>> RunReport.load("run.json").samples_per_second  # doctest: +SKIP
            1234.5
        """
        data = report_schema.read_json(path)
        schema = data.get("schema") if isinstance(data, Mapping) else None
        if schema != SCHEMA:
            found = (
                f"schema {schema!r}"
                if isinstance(data, Mapping)
                else f"it holds {report_schema.describe(data)}, not an object"
            )
            raise ValueError(
                f"{os.fspath(path)} is not an accelkit run report ({found}, expected {SCHEMA!r})"
            )
        try:
            return cls.from_dict(data)
        except ValueError as error:
            raise ValueError(f"{os.fspath(path)}: {error}") from None

    def __str__(self) -> str:
        """The report's table (``print(report)``, ``accelkit report``): `GIVEN.table`."""
        return GIVEN.table(self)

    def to_html(self) -> str:
        """The report as one self-contained HTML page: charts of the run, plan, advice.

        Example:
            >>> Path("run.html").write_text(report.to_html())  # doctest: +SKIP
        """
        return GIVEN.html(self)


def _one_line(report: RunReport) -> str:
    return f"RunReport({report.framework}, {report.steps} steps)"


def _no_page(report: RunReport) -> str:
    raise RuntimeError("a report's HTML page is given by `import accelkit`")


@dataclasses.dataclass
class Given:
    """What the stage above gives every report, so that the record stays data that the
    report reads and never calls: its table (`accelkit.report.render.render_run`) and its
    HTML page (`accelkit.report.html.render_html`), set by `accelkit/__init__.py`, which
    Python runs before any accelkit module. Until then a report prints as one line.
    """

    table: Callable[[RunReport], str] = _one_line
    html: Callable[[RunReport], str] = _no_page


GIVEN = Given()


def _json_safe(value: Any, where: str = "") -> tuple[Any, list[str]]:
    """`value` with numpy scalars as numbers, tuples as lists, keys as strings, and NaN or
    infinity as None; and the fields (dotted paths) that were not finite."""
    replaced: list[str] = []
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            out[str(key)], more = _json_safe(item, f"{where}.{key}" if where else str(key))
            replaced += more
        return out, replaced
    if isinstance(value, (list, tuple)):
        out_list = []
        for index, item in enumerate(value):
            safe, more = _json_safe(item, f"{where}[{index}]")
            out_list.append(safe)
            replaced += more
        return out_list, replaced
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (str, bytes)):
        try:
            value = value.item()  # a numpy (or framework) scalar
        except (TypeError, ValueError):
            return str(value), replaced
    if isinstance(value, float) and not math.isfinite(value):
        return None, [where]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value, replaced
    return str(value), replaced
