"""AccelkitCallback(tune=True) runs the LightningModule's training_step exactly as often as
the Trainer trains batches (issue 35, case E01): neither the FLOP count nor tune's check
against the eager step runs it on the module the Trainer trains, so a step that advances
the module's Python state (a counter that anneals the loss) trains as without accelkit."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from accelkit.lightning import AccelkitCallback
from accelkit.torch.tuning import registry

from ..helpers.compiling import compiled_as

BATCHES = registry.trial_steps(1, cuda=False) + 4


class Annealed(pl.LightningModule):
    """A loss weight annealed by the step's own call counter (a curriculum), no dropout."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
        )
        self.calls = 0
        self.seen: list[float] = []

    def training_step(self, batch: Any, index: int) -> Any:
        self.calls += 1
        x, y = batch
        loss = (0.97**self.calls) * torch.nn.functional.cross_entropy(self.net(x), y)
        self.seen.append(float(loss.detach()))
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def fit(callbacks: list[Any], module: Any = None) -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8 * BATCHES, 16, generator=generator)
    data = torch.utils.data.TensorDataset(x, x[:, :4].argmax(1))
    module = module or Annealed()
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=callbacks)  # fmt: skip
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    return module, trainer


def test_tune_runs_training_step_once_per_trained_batch_and_trains_as_without_it() -> None:
    """Before: 45 training_step calls for 40 batches in E01 (the FLOP pass and the check's
    eager and compiled passes ran on the module), and a different last loss."""
    callback = AccelkitCallback(tune=True, warmup=1, window=4)
    with compiled_as():
        tuned, trainer = fit([callback])
    assert tuned.calls == trainer.global_step == BATCHES == callback.report.steps
    tuning = callback.report.tuning
    checked = [c for c in tuning["candidates"] if c.get("check")]
    assert checked, tuning["candidates"]  # the check ran, on copies of the module
    assert callback.report.flops_per_step > 0  # counted as the first batch trained

    plain, _ = fit([])
    assert plain.calls == BATCHES
    assert tuned.seen == pytest.approx(plain.seen, rel=1e-4)
    for got, want in zip(tuned.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_a_module_that_cannot_be_copied_trains_on_and_its_candidates_are_dropped() -> None:
    """The check runs on a copy; a module holding what cannot be copied (a lock) is not
    checked, and no unchecked candidate trains."""
    import threading

    class Locked(Annealed):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()

    callback = AccelkitCallback(tune=True, warmup=1, window=4)
    with compiled_as():
        module, _ = fit([callback], Locked())
    assert module.calls == BATCHES == callback.report.steps
    compiled = [c for c in callback.report.tuning["candidates"] if c["settings"].get("compile")]
    assert compiled and all(c["status"] in ("failed", "skipped") for c in compiled), compiled
    assert any("could not be copied" in (c.get("why") or "") for c in compiled), compiled
    assert "training_step" not in vars(module) and "forward" not in vars(module.net)
