"""The LightningModule's own ``training_step`` compiled whole, its ``self.log`` calls made
after the compiled code.

Compiling the module's children leaves the loss that ``training_step`` computes eager: on
a 50k vocabulary the cross-entropy (logits upcast, softmax and its backward) is what
separates Lightning + accelkit (1.16x ``bf16-mixed`` on GPT-2 small, H200) from accelkit's
own fit (1.29x), which compiles forward and loss together. Compiling ``training_step``
covers both.

Dynamo (torch 2.13) cannot trace ``LightningModule.log``: it inlines it and fails inside
``inspect.getfullargspec`` (``InternalTorchDynamoError``, an error, not a graph break).
So while the compiled step runs, ``self.log`` and ``self.log_dict`` record their
arguments (a list append: dynamo returns the logged tensors as outputs of the graph), and
the real calls are made in order once the compiled code returns, still inside the
Trainer's step, where Lightning expects them.

The compiled function is ``training_step``'s own, with the module as its first argument
(`accelkit.torch.tuning.in_trainer.compiled_method`): tune's check runs it on a copy of
the module (`accelkit.torch.tuning.reference.copy_of`), which leaves the module's own
Python state to the Trainer's steps, and those steps reuse what the check compiled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from accelkit.torch.tuning import graphs
from accelkit.torch.tuning.compiling import always
from accelkit.torch.tuning.in_trainer import as_it_is, bound, compiled_method, never, rescued

_LOGGING = ("log", "log_dict")


class CompiledStep:
    """``torch.compile`` of `module`'s ``training_step``, switched on and off in place.

    `on` sets the compiled step as the module's ``training_step`` attribute (the one the
    Trainer calls; it keeps the signature Lightning inspects), `off` puts back exactly
    what was there. While `strict()` (tune's check) a call raises what compiling raises,
    so the check drops the candidate with the reason; other calls fall back to the eager
    step for a frame that fails to compile (a recompile on a new shape, its backward pass
    included: `accelkit.torch.tuning.in_trainer.compiled_method`) instead of stopping
    the fit, and an error that `rescue` takes as the trial's end (CUDA graphs out of
    memory: `accelkit.torch.tuning.in_trainer.TrainerTrials.rescue`) runs the module's
    ``training_step`` as it is then, the best so far's.

    Example:
        >>> import torch
        >>> class Module(torch.nn.Module):   # a LightningModule's training_step and log
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net, self.logged = torch.nn.Linear(4, 2), {}
        ...     def log(self, name, value):
        ...         self.logged[name] = value
        ...     def training_step(self, batch, batch_idx):
        ...         loss = self.net(batch).square().mean()
        ...         self.log("loss", loss)
        ...         return loss
        >>> module = Module()
        >>> step = CompiledStep(torch, module, backend="eager")
        >>> step.on()
        >>> loss = module.training_step(torch.ones(3, 4), 0)
        >>> bool(module.logged["loss"] == loss)
        True
        >>> step.off()
        >>> "training_step" in vars(module)
        False
    """

    def __init__(
        self,
        torch: Any,
        module: Any,
        rescue: Callable[[BaseException], bool] = never,
        strict: Callable[[], bool] = always,
        **options: Any,
    ) -> None:
        self._module = module
        self._saved = vars(module).get("training_step")
        self._compiled, function = compiled_method(
            torch, module, "training_step", strict, **options
        )
        # In a mode that captures CUDA graphs, what the step returns and logs is copied
        # out of the graphs' memory, which the next step's replay overwrites.
        self._copied_out: Callable[[Any], Any] = lambda value: value
        if graphs.captures(options.get("mode")):
            self._copied_out = functools.partial(graphs.copied_out, torch)
        self._calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._guarded = rescued(self._run, rescue, as_it_is("training_step"))
        # A method of the module (a copy binds it to itself), signed as the user's: its
        # ``__wrapped__`` is what Lightning's signature checks read (batch_idx,
        # dataloader_iter).
        self._step = (
            bound(self._guarded, function, module)
            if function is not None
            else functools.update_wrapper(self._entry(), module.training_step)
        )
        self._takes_module = function is not None

    def on(self) -> None:
        self._module.training_step = self._step

    def off(self) -> None:
        if self._saved is None:
            vars(self._module).pop("training_step", None)
        else:
            self._module.training_step = self._saved

    def _entry(self) -> Callable[..., Any]:
        # A training_step that is no method of the module (a wrapper's function): called
        # as it is, on the module.
        def training_step(*args: Any, **kwargs: Any) -> Any:
            return self._guarded(self._module, *args, **kwargs)

        return training_step

    def _run(self, module: Any, *args: Any, **kwargs: Any) -> Any:
        """The compiled step on `module` (the trained one, or the check's copy)."""
        saved = {name: vars(module).get(name) for name in _LOGGING}
        module.log, module.log_dict = self._record_log, self._record_log_dict
        if self._takes_module:
            args = (module, *args)
        try:
            output = self._compiled(*args, **kwargs)
        finally:
            calls, self._calls = self._calls, []
            for name, value in saved.items():
                if value is None:
                    vars(module).pop(name, None)
                else:
                    setattr(module, name, value)
        for name, call_args, call_kwargs in self._copied_out(calls):
            getattr(module, name)(*call_args, **call_kwargs)
        return output

    def _record_log(self, *args: Any, **kwargs: Any) -> None:
        self._calls.append(("log", args, kwargs))

    def _record_log_dict(self, *args: Any, **kwargs: Any) -> None:
        self._calls.append(("log_dict", args, kwargs))
