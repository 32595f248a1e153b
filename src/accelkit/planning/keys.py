"""Setting keys: one registry of everything a plan can set, who applies it, and when.

Every `Setting` the planner emits carries a `Key`. The registry (`REGISTRY`)
says, per key, what kind of thing it is (an environment variable, framework
state, a decision a helper reads, advice), which framework it belongs to, in
which phase it must be applied, and who applies it. The adapters' applier
tables and the helpers that read a key name the same `Key` members, and
`tests/planning/test_keys.py` checks that every key has whoever applies it.

Adding a setting is: a member here, its `Entry`, the planner code that emits
it, and its applier (an adapter function, or the helper named in `applied_by`).
"""

from __future__ import annotations

import dataclasses
import enum


class Kind(str, enum.Enum):
    """What a setting changes."""

    ENV = "env"  # an environment variable
    FLAG = "flag"  # framework state the adapter sets
    HELPER = "helper"  # a decision a helper (a fit, plan.autocast(), float32_head) reads
    ADVICE = "advice"  # something only the user can do


class Phase(enum.IntEnum):
    """When a setting takes effect; adapters apply settings in this order."""

    ENVIRONMENT = 0  # read by the framework or NCCL when they start: set first
    FRAMEWORK = 1  # framework state, before models are built
    DEVICE = 2  # the rank's GPU, once the flags are set
    PROCESS_GROUP = 3  # the collective backend, last
    FIT = 4  # read by a helper when it runs
    USER = 5  # never applied by accelkit


class Key(str, enum.Enum):
    """The name of a setting; its value is the name shown in plans and JSON."""

    # precision
    PRECISION = "precision"
    AUTOCAST_DTYPE = "autocast.dtype"
    OUTPUTS_FLOAT32 = "outputs.float32"
    GRAD_SCALER = "grad_scaler"
    TORCH_TF32_MATMUL = "torch.backends.cuda.matmul.allow_tf32"
    TORCH_TF32_CUDNN = "torch.backends.cudnn.allow_tf32"
    KERAS_POLICY = "keras.mixed_precision.global_policy"
    KERAS_FLOAT32_HEAD = "keras.float32_head"
    KERAS_LOSS_SCALE = "keras.loss_scale"
    TF_TF32 = "tf.config.experimental.enable_tensor_float_32_execution"
    FLOAT8 = "float8"  # a `Float8`: float8 matmuls (torchao) on the linear layers
    # runtime
    CUDNN_BENCHMARK = "torch.backends.cudnn.benchmark"
    TORCH_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
    CHANNELS_LAST = "channels_last"
    TORCH_COMPILE = "torch.compile"
    TF_MEMORY_GROWTH = "tf.config.experimental.set_memory_growth"
    TF_GPU_THREAD_MODE = "TF_GPU_THREAD_MODE"
    KERAS_JIT_COMPILE = "keras.jit_compile"
    # distribution
    TORCH_PROCESS_GROUP = "torch.distributed.backend"
    TORCH_DEVICE = "torch.cuda.set_device"
    DDP_BUCKET_VIEW = "ddp.gradient_as_bucket_view"
    LAUNCH = "launch"
    TF_STRATEGY = "tf.distribute.Strategy"
    DISTRIBUTION = "distribution"
    NCCL_P2P_DISABLE = "NCCL_P2P_DISABLE"
    NCCL_SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"
    # memory: how the model's state is laid out over the GPUs (planning.sharding)
    SHARDING = "sharding"  # "ddp", "fsdp2" or "none" (one GPU / one replica per GPU)
    ACTIVATION_CHECKPOINTING = "activation_checkpointing"  # True: recompute in backward
    CPU_OFFLOAD = "fsdp.cpu_offload"  # True: FSDP2's CPUOffloadPolicy, the last resort
    MEMORY = "memory"  # "does not fit": the refusal, with the numbers

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Entry:
    """What the registry knows of one key.

    Attributes:
        kind: what the setting changes.
        framework: ``"torch"``, ``"tensorflow"`` or ``"any"``.
        phase: when it takes effect.
        applied_by: ``"adapter"`` when the framework adapter applies it (it must
            have an applier for the key), else the helper that reads it, as the
            user would call it.
    """

    kind: Kind
    framework: str
    phase: Phase
    applied_by: str

    @property
    def by_adapter(self) -> bool:
        return self.applied_by == ADAPTER


ADAPTER = "adapter"
_TORCH_FIT = "accelkit.torch.fit"
_AUTOCAST = "plan.autocast() / accelkit.torch.fit"
# Float8 is tune's lever (a `Float8.TRIED` plan) or, under precision fp8, the fit's.
_FLOAT8 = "accelkit.torch.fit / accelkit.torch.tune (tune's float8 lever)"
_SHARDED_FIT = (
    "accelkit.torch.fit / accelkit.lightning.trainer_kwargs / accelkit.hf.training_arguments"
)

REGISTRY: dict[Key, Entry] = {
    Key.PRECISION: Entry(Kind.HELPER, "torch", Phase.FIT, _AUTOCAST),
    Key.AUTOCAST_DTYPE: Entry(Kind.HELPER, "torch", Phase.FIT, _AUTOCAST),
    Key.OUTPUTS_FLOAT32: Entry(Kind.HELPER, "torch", Phase.FIT, _TORCH_FIT),
    Key.GRAD_SCALER: Entry(
        Kind.HELPER, "torch", Phase.FIT, "plan.grad_scaler() / accelkit.torch.fit"
    ),
    Key.TORCH_TF32_MATMUL: Entry(Kind.FLAG, "torch", Phase.FRAMEWORK, ADAPTER),
    Key.TORCH_TF32_CUDNN: Entry(Kind.FLAG, "torch", Phase.FRAMEWORK, ADAPTER),
    Key.KERAS_POLICY: Entry(Kind.FLAG, "tensorflow", Phase.FRAMEWORK, ADAPTER),
    Key.KERAS_FLOAT32_HEAD: Entry(
        Kind.HELPER,
        "tensorflow",
        Phase.FIT,
        "accelkit.keras.float32_head(model) / accelkit.keras.fit",
    ),
    Key.KERAS_LOSS_SCALE: Entry(
        Kind.HELPER, "tensorflow", Phase.FIT, "model.compile() under the mixed_float16 policy"
    ),
    Key.TF_TF32: Entry(Kind.FLAG, "tensorflow", Phase.FRAMEWORK, ADAPTER),
    Key.FLOAT8: Entry(Kind.HELPER, "torch", Phase.FIT, _FLOAT8),
    Key.CUDNN_BENCHMARK: Entry(Kind.FLAG, "torch", Phase.FRAMEWORK, ADAPTER),
    Key.TORCH_ALLOC_CONF: Entry(Kind.ENV, "torch", Phase.ENVIRONMENT, ADAPTER),
    Key.CHANNELS_LAST: Entry(Kind.HELPER, "torch", Phase.FIT, _TORCH_FIT),
    Key.TORCH_COMPILE: Entry(Kind.HELPER, "torch", Phase.FIT, _TORCH_FIT),
    Key.TF_MEMORY_GROWTH: Entry(Kind.FLAG, "tensorflow", Phase.FRAMEWORK, ADAPTER),
    Key.TF_GPU_THREAD_MODE: Entry(Kind.ENV, "tensorflow", Phase.ENVIRONMENT, ADAPTER),
    Key.KERAS_JIT_COMPILE: Entry(Kind.HELPER, "tensorflow", Phase.FIT, "accelkit.keras.fit"),
    Key.TORCH_PROCESS_GROUP: Entry(Kind.FLAG, "torch", Phase.PROCESS_GROUP, ADAPTER),
    Key.TORCH_DEVICE: Entry(Kind.FLAG, "torch", Phase.DEVICE, ADAPTER),
    Key.DDP_BUCKET_VIEW: Entry(Kind.HELPER, "torch", Phase.FIT, _TORCH_FIT),
    Key.LAUNCH: Entry(Kind.ADVICE, "torch", Phase.USER, "the user (relaunch)"),
    Key.TF_STRATEGY: Entry(
        Kind.HELPER, "tensorflow", Phase.FIT, "accelkit.keras.strategy(plan) / accelkit.keras.fit"
    ),
    Key.DISTRIBUTION: Entry(Kind.ADVICE, "any", Phase.USER, "the user (one process per slice)"),
    Key.NCCL_P2P_DISABLE: Entry(Kind.ENV, "any", Phase.ENVIRONMENT, ADAPTER),
    Key.NCCL_SOCKET_IFNAME: Entry(Kind.ADVICE, "any", Phase.USER, "the user (the interface name)"),
    # "any": a TensorFlow plan says "none" (its strategies replicate the whole state)
    Key.SHARDING: Entry(Kind.HELPER, "any", Phase.FIT, _SHARDED_FIT),
    Key.ACTIVATION_CHECKPOINTING: Entry(Kind.HELPER, "torch", Phase.FIT, _SHARDED_FIT),
    Key.CPU_OFFLOAD: Entry(Kind.HELPER, "torch", Phase.FIT, _SHARDED_FIT),
    Key.MEMORY: Entry(
        Kind.ADVICE, "any", Phase.USER, "the user (more or larger GPUs, a smaller model)"
    ),
}


def entry(key: Key) -> Entry:
    """The registry entry of `key`."""
    return REGISTRY[key]


class Float8(str, enum.Enum):
    """The value of `Key.FLOAT8`: what becomes of float8 matmuls (torchao) on a run.

    Read with ``plan.value(Key.FLOAT8)`` by tune's float8 lever and the fit; a plan
    without the setting (no GPU, TensorFlow) runs no float8.
    """

    TRIED = "tried by tune"  # kept only on the layers where measured faster and checked
    ON = "on"  # precision="fp8": every eligible linear layer
    OFF = "off"  # the reason says why (no float8 tensor cores, a precision without bf16)

    def __str__(self) -> str:
        return self.value


class CrossDevice(str, enum.Enum):
    """How a TensorFlow strategy reduces gradients across devices (the plan's choice)."""

    NCCL_ALL_REDUCE = "NcclAllReduce"  # MirroredStrategy, GPUs with peer access
    HIERARCHICAL_COPY = "HierarchicalCopyAllReduce"  # MirroredStrategy, some pairs without
    NCCL = "NCCL"  # MultiWorkerMirroredStrategy between GPUs
    RING = "RING"  # MultiWorkerMirroredStrategy between CPUs

    def __str__(self) -> str:
        return self.value
