"""The advisor: ranked, evidence-backed advice from the plan and the measured run.

`advise(hardware, plan, measurements)` is a pure function of plain data: a
`HardwareInfo`, a `Plan` and the run's figures (a `RunReport` or its
`to_dict()`, whose ``facts`` the meters collect). Every verdict carries the
numbers it rests on, the change to make for the run's framework, and the
expected gain with how it was estimated. Every `RunReport` carries the
verdicts for the hardware it ran on; for another GPU, pass that GPU's plan:

    >>> import accelkit
    >>> report = {"framework": "torch", "device": "cpu", "step_time_s": 0.05}  # or a RunReport
    >>> plan = accelkit.plan_for("A100-SXM4-80GB", precision="fp32")
    >>> for advice in accelkit.advisor.advise(plan.hardware, plan, report):
    ...     print(advice.severity, advice.title)  # doctest: +NORMALIZE_WHITESPACE
    warning matmuls run in fp32 on NVIDIA A100 SXM4 80GB, whose tensor cores run bf16
    mixed precision

`accelkit.advisor.project(report, gpu=...)` (`accelkit.advisor.projection`)
estimates step and epoch time on other GPUs at the same MFU, with the host time and
the gradient all-reduce, or says why it cannot (`NotProjected`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from accelkit.advisor.context import DEFAULT_MFU, Context
from accelkit.advisor.projection import NotProjected, Projection, project
from accelkit.advisor.rules import FALLBACK, RULES, FallbackRule, Rule
from accelkit.advisor.rules.needs import may_run
from accelkit.advisor.types import Advice, Severity, rank
from accelkit.hardware.info import HardwareInfo
from accelkit.planning.types import Plan


def advise(
    hardware: HardwareInfo | None,
    plan: Plan | None,
    measurements: Mapping[str, Any] | Any,
    *,
    rules: Iterable[Rule] | None = None,
    fallback: Iterable[FallbackRule] | None = None,
) -> list[Advice]:
    """The verdicts for a run, most important first.

    Args:
        hardware: the hardware to advise for (None: the plan's, else the report's).
        plan: the plan in force, or a what-if plan (`accelkit.plan_for`); None: the
            plan saved in the report, if any.
        measurements: a `RunReport`, or a mapping with its keys (`report.to_dict()`);
            missing figures and facts only keep the rules that need them quiet.
        rules, fallback: override the registry (`accelkit.advisor.rules.RULES`).

    Returns:
        `Advice` items ranked by `accelkit.advisor.types.rank`: critical first, then
        by estimated speed-up, then severity.

    Example:
        >>> advise(None, None, {"input_wait_share": 0.4, "framework": "torch"})[0].id
        'input_bound'
    """
    ctx = Context.build(hardware, plan, measurements)
    found: list[Advice] = []
    # A rule missing a declared input stays quiet (`rules.needs`): no verdict without
    # its evidence, whatever the rule's own code would do with a default.
    for rule in RULES if rules is None else rules:
        if may_run(rule, ctx):
            found.extend(_as_list(rule(ctx)))
    for late in FALLBACK if fallback is None else fallback:
        if may_run(late, ctx):
            found.extend(_as_list(late(ctx, list(found))))
    return rank(found)


def _as_list(result: Advice | list[Advice] | None) -> list[Advice]:
    if result is None:
        return []
    return [result] if isinstance(result, Advice) else list(result)


__all__ = [
    "DEFAULT_MFU",
    "Advice",
    "Context",
    "NotProjected",
    "Projection",
    "Severity",
    "advise",
    "project",
    "rank",
]
