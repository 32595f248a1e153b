"""tune's levers as data: what each one sets in a candidate's `Settings`, its name in a
trial's name, and whether a candidate has it on. One ordered registry, `REGISTRY`, read by
the trials (`accelkit.torch.tuning.registry` implements each lever on PyTorch), by
``report.tuning`` (a trial's name and settings), and by the advisor's rules, which name a
lever left unused (`accelkit.advisor.tuning`).

`Settings` is typed until the edge: ``report.tuning`` keeps `Settings.to_dict`, the keys
of the record saved before the settings were typed (``{"compile": bool, "optimizer":
"fused" | "foreach" | "default", ...}``), and `Settings.of` reads one back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

DEFAULT_BUCKET_MB = 25  # DistributedDataParallel's bucket_cap_mb
# The DDP options tune tries, in a trial's settings where DDP wraps the model.
DDP_KEYS = ("compression", "bucket_cap_mb", "static_graph", "broadcast_buffers")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a candidate trains with.

    Attributes:
        compile: the step is compiled (``torch.compile``).
        optimizer: the optimizer's implementation: ``"fused"``, ``"foreach"`` or ``"default"``.
        compiled: what compile compiled where a door compiles several kinds of code
            (``"training_step"``: a LightningModule's whole step; ``"forward"``: the
            forward passes); None in the fit, which compiles its forward and loss.
        cudagraphs: the compiled code replays CUDA graphs (``mode="reduce-overhead"``).
        compile_mode: torch.compile's mode where not its default (max-autotune's).
        attention: ``"sdpa"`` where tune switched transformers models to SDPA attention.
        ddp: the DDP options in force under DDP (`DDP_KEYS`), empty without DDP.
        float8: the eligible linear layers run their matmuls in float8 (torchao's
            tensorwise recipe, `accelkit.torch.tuning.float8`).

    Example:
        >>> settings = Settings(compile=True, optimizer="fused", attention="sdpa")
        >>> settings.name(), settings.to_dict()
        ('compile+fused+sdpa', {'compile': True, 'optimizer': 'fused', 'attention': 'sdpa'})
        >>> Settings.of(settings.to_dict()) == settings
        True
    """

    compile: bool = False
    optimizer: str = "default"
    compiled: str | None = None
    cudagraphs: bool = False
    compile_mode: str | None = None
    attention: str | None = None
    ddp: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    float8: bool = False

    def with_(self, **changes: Any) -> Settings:
        """These settings with `changes`."""
        return dataclasses.replace(self, **changes)

    def name(self) -> str:
        """The trial's name: how the step runs (``eager``, ``compile``, ``cudagraphs``,
        ``max-autotune``; `` step`` where a LightningModule's whole step was compiled),
        then each lever on, in the registry's order (``+fused``, ``+bf16-grads``, ``+sdpa``).
        """
        head = (
            "max-autotune"
            if self.compile_mode
            else "cudagraphs"
            if self.cudagraphs
            else "compile"
            if self.compile
            else "eager"
        )
        if self.compiled == "training_step":
            head += " step"
        return head + "".join(f"+{lever.text(self)}" for lever in REGISTRY if lever.text(self))

    def to_dict(self) -> dict[str, Any]:
        """The record's keys: ``compile`` and ``optimizer`` always, the others where set."""
        found: dict[str, Any] = {"compile": self.compile, "optimizer": self.optimizer}
        if self.compiled is not None:
            found["compiled"] = self.compiled
        if self.cudagraphs:
            found["cudagraphs"] = True
        if self.compile_mode is not None:
            found["compile_mode"] = self.compile_mode
        if self.attention is not None:
            found["attention"] = self.attention
        found.update(self.ddp)
        if self.float8:
            found["float8"] = True
        return found

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Settings:
        """The settings a record's mapping holds (missing keys: the defaults)."""
        return cls(
            compile=bool(data.get("compile")),
            optimizer=str(data.get("optimizer") or "default"),
            compiled=data.get("compiled"),
            cudagraphs=bool(data.get("cudagraphs")),
            compile_mode=data.get("compile_mode"),
            attention=data.get("attention"),
            ddp={key: data[key] for key in DDP_KEYS if key in data},
            float8=bool(data.get("float8")),
        )


@dataclasses.dataclass(frozen=True)
class LeverInfo:
    """One lever as data.

    Attributes:
        name: its name in the record of a candidate not tried (``"optimizer"``, ``"sdpa"``).
        keys: the record's keys that say whether it is on (what the advisor compares
            a candidate with the baseline on, the others held equal).
        on: ``on(settings) -> bool``: whether a candidate has it on.
        label: what it adds to a trial's name where on (``"bf16-grads"``; a function of
            the settings where that varies: the optimizer's implementation); "" where the
            name's head says it (compile, CUDA graphs, max-autotune).
    """

    name: str
    keys: tuple[str, ...]
    on: Callable[[Settings], bool]
    label: str | Callable[[Settings], str] = ""

    def text(self, settings: Settings) -> str:
        """What `settings` adds to a trial's name for this lever ("" where off or unnamed)."""
        if not self.on(settings):
            return ""
        return self.label(settings) if callable(self.label) else self.label

    def __call__(self, settings: Mapping[str, Any] | Settings) -> bool:
        """`on`, for a record's settings mapping or typed ones."""
        return self.on(settings if isinstance(settings, Settings) else Settings.of(settings))


FUSED_OPTIMIZER = LeverInfo(
    "optimizer",
    ("optimizer",),
    lambda s: s.optimizer in ("fused", "foreach"),
    label=lambda s: s.optimizer,
)
BF16_GRADIENTS = LeverInfo(
    "bf16-grads", ("compression",), lambda s: s.ddp.get("compression") == "bf16", "bf16-grads"
)
LARGER_BUCKETS = LeverInfo(
    "buckets-100MB",
    ("bucket_cap_mb",),
    lambda s: (s.ddp.get("bucket_cap_mb") or DEFAULT_BUCKET_MB) > DEFAULT_BUCKET_MB,
    "buckets-100MB",
)
STATIC_GRAPH = LeverInfo(
    "static-graph", ("static_graph",), lambda s: bool(s.ddp.get("static_graph")), "static-graph"
)
NO_BUFFER_BROADCAST = LeverInfo(
    "no-buffer-broadcast",
    ("broadcast_buffers",),
    lambda s: s.ddp.get("broadcast_buffers") is False,
    "no-buffer-broadcast",
)
SDPA_ATTENTION = LeverInfo("sdpa", ("attention",), lambda s: s.attention == "sdpa", "sdpa")
COMPILE = LeverInfo("compile", ("compile",), lambda s: s.compile)
# A CUDA-graph candidate is compiled too: compile's own figure is COMPILE_ALONE's.
COMPILE_ALONE = LeverInfo(
    "compile",
    ("compile", "cudagraphs", "compile_mode"),
    lambda s: s.compile and not s.cudagraphs and not s.compile_mode,
)
CUDA_GRAPHS = LeverInfo(
    "cudagraphs", ("cudagraphs", "compile_mode"), lambda s: s.cudagraphs and not s.compile_mode
)
MAX_AUTOTUNE = LeverInfo(
    "max-autotune", ("compile_mode",), lambda s: (s.compile_mode or "").startswith("max-autotune")
)
FLOAT8 = LeverInfo("float8", ("float8",), lambda s: s.float8, "float8")

# Every lever, in the order tune tries them (and names them in a trial's name).
REGISTRY = (
    FUSED_OPTIMIZER,
    BF16_GRADIENTS,
    LARGER_BUCKETS,
    STATIC_GRAPH,
    NO_BUFFER_BROADCAST,
    SDPA_ATTENTION,
    COMPILE,
    CUDA_GRAPHS,
    MAX_AUTOTUNE,
    FLOAT8,
)
