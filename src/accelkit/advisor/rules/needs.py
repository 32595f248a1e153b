"""What each rule needs: the inputs without which it stays quiet, and what its evidence names.

docs/advice.md promises that no rule fires without its evidence. Each rule declares
it with `@needs(...)`, next to its code, and the registry (`advise`) checks it before
calling the rule: a context missing any required input never reaches the rule. The
declaration also says which input each evidence key states, so
``tests/advisor/test_rule_needs.py`` can check, for every registered rule, that
removing a required input silences it, that its evidence names only declared keys,
and that a key stating an optional input appears only when that input was there.

Inputs are named as the context holds them:

==========================  ==============================================================
name                        present when
==========================  ==============================================================
``figure:NAME``             the run's figure ``NAME`` was measured (``ctx.get(NAME)``)
``fact:NAME``               the meter recorded fact ``NAME`` (``ctx.fact(NAME)``)
``tuning``                  ``tune`` left a record (``report.tuning``)
``gpu``                     there is a GPU to advise for
``measured_here``           the figures were measured on that GPU (or CPU)
``compute_capability``      the GPU's compute capability is known (NVML or its datasheet row)
``spec``                    the GPU has a datasheet row
``plan``                    a plan is in force (the run's, or a what-if one)
``batch_size``              the batch size is known (a fact, or the report's figure)
==========================  ==============================================================
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from accelkit.advisor import tuning
from accelkit.advisor.context import Context

# An evidence key (a pattern: ``loader.*``) -> the input(s) it states: present only when
# one of them is; None for figures the rule derives from its required inputs.
Stated = str | tuple[str, ...] | None

_CONTEXT: dict[str, Callable[[Context], bool]] = {
    "tuning": lambda ctx: tuning.record(ctx) is not None,
    "gpu": lambda ctx: ctx.gpu is not None,
    "measured_here": lambda ctx: ctx.measured_here,
    "compute_capability": lambda ctx: ctx.compute_capability is not None,
    "spec": lambda ctx: ctx.spec is not None,
    "plan": lambda ctx: ctx.plan is not None,
    "batch_size": lambda ctx: ctx.batch_size is not None,
}


def present(ctx: Context, name: str) -> bool:
    """Whether input `name` (module docstring) is in `ctx`."""
    if name.startswith("figure:"):
        return ctx.get(name[len("figure:") :]) is not None
    if name.startswith("fact:"):
        return ctx.fact(name[len("fact:") :]) is not None
    return _CONTEXT[name](ctx)


@dataclasses.dataclass(frozen=True)
class Needs:
    """A rule's declared inputs.

    Attributes:
        required: every entry must be present; an entry that is a tuple is satisfied by
            any one of its names (``("figure:losses", "fact:first_nonfinite_loss_step")``).
        optional: inputs the rule reads when present, and does without.
        evidence: each evidence key (or pattern) it may give -> the input it states
            (`Stated`).
    """

    required: tuple[str | tuple[str, ...], ...]
    optional: tuple[str, ...] = ()
    evidence: Mapping[str, Stated] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [
            *self.inputs,
            *(s for v in self.evidence.values() if v for s in ((v,) if isinstance(v, str) else v)),
        ]
        unknown = [n for n in names if not n.startswith(("figure:", "fact:")) and n not in _CONTEXT]
        if unknown:
            raise ValueError(
                f"unknown rule inputs {unknown}; valid: figure:NAME, fact:NAME, "
                f"{', '.join(_CONTEXT)}"
            )

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every input named, required (each alternative) and optional."""
        flat = [n for r in self.required for n in ((r,) if isinstance(r, str) else r)]
        return (*flat, *self.optional)

    def missing(self, ctx: Context) -> list[str]:
        """The required entries `ctx` lacks (empty: the rule may run)."""
        out = []
        for entry in self.required:
            group = (entry,) if isinstance(entry, str) else entry
            if not any(present(ctx, n) for n in group):
                out.append(" or ".join(group))
        return out

    def stated(self, key: str) -> Stated | bool:
        """The input(s) evidence `key` states; False when the key is not declared."""
        for pattern, source in self.evidence.items():
            if fnmatch.fnmatchcase(key, pattern):
                return source
        return False


R = TypeVar("R", bound=Callable[..., Any])


def needs(
    *required: str | tuple[str, ...],
    optional: Iterable[str] = (),
    evidence: Mapping[str, Stated] | None = None,
) -> Callable[[R], R]:
    """Declare a rule's inputs (`Needs`) on the function itself.

    Example:
        >>> @needs("figure:mfu", optional=("figure:step_time_s",),
        ...        evidence={"mfu": None, "step_time_ms": "figure:step_time_s"})
        ... def low(ctx): ...
        >>> declared(low).required
        ('figure:mfu',)
    """
    declaration = Needs(tuple(required), tuple(optional), dict(evidence or {}))

    def mark(rule: R) -> R:
        rule.needs = declaration  # type: ignore[attr-defined]
        return rule

    return mark


def declared(rule: Callable[..., Any]) -> Needs | None:
    """The rule's declaration; None for a rule passed to `advise` without one."""
    return getattr(rule, "needs", None)


def may_run(rule: Callable[..., Any], ctx: Context) -> bool:
    """The registry's check: a declared rule runs only with all its required inputs."""
    declaration = declared(rule)
    return declaration is None or not declaration.missing(ctx)
