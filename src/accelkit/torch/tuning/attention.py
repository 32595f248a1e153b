"""SDPA attention for Hugging Face models that run the eager one: a `tune` candidate.

A transformers model built or loaded with ``attn_implementation="eager"`` (an older
config, a script that asked for it, a model whose default was eager) computes attention
as a matmul, a softmax and a matmul, with the whole sequence-by-sequence score matrix in
memory. ``"sdpa"`` (``torch.nn.functional.scaled_dot_product_attention``) computes the
same in fused kernels (flash or memory-efficient attention on a GPU). transformers 5 reads
``config._attn_implementation`` at each attention call, so ``set_attn_implementation``
switches a built model in place, and back.

The candidate (`candidate`) is every outermost ``PreTrainedModel`` in the module tree
that runs eager attention and can run SDPA (`accelkit.torch.measuring.facts.sdpa_refusal`);
a model on SDPA or flash attention already gets none. It is checked against the eager
attention on its first batch like a compiled candidate (the loss and gradients: a mask
SDPA reads otherwise, or a kernel's rounding past the limits, drops it) and timed like the
others; a kept one stays switched after the fit, as ``report.tuning`` says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from accelkit.torch.measuring.facts import sdpa_refusal, transformers_models
from accelkit.torch.tuning.candidate import Candidate, Skipped

if TYPE_CHECKING:
    from accelkit.torch.tuning.engine import Engine

EAGER, SDPA = "eager", "sdpa"


class Attention:
    """The attention implementation of `models`, switched to SDPA (`on`) and back to
    exactly what each config held before (`off`; idempotent).

    Example:
        >>> import transformers
        >>> config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64,
        ...                                  n_positions=8, attn_implementation="eager")
        >>> model = transformers.GPT2LMHeadModel(config)
        >>> switch, why = candidate(model)
        >>> switch.on()
        >>> model.config._attn_implementation
        'sdpa'
        >>> switch.off()
        >>> model.config._attn_implementation
        'eager'
    """

    def __init__(self, models: list[Any]) -> None:
        self._models = models
        self._saved = [(config, config._attn_implementation) for config in _configs(models)]

    @property
    def names(self) -> str:
        """The models switched, for a log line: ``"GPT2LMHeadModel"``."""
        return ", ".join(type(model).__name__ for model in self._models)

    def on(self) -> None:
        """SDPA in every model, or none of them and the error (transformers refused one,
        or kept another implementation)."""
        try:
            for model in self._models:
                model.set_attn_implementation(SDPA)
                now = model.config._attn_implementation
                if now != SDPA:  # set_attn_implementation only warns when it cannot switch
                    raise ValueError(f"{type(model).__name__} kept attn_implementation={now!r}")
        except Exception:
            self.off()
            raise

    def off(self) -> None:
        # Each config's own value back, sub-configs included (a vision tower may differ
        # from its text model): the private field is the one set_attn_implementation
        # writes, and the public setter would copy one value into every sub-config.
        for config, value in self._saved:
            config._attn_implementation_internal = value

    @contextlib.contextmanager
    def off_while(self) -> Iterator[None]:
        """The eager attention for the duration (the check's reference pass), then SDPA."""
        self.off()
        try:
            yield
        finally:
            self.on()


def candidate(module: Any) -> tuple[Attention | None, str | None]:
    """The SDPA switch for `module`'s eager-attention transformers models, or None and
    why a transformers model in it cannot take one (None, None: no candidate to speak
    of: no transformers model, or none on eager attention).

    Example:
        >>> import torch
        >>> candidate(torch.nn.Linear(4, 2))
        (None, None)
    """
    eager = [m for m in transformers_models(module) if _implementation(m) == EAGER]
    if not eager:
        return None, None
    able = [m for m in eager if sdpa_refusal(m) is None]
    if not able:
        return None, "; ".join(str(sdpa_refusal(m)) for m in eager)
    return Attention(able), None


def _implementation(model: Any) -> Any:
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


def _configs(models: list[Any]) -> list[Any]:
    """Every config that ``set_attn_implementation`` may change: each model's and its
    transformers sub-models', and their sub-configs, each once."""
    found: dict[int, Any] = {}
    stack = [
        sub.config
        for model in models
        for sub in model.modules()
        if _implementation(sub) is not None
    ]
    while stack:
        config = stack.pop()
        if id(config) in found:
            continue
        found[id(config)] = config
        subs = (getattr(config, key, None) for key in getattr(config, "sub_configs", None) or ())
        stack.extend(sub for sub in subs if sub is not None)
    return list(found.values())


def lever(engine: Engine) -> Iterator[Candidate | Skipped]:
    """tune's SDPA lever: the run's eager-attention transformers models switched to SDPA
    in place, checked against the eager attention, and left on after the training when
    kept (as ``report.tuning`` says)."""
    switch, why = candidate(engine.door.module)
    if switch is None:
        if why:
            yield Skipped("sdpa", why)
        return
    settings = engine.best.settings.with_(attention=SDPA)
    yield Candidate(settings, on=switch.on, off=switch.off, checked=True, stays=True)
