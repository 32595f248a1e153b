"""The advisor's rules: one function per verdict, registered in `RULES`.

A rule takes a `Context` and returns an `Advice`, a list of them, or None when
its evidence is absent. To add one, write it in the module of its family
(or a new module) and append it to `RULES`; docs/advice.md lists each rule's
trigger, evidence and action.

`FALLBACK` rules run last and also receive the verdicts found so far (the
low-MFU rule speaks only when nothing else explains the gap).
"""

from __future__ import annotations

from collections.abc import Callable

from accelkit.advisor.context import Context
from accelkit.advisor.rules import (
    alignment,
    attention,
    autotune,
    compilation,
    cuda_graphs,
    distribution,
    float8,
    input_wait,
    keras_policy,
    memory,
    mixed_precision,
    optimizer,
    phases,
    precision,
    reliability,
    scaling,
    stability,
    train_step,
    utilisation,
)
from accelkit.advisor.types import Advice

Found = Advice | list[Advice] | None
Rule = Callable[[Context], Found]
FallbackRule = Callable[[Context, list[Advice]], Found]

# Order breaks ties in the ranking (same severity, no gain estimate).
RULES: list[Rule] = [
    mixed_precision.float_ids,
    mixed_precision.half_ids,
    mixed_precision.float16_outputs,
    train_step.unscaled_train_step,
    stability.nonfinite_loss,
    stability.loss_scale,
    input_wait.input_bound,
    phases.evaluation_time,
    phases.other_time,
    utilisation.launch_overhead,
    compilation.torch_compile,
    cuda_graphs.cuda_graphs,
    autotune.max_autotune,
    attention.sdpa_attention,
    optimizer.fused_optimizer,
    precision.precision,
    float8.float8,
    keras_policy.keras_policy,
    memory.memory,
    memory.memory_prediction,
    alignment.alignment,
    distribution.idle_gpus,
    distribution.data_parallel,
    scaling.scaling,
    reliability.no_ecc,
]

FALLBACK: list[FallbackRule] = [utilisation.where_to_look]

__all__ = ["FALLBACK", "RULES", "FallbackRule", "Rule"]
