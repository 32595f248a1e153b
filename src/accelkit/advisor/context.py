"""`Context`: the plain data every rule reads — hardware, plan, measured figures, facts.

The measured figures are a `RunReport` as a mapping (`report.to_dict()`): the
attribute names of `RunReport` are the keys, and its `facts` entry holds what
the meters noticed about the model and the loop, once per run:

=========================  ===================================================================
fact                       what it is
=========================  ===================================================================
``layers``                 matmul layers: ``[{"name", "type", "dims": {name: int}}]``
``batch_size``             samples in the first batch of this process
``steps_per_epoch``        steps in one full pass over the data, when known
``parameters``             trainable parameter count; ``parameter_bytes`` their size
``model_state_bytes``      weights + gradients + optimizer state, in bytes
``loader``                 the input pipeline: ``{"type", ...settings}``; ``"dataset"``: the
                           DataLoader's dataset class (``"TensorDataset"``), where recorded
``data_parallel``          the model is wrapped in ``torch.nn.DataParallel``
``distributed``            DistributedDataParallel / a process group is in use
``devices_used``           devices this process trains on (Keras replicas)
``visible_gpus``           GPUs the framework can see
``compiled``               torch.compile / XLA ``jit_compile`` was on (``accelkit.torch.fit``,
                           Keras; a PyTorch ``Meter`` leaves it out)
``model_compiled``         the PyTorch model handed to the meter is a ``torch.compile`` module
``optimizer``              the PyTorch optimizer's step: ``{"type", "implementation":
                           "fused" | "foreach" | "for-loop", "foreach_available",
                           "fused_available", "set_by_user", "parameter_tensors",
                           "param_groups"}`` (`accelkit.torch.measuring.facts.optimizer_facts`)
``keras_policy``           the global Keras dtype policy
``keras_layers_off_policy``  matmul layers whose compute dtype is not the policy's
``keras_matmul_layers``    matmul layers counted (a ``MultiHeadAttention`` once)
``float_id_inputs``        Keras integer lookups fed float ids through a casting layer:
                           ``[{"layer", "embedding", "input_dim", "input", "input_dtype",
                           "input_shape", "cast_by", "cast_dtype"}]``
``ids_over_float16``       the first batch's whole numbers past a 16-bit float's exact
                           range on such an input: ``{"input", "max_id", "changed", ...}``
``float16_outputs``        Keras outputs computed in float16/bfloat16 (no float32 head)
``float16_outputs_in_call``  those outputs come from a subclassed model's ``call`` (found
                           by tracing it at the first batch): the head cannot be added
``custom_train_step``      a Keras model with its own ``train_step``: ``{"model_class",
                           "scales_loss", "compensated"}`` (`accelkit.frameworks.keras_train_step`)
``weights_finite``         every Keras weight finite at the end (a NaN loss with finite
                           weights is an overflow in the loss, not a broken model)
``half_integer_inputs``    PyTorch batch tensors in float16/bfloat16 holding only whole
                           numbers past the dtype's exact range: ``[{"input", "dtype", "max"}]``
``loss_scale``             ``{"initial": float, "history": [[step, scale], ...]}`` (fp16)
``first_nonfinite_loss_step``  the first window boundary where the loss was NaN/inf
``run_seconds``            wall time of the whole run
=========================  ===================================================================

Any of them may be missing (a hand-written loop, an older report): rules fire
only on the evidence they have. Besides the facts, ``m["tuning"]`` holds what
``tune`` measured on the run's model (None when not tuned; `accelkit.advisor.tuning`
reads it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from accelkit import specs
from accelkit.hardware import capabilities
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning.types import Plan
from accelkit.specs.types import GpuSpec

# MFU assumed where none was measured on the GPU in question (a CPU run, a what-if
# GPU): well-tuned large-model training reaches 40-50% (PaLM reports 46%, appendix B).
DEFAULT_MFU = 0.4


@dataclasses.dataclass(frozen=True)
class Context:
    """What a rule sees. Build with `Context.build(hardware, plan, measurements)`.

    Attributes:
        hardware: the hardware to advise for (the run's, or a what-if GPU's).
        plan: the plan in force (or the what-if plan); None when unknown.
        m: the measured figures (a `RunReport` as a mapping).
        facts: ``m["facts"]``.
        framework: ``"torch"`` or ``"tensorflow"``.
        measured_here: True when `m` was measured on `hardware`'s first GPU (or on
            the CPU and `hardware` has none). Device figures (MFU, utilisation) of a
            run measured elsewhere say nothing about `hardware`, so rules skip them.
    """

    hardware: HardwareInfo
    plan: Plan | None
    m: Mapping[str, Any]
    facts: Mapping[str, Any]
    framework: str
    measured_here: bool

    @classmethod
    def build(
        cls, hardware: HardwareInfo | None, plan: Plan | None, measurements: Mapping[str, Any] | Any
    ) -> Context:
        m = measurements.to_dict() if hasattr(measurements, "to_dict") else dict(measurements)
        if plan is None and m.get("plan"):  # the plan the run used
            plan = Plan.from_dict(m["plan"])
        if hardware is None:
            hardware = (
                plan.hardware
                if plan is not None
                else HardwareInfo.from_dict(m.get("hardware") or {})
            )
        framework = plan.framework.value if plan is not None else str(m.get("framework") or "torch")
        return cls(
            hardware=hardware,
            plan=plan,
            m=m,
            facts=dict(m.get("facts") or {}),
            framework=framework,
            measured_here=_measured_on(hardware, m),
        )

    # -- figures ------------------------------------------------------------------------

    def get(self, name: str, default: Any = None) -> Any:
        """A measured figure (None when it was not measured)."""
        value = self.m.get(name)
        return default if value is None else value

    def fact(self, name: str, default: Any = None) -> Any:
        value = self.facts.get(name)
        return default if value is None else value

    @property
    def torch(self) -> bool:
        return self.framework == "torch"

    @property
    def gpu(self) -> GpuInfo | None:
        return self.hardware.gpus[0] if self.hardware.gpus else None

    @property
    def spec(self) -> GpuSpec | None:
        gpu = self.gpu
        return None if gpu is None else specs.for_gpu(gpu)

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        gpu = self.gpu
        if gpu is None:
            return None
        if gpu.compute_capability is not None:
            return tuple(gpu.compute_capability)  # type: ignore[return-value]
        spec = self.spec
        return None if spec is None else spec.compute_capability

    @property
    def precision(self) -> str:
        if self.plan is not None:
            return self.plan.precision.value
        return str(self.m.get("precision") or "fp32")

    @property
    def matmul_dtype(self) -> str:
        """The dtype the matmuls run in on `hardware`: measured when the run was
        there, else what the plan implies."""
        measured = self.m.get("matmul_dtype")
        if self.measured_here and measured:
            return str(measured)
        if self.plan is not None:
            return self.plan.matmul_dtype
        return capabilities.matmul_dtype(self.precision, tf32_enabled=False)

    @property
    def mfu(self) -> float | None:
        """MFU measured on `hardware` against its datasheet peak; None otherwise."""
        return self.get("mfu") if self.measured_here else None

    @property
    def mfu_measured(self) -> tuple[float, str] | None:
        """The MFU measured on `hardware` and what it is against: the datasheet peak, else
        the matmul rate measured on the device (``calibrate=True``); None when neither."""
        if self.mfu is not None:
            return self.mfu, "the datasheet peak"
        if self.measured_here and self.get("mfu_calibrated") is not None:
            return self.get("mfu_calibrated"), "the measured matmul rate"
        return None

    @property
    def gpu_memory_bytes(self) -> int | None:
        gpu = self.gpu
        if gpu is not None and gpu.memory_bytes:
            return int(gpu.memory_bytes)
        spec = self.spec
        return None if spec is None or spec.memory_gb is None else int(spec.memory_gb * 1e9)

    @property
    def batch_size(self) -> int | None:
        value = self.fact("batch_size", self.get("batch_size"))
        return None if not value else round(float(value))

    def pick(self, torch: str, tensorflow: str) -> str:
        """The text for the run's framework."""
        return torch if self.torch else tensorflow


def _measured_on(hardware: HardwareInfo, m: Mapping[str, Any]) -> bool:
    measured: Sequence[Any] = (m.get("hardware") or {}).get("gpus") or ()
    on_gpu = bool(measured) and str(m.get("device", "cpu")) != "cpu"
    if not hardware.gpus:
        return not on_gpu
    return on_gpu and measured[0].get("name") == hardware.gpus[0].name
