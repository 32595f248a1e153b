"""AccelkitCallback(tune=...) in real Lightning fits (CPU): the trials run on the fit's own
first batches, a wrong compiled forward is dropped before the fit trains on it."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from accelkit.lightning import AccelkitCallback
from accelkit.torch.tuning import trials

from ..helpers.compiling import compiled_as

STEPS = trials.trial_steps(1, cuda=False) + 6


class Net(torch.nn.Module):
    def __init__(self, constant: bool) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)
        self.constant = constant

    def forward(self, x: Any) -> Any:
        out = self.b(torch.relu(self.a(x)))
        return out * 0.0 if self.constant and torch.compiler.is_compiling() else out


class Classifier(pl.LightningModule):
    def __init__(self, constant: bool = False, manual: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = Net(constant)
        self.automatic_optimization = not manual

    def training_step(self, batch: Any, index: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        if not self.automatic_optimization:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(module: Any, **options: Any) -> AccelkitCallback:
    data = torch.utils.data.TensorDataset(
        torch.randn(8 * STEPS, 16), torch.randint(0, 4, (8 * STEPS,))
    )
    callback = AccelkitCallback(**options)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[callback])  # fmt: skip
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    return callback


def test_tune_runs_the_trials_on_the_fits_first_batches() -> None:
    module = Classifier()
    with compiled_as():
        callback = fit(module, tune=True)
    report = callback.report
    tuning = report.tuning
    assert tuning["decision"] == "tuned" and tuning["steps"] == trials.trial_steps(1, cuda=False)
    names = [c["name"].split("+")[0] for c in tuning["candidates"]]
    assert names == ["eager", "eager", "compile"]
    assert report.steps == STEPS  # every batch trained once, the trials included
    assert report.warmup_steps > tuning["steps"]  # the figures are the kept step's
    compiled = tuning["candidates"][2]
    assert compiled["status"] in ("chosen", "slower"), compiled["why"]
    assert ("forward" in vars(module.net)) == (compiled["status"] == "chosen")


def test_a_wrong_compiled_child_is_dropped_and_the_fit_trains_on() -> None:
    module = Classifier(constant=True)
    with compiled_as():
        callback = fit(module, tune=True)
    compiled = callback.report.tuning["candidates"][2]
    assert compiled["status"] == "failed" and "differs" in compiled["why"], compiled["why"]
    assert "forward" not in vars(module.net)
    assert callback.report.steps == STEPS


def test_a_manual_optimization_module_is_not_tuned_and_says_why() -> None:
    callback = fit(Classifier(manual=True), tune=True)
    assert callback.report.tuning["decision"] == (
        "not tuned: the LightningModule steps its own optimizers (automatic_optimization=False)"
    )


def test_auto_leaves_a_cpu_fit_untouched_and_false_records_nothing() -> None:
    module = Classifier()
    auto = fit(module)
    assert auto.report.tuning["decision"].startswith("not tuned: tune='auto' tunes GPU runs")
    assert fit(Classifier(), tune=False).report.tuning is None
    assert "forward" not in vars(module.net)


def test_a_bad_tune_value_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="tune='yes' is not one of 'auto', True, False"):
        AccelkitCallback(tune="yes")


def test_trials_that_cannot_start_leave_the_fit_training(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelkit.lightning import _tune

    def broken(module: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(_tune, "_with_parameters", broken)
    callback = fit(Classifier(), tune=True)
    assert callback.report.tuning["decision"] == (
        "not tuned: the trials could not start (RuntimeError: boom)"
    )
    assert callback.report.steps == STEPS
