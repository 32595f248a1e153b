"""The vocabulary of a plan: string enums shared by the API, the CLI and the
environment, and the immutable `Setting` / `Plan` / `Request` records."""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from accelkit.hardware import capabilities
from accelkit.planning.keys import REGISTRY, Key, Kind

if TYPE_CHECKING:
    from typing_extensions import Self

    from accelkit.hardware.info import HardwareInfo


class _Choice(str, enum.Enum):
    """A string enum whose bad values raise a `ValueError` naming the valid ones."""

    @classmethod
    def parse(cls, value: str | _Choice, *, name: str | None = None) -> Self:
        if isinstance(value, cls):
            return value
        text = str(value).strip().lower()
        for member in cls:
            if member.value == text:
                return member
        valid = ", ".join(repr(m.value) for m in cls)
        raise ValueError(
            f"{name or cls.__name__.lower()}={value!r} is not valid; use one of {valid}"
        )

    def __str__(self) -> str:
        return self.value


class Precision(_Choice):
    """How the matmuls of a training step run.

    `bf16` and `fp16` are *mixed* precision (fp32 weights, low-precision compute);
    `fp8` is bf16 mixed precision whose eligible linear layers run their matmuls in
    float8 (torchao; compute capability >= 8.9, PyTorch only);
    `tf32` keeps fp32 tensors but lets tensor cores round matmul inputs to TF32;
    `fp32` is strict IEEE fp32 everywhere.

    Example:
        >>> Precision.FP8.without_float8, Precision.FP16.without_float8
        (<Precision.BF16: 'bf16'>, <Precision.FP16: 'fp16'>)
    """

    AUTO = "auto"
    BF16 = "bf16"
    FP16 = "fp16"
    TF32 = "tf32"
    FP32 = "fp32"
    FP8 = "fp8"

    @property
    def without_float8(self) -> Precision:
        """What the step runs in outside the float8 matmuls: bf16 under `fp8` (its
        autocast dtype, no loss scaling, TF32 on, the memory per parameter), else this
        precision itself."""
        return Precision.BF16 if self is Precision.FP8 else self


class Framework(_Choice):
    AUTO = "auto"
    TORCH = "torch"
    TENSORFLOW = "tensorflow"


class Distribution(_Choice):
    """What runs several devices (the `distribute` request takes `auto` or `none` too)."""

    AUTO = "auto"
    NONE = "none"
    MIRRORED = "mirrored"  # tf.distribute.MirroredStrategy, one process, local GPUs
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"  # tf.distribute under TF_CONFIG
    DDP = "ddp"  # torch DistributedDataParallel under torchrun
    # torch FSDP2 (`torch.distributed.fsdp.fully_shard`) under torchrun/SLURM, one process
    # per GPU: chosen when the model's state does not fit each GPU whole (planning.sharding)
    FSDP = "fsdp"


class Optimizer(_Choice):
    """The optimizer whose state the memory estimate counts (`accelkit.planning.memory`
    gives the bytes per parameter of each, with their sources)."""

    ADAMW = "adamw"
    ADAM = "adam"
    ADAMW_8BIT = "adamw_8bit"  # bitsandbytes AdamW8bit: m and v in 8 bits
    ADAFACTOR = "adafactor"  # factored second moment, no first moment (HF's defaults)
    SGD_MOMENTUM = "sgd_momentum"
    SGD = "sgd"


class FrozenDtype(_Choice):
    """How the frozen weights (those the optimizer does not update: a LoRA's base model)
    are held: ``fp32`` (accelkit's default: float32, with autocast's 16-bit copy under
    mixed precision), ``bf16`` / ``fp16`` (``from_pretrained(torch_dtype=...)``), or
    quantised by bitsandbytes: ``int8`` (LLM.int8) and ``int4`` (QLoRA's NF4).
    `accelkit.planning.memory.FROZEN_BYTES` gives the bytes of each, with sources."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    INT8 = "int8"
    INT4 = "int4"


class Status(_Choice):
    """What became of a setting when a plan was applied."""

    PLANNED = "planned"  # not applied yet (dry run, ACCELKIT_DISABLE, what-if plan)
    APPLIED = "applied"
    KEPT_USER_VALUE = "kept user value"
    ALREADY_SET = "already set"  # the value in force equals the planned one
    NOT_APPLICABLE = "not applicable"
    DEFERRED = "deferred"  # applied later by a helper (fit, float32_head, autocast)
    ADVICE = "advice"  # something only the user can do (e.g. relaunch under torchrun)
    FAILED = "could not apply"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One decision of the planner.

    Attributes:
        key: what is set (`accelkit.planning.keys.Key`); its registry entry says
            what kind of thing it is, its framework, and who applies it.
        value: the value chosen.
        reason: one line saying why, with the numbers it rests on.
        status: what happened when the plan was applied.
        detail: why it ended that way (the user's value, the error...).
    """

    key: Key
    value: Any
    reason: str
    status: Status = Status.PLANNED
    detail: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", Key(self.key))

    @property
    def kind(self) -> Kind:
        """`env`, `flag`, `helper` or `advice` (from the key's registry entry)."""
        return REGISTRY[self.key].kind

    @property
    def framework(self) -> str:
        """`"torch"`, `"tensorflow"` or `"any"` (from the key's registry entry)."""
        return REGISTRY[self.key].framework

    def with_status(self, status: Status, detail: str = "") -> Setting:
        return dataclasses.replace(self, status=status, detail=detail)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key.value,
            "value": _plain(self.value),
            "framework": self.framework,
            "reason": self.reason,
            "kind": self.kind.value,
            "status": self.status.value,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Setting:
        return cls(
            key=Key(data["key"]),
            value=data["value"],
            reason=data["reason"],
            status=Status.parse(data.get("status", "planned")),
            detail=data.get("detail", ""),
        )


def _plain(value: Any) -> Any:
    """A string enum value as its plain string, so JSON and equality see the same thing."""
    return value.value if isinstance(value, enum.Enum) else value


@dataclasses.dataclass(frozen=True)
class Request:
    """What the caller asks of the planner; `auto` lets the planner choose.

    Validated on construction: a bad value raises `ValueError` naming the valid ones.

    Attributes:
        deterministic: the run must repeat bit for bit: the planner leaves out what
            picks kernels by timing (cuDNN benchmarking) and plans it off.
        params: the model's parameter count (8e9 is taken as 8,000,000,000): the plan
            then carries `plan.memory` and chooses DDP, FSDP2, checkpointing or CPU
            offload from it (`accelkit.planning.sharding`). None: no memory estimate.
        trainable_params: those the optimizer updates (default: all); frozen ones
            hold their weights only (a LoRA's base model).
        frozen_dtype: how the frozen ones are held (`FrozenDtype`): ``fp32`` (default,
            4 bytes and a 16-bit autocast copy), ``bf16``, ``fp16``, ``int8`` or ``int4``
            (a LoRA or QLoRA base loaded so); no effect when all are trainable.
        optimizer: whose state is counted: ``adamw``, ``adam``, ``adamw_8bit``,
            ``adafactor``, ``sgd_momentum`` or ``sgd`` (`accelkit.planning.memory`).
        activation_bytes: activations one GPU holds at the planned micro-batch,
            measured; None: unknown (the plan prefers a layout that leaves them 20% of
            usable memory, `accelkit.planning.memory.ACTIVATION_SHARE`, and says so).

    Example:
        >>> Request(framework="torch", precision="bf16", deterministic=True).deterministic
        True
    """

    framework: Framework = Framework.TORCH
    precision: Precision = Precision.AUTO
    distribute: Distribution = Distribution.AUTO
    compile: bool = False
    fixed_shapes: bool = True
    deterministic: bool = False

    params: int | None = None  # a whole count once validated (8e9 is taken)
    trainable_params: int | None = None
    optimizer: Optimizer = Optimizer.ADAMW
    activation_bytes: int | None = None
    frozen_dtype: FrozenDtype = FrozenDtype.FP32

    if TYPE_CHECKING:
        # What the generated __init__ accepts: the choices' names as strings too, and
        # True/False/None for distribute. __post_init__ turns them into the members.
        def __init__(
            self,
            framework: Framework | str = Framework.TORCH,
            precision: Precision | str = Precision.AUTO,
            distribute: Distribution | str | bool | None = Distribution.AUTO,
            compile: bool = False,
            fixed_shapes: bool = True,
            deterministic: bool = False,
            params: float | None = None,
            trainable_params: float | None = None,
            optimizer: Optimizer | str = Optimizer.ADAMW,
            activation_bytes: int | None = None,
            frozen_dtype: FrozenDtype | str = FrozenDtype.FP32,
        ) -> None: ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "framework", Framework.parse(self.framework, name="framework"))
        object.__setattr__(self, "precision", Precision.parse(self.precision, name="precision"))
        distribute: Distribution | str | bool | None = self.distribute
        if distribute is True:
            distribute = Distribution.AUTO
        elif distribute is False or distribute is None:
            distribute = Distribution.NONE
        object.__setattr__(self, "distribute", Distribution.parse(distribute, name="distribute"))
        if self.framework is Framework.AUTO:
            raise ValueError(
                "framework='auto' must be resolved before planning; use 'torch' or 'tensorflow'"
            )
        for name in ("compile", "fixed_shapes", "deterministic"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(  # noqa: TRY004 - every bad argument is a ValueError (STYLE.md)
                    f"{name}={getattr(self, name)!r} is not valid; use True or False"
                )
        object.__setattr__(self, "optimizer", Optimizer.parse(self.optimizer, name="optimizer"))
        frozen = FrozenDtype.parse(self.frozen_dtype, name="frozen_dtype")
        object.__setattr__(self, "frozen_dtype", frozen)
        _check_model_size(self)


# Bounds that keep the memory arithmetic in floats' range: a quadrillion parameters
# (1,000x the largest published models) and an exabyte of activations.
MAX_PARAMS = 10**15
MAX_BYTES = 10**18


def _check_model_size(request: Request) -> None:
    """The model's size: parameter counts are positive whole numbers (8e9 is taken as
    8,000,000,000), trainable ones no more than all, activations bytes >= 0."""
    for name in ("params", "trainable_params"):
        value = getattr(request, name)
        if value is None:
            continue
        count = _whole_count(value, MAX_PARAMS)
        if count is None:
            raise ValueError(
                f"{name}={value!r} is not valid ({_why_not_whole(value)}); use a whole number "
                f"of parameters from 1 to {MAX_PARAMS:.0e} such as 8e9, 8_000_000_000 or "
                "np.int64(8_000_000_000), or None"
            )
        object.__setattr__(request, name, count)
    if request.trainable_params is not None:
        if request.params is None:
            raise ValueError(
                f"trainable_params={request.trainable_params:,} needs params (the model's "
                "parameter count) as well"
            )
        if request.trainable_params > request.params:
            raise ValueError(
                f"trainable_params={request.trainable_params:,} is not valid; use at most "
                f"params={request.params:,}"
            )
    activations = request.activation_bytes
    whole = None if activations is None else _whole_count(activations, MAX_BYTES, zero=True)
    if activations is not None and whole is None:
        raise ValueError(
            f"activation_bytes={activations!r} is not valid ({_why_not_whole(activations)}); "
            "use the bytes of activations "
            f"one GPU holds (a whole number from 0 to {MAX_BYTES:.0e}, e.g. measured peak "
            "minus state), or None"
        )
    if whole is not None:
        object.__setattr__(request, "activation_bytes", whole)


def _whole_count(value: object, maximum: int, *, zero: bool = False) -> int | None:
    """`value` as an int when it is a whole number from 1 (0 with `zero`) to `maximum`."""
    count = whole_number(value)
    if count is None:
        return None
    return count if (0 if zero else 1) <= count <= maximum else None


def whole_number(value: object) -> int | None:
    """`value` as an int when it is a whole number of any numeric type, else None.

    Integral numbers (`int`, ``numpy.int64``, anything with ``__index__``) are taken
    exactly; real numbers (``8e9``, ``numpy.float32``, `fractions.Fraction`) when finite
    and whole. Booleans (Python's and NumPy's) and strings are not numbers here: a
    ``True`` where a count belongs is a mistake, not 1.

    Example:
        >>> whole_number(8e9), whole_number(True), whole_number(float("nan"))
        (8000000000, None, None)
    """
    if _is_bool(value) or isinstance(value, (str, bytes)):
        return None
    if hasattr(type(value), "__index__"):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            return None
    if not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)  # every Real has __float__ (NumPy's floats no __trunc__)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(number) or not number.is_integer():
        return None
    return int(number) if int(number) == value else None  # a float rounded: not exact


def _is_bool(value: object) -> bool:
    """Python's bool, or NumPy's (``numpy.bool_``, which is no `bool` subclass)."""
    kind = type(value)
    return isinstance(value, bool) or (
        kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    )


def _why_not_whole(value: object) -> str:
    """What is wrong with `value` as a count, for the message."""
    if _is_bool(value):
        return "a bool, not a number"
    if isinstance(value, (str, bytes)):
        return f"a {type(value).__name__}: give the number itself"
    if isinstance(value, numbers.Real) and not math.isfinite(value):
        return "not finite"
    if whole_number(value) is None:
        is_real = isinstance(value, numbers.Real)
        return "not a whole number" if is_real else f"a {type(value).__name__}, not a number"
    return "out of range"


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """A model's memory per GPU and the layout chosen for it (`plan.memory`).

    Bytes are ints; GB in reasons are decimal (1e9), as device memory is given.

    Attributes:
        params: the model's parameters; trainable_params: those the optimizer updates.
        optimizer, precision: what the bytes per parameter are counted for.
        bytes_per_param: weights + gradients + optimizer state (master weights
            included) per trainable parameter.
        state_bytes: that state for the whole model (all GPUs together; frozen
            parameters count their weights only).
        gpus: the GPUs the state may be spread over (the launcher's world size, or
            the GPUs of a what-if).
        state_per_gpu_bytes: one GPU's share of the state under the choice.
        transient_bytes: per GPU: casts, gathered FSDP units or step temporaries.
        activation_bytes: per GPU as given (measured); None: not known yet (measured
            at the first step where the model is at hand).
        activations: "measured" or "unknown", as the plan says it.
        per_gpu_bytes: what one GPU holds under the choice (activations as kept).
        device_bytes: one GPU's memory (None: no GPU or unknown).
        usable_bytes: what tensors can use of it (less `headroom` and the context).
        headroom: the share of the device kept free.
        host_bytes: host memory the choice needs (CPU offload), else 0.
        choice: "none", "ddp", "fsdp2", each with "+checkpointing" and fsdp2 with
            "+offload" where chosen, or "does not fit".
        reason: the numbers the choice rests on.
        gpus_needed: GPUs of this model that hold it sharded (FSDP2), None if unknown.
        largest_params: the largest model (parameters) the choice's layout fits here.
    """

    params: int
    trainable_params: int
    optimizer: str
    precision: str
    bytes_per_param: float
    state_bytes: int
    gpus: int
    state_per_gpu_bytes: int
    transient_bytes: int
    activation_bytes: int | None
    activations: str
    per_gpu_bytes: int
    device_bytes: int | None
    usable_bytes: int | None
    headroom: float
    host_bytes: int
    choice: str
    reason: str
    gpus_needed: int | None = None
    largest_params: int | None = None

    @property
    def fits(self) -> bool:
        """False only when the choice is the refusal."""
        return self.choice != "does not fit"

    def to_dict(self) -> dict[str, Any]:
        """Every field under its name; bytes as ints."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryEstimate:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclasses.dataclass(frozen=True)
class Plan:
    """An immutable list of settings for one framework on one machine.

    Built by `accelkit.planning.plan`; `auto_configure` returns a copy whose
    settings carry what happened when it was applied.

    Example:
        >>> import accelkit
        >>> import torch
        >>> plan = accelkit.plan_for("A100-SXM4-80GB", framework="torch")
        >>> plan.precision
        <Precision.BF16: 'bf16'>
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> model, x = torch.nn.Linear(8, 2).to(device), torch.randn(4, 8, device=device)
        >>> with plan.autocast():
        ...     model(x).dtype
        torch.bfloat16
    """

    framework: Framework
    precision: Precision
    distribution: Distribution
    settings: tuple[Setting, ...]
    hardware: HardwareInfo
    notes: tuple[str, ...] = ()
    # Why `auto_configure` planned this plan but applied none of it (a dry run,
    # ACCELKIT_DISABLE, the framework missing); "" for any other plan.
    not_applied: str = ""
    # What the model's state and activations take per GPU and the parallelism chosen
    # for it (`accelkit.planning.memory`); None when the request gave no model size.
    memory: MemoryEstimate | None = None
    # The request's `distribute` ("auto" unless the caller asked for one), kept so that a
    # plan completed later with the model's size (`accelkit.planning.with_model_size`)
    # keeps to it: "ddp" stays DDP, "none" one GPU's layout.
    requested_distribution: Distribution = Distribution.AUTO

    # -- reading -------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """Environment variables the plan sets (all of them, applied or not)."""
        return {s.key.value: str(s.value) for s in self.settings if s.kind is Kind.ENV}

    @property
    def compile(self) -> bool:
        """True when the plan compiles the train step (`torch.compile` / XLA)."""
        return bool(self.value(Key.TORCH_COMPILE) or self.value(Key.KERAS_JIT_COMPILE))

    def get(self, key: Key | str) -> Setting | None:
        """The setting for `key`, or None when the plan has none."""
        for setting in self.settings:
            if setting.key == key:
                return setting
        return None

    def value(self, key: Key | str, default: Any = None) -> Any:
        setting = self.get(key)
        return default if setting is None else setting.value

    @property
    def device_type(self) -> str:
        """`"cuda"` when the plan is for NVIDIA GPUs, else `"cpu"`."""
        return "cuda" if self.hardware.gpus else "cpu"

    @property
    def mixed(self) -> bool:
        """True when the plan runs matmuls in a 16-bit type (or float8, inside bf16)."""
        return capabilities.is_mixed(self.precision.without_float8)

    @property
    def matmul_dtype(self) -> str:
        """The dtype the plan's matmuls run in, as a datasheet peak key (`bf16`, `tf32`...;
        `fp8` under precision fp8, whose large linear layers run in float8)."""
        if self.precision is Precision.FP8:
            return "fp8"
        tf32 = self.value(Key.TORCH_TF32_MATMUL) is True or self.value(Key.TF_TF32) is True
        return capabilities.matmul_dtype(self.precision, tf32)

    def with_settings(self, settings: Iterable[Setting], notes: Iterable[str] = ()) -> Plan:
        return dataclasses.replace(self, settings=tuple(settings), notes=self.notes + tuple(notes))

    def as_unapplied(self, why: str) -> Plan:
        """This plan marked as planned but not applied (`why`: a dry run,
        ACCELKIT_DISABLE...), so a fit that picks it up as the current plan trains the
        model as the script left it (`without_helpers`)."""
        return dataclasses.replace(self, not_applied=why)

    def without_helpers(self) -> Plan:
        """The plan a fit follows in place of an unapplied one: float32, and none of the
        settings a helper would apply (autocast, loss scaling, channels-last, compile,
        a strategy), so the run computes what the script alone would.

        Example:
            >>> import accelkit
            >>> plan = accelkit.auto_configure(dry_run=True, verbose=False)
            >>> plan.without_helpers().precision
            <Precision.FP32: 'fp32'>
        """
        kept = tuple(s for s in self.settings if s.kind is not Kind.HELPER)
        note = (
            f"not applied ({self.not_applied or 'by request'}): a fit following it trains "
            "in float32 with none of its helper settings"
        )
        return dataclasses.replace(
            self, precision=Precision.FP32, settings=kept, notes=(*self.notes, note)
        )

    # -- given by the stages above -------------------------------------------------
    # A plan is data: planning imports no framework and no report. What a person or a
    # PyTorch loop wants of it is given by the stages that own it (`GIVEN`).

    def autocast(self, device_type: str | None = None) -> Any:
        """A context manager running its body in the plan's precision (PyTorch).

        `torch.autocast` in bf16 or fp16 for `device_type` (default: "cuda" when
        CUDA is available, else "cpu"); a do-nothing context for tf32/fp32 plans
        (`accelkit.frameworks.torch_precision.autocast`).
        """
        return GIVEN.autocast(self, device_type)

    def grad_scaler(self) -> Any:
        """A `torch.amp.GradScaler`, enabled only for fp16 plans (a no-op otherwise;
        `accelkit.frameworks.torch_precision.grad_scaler`)."""
        return GIVEN.grad_scaler(self)

    # -- rendering -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework.value,
            "precision": self.precision.value,
            "distribution": self.distribution.value,
            "compile": self.compile,
            "settings": [s.to_dict() for s in self.settings],
            "env": self.env,
            "notes": list(self.notes),
            "hardware": self.hardware.to_dict(),
            "memory": None if self.memory is None else self.memory.to_dict(),
            **({"not_applied": self.not_applied} if self.not_applied else {}),
            **(
                {"requested_distribution": self.requested_distribution.value}
                if self.requested_distribution is not Distribution.AUTO
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        from accelkit.hardware.info import HardwareInfo

        memory = data.get("memory")
        return cls(
            framework=Framework.parse(data["framework"]),
            precision=Precision.parse(data["precision"]),
            distribution=Distribution.parse(data["distribution"]),
            settings=tuple(Setting.from_dict(s) for s in data["settings"]),
            hardware=HardwareInfo.from_dict(data["hardware"]),
            notes=tuple(data.get("notes", ())),
            not_applied=data.get("not_applied", ""),
            memory=None if memory is None else MemoryEstimate.from_dict(memory),
            requested_distribution=Distribution.parse(data.get("requested_distribution", "auto")),
        )

    def __str__(self) -> str:
        """The plan's table (``print(plan)``, the logs, ``accelkit plan``): `GIVEN.table`."""
        return GIVEN.table(self)


def _one_line(plan: Plan) -> str:
    return (
        f"Plan({plan.framework.value}, {plan.precision.value}, {plan.distribution.value}, "
        f"{len(plan.settings)} settings)"
    )


def _not_given(plan: Plan, *args: Any) -> Any:
    raise RuntimeError("the PyTorch helpers of a plan are given by `import accelkit`")


@dataclasses.dataclass
class Given:
    """What the stages above planning give every plan, so that a plan stays data.

    `accelkit/__init__.py`, which Python runs before any accelkit module, sets them:
    the table people read (`accelkit.report.render.render_plan`) and the PyTorch
    helpers (`accelkit.frameworks.torch_precision`). Until then a plan prints as one
    line.
    """

    table: Callable[[Plan], str] = _one_line
    autocast: Callable[[Plan, str | None], Any] = _not_given
    grad_scaler: Callable[[Plan], Any] = _not_given


GIVEN = Given()
