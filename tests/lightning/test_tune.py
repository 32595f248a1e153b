"""AccelkitCallback(tune=...) in real Lightning fits (CPU): the trials run on the fit's own
first batches; the compiled candidate is the module's whole training_step (forward and
loss), its self.log calls kept; a wrong compiled step or forward is dropped before the fit
trains on it; nothing stays compiled after the fit."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from accelkit.lightning import AccelkitCallback
from accelkit.torch.tuning import registry, trials

from ..helpers.compiling import (
    NeedsThePool,
    backward_refusing_new_shapes,
    compiled_as,
    graphs_holding_a_pool,
    graphs_out_of_memory,
    refusing,
)
from ..helpers.tuning_record import graphs_trial, taken

STEPS = registry.trial_steps(1, cuda=False) + 6
BASELINE = len(trials.turns(baseline=True))  # the baseline's units: warm-up, then timed
UNITS = len(trials.turns(baseline=False))  # a later candidate's: warm-up, paired rounds
OWN = trials.turns(baseline=False).count(trials.CANDIDATE)  # of them, the candidate's own


class Net(torch.nn.Module):
    def __init__(self, constant: bool) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)
        self.constant = constant

    def forward(self, x: Any) -> Any:
        out = self.b(torch.relu(self.a(x)))
        return out * 0.0 if self.constant and torch.compiler.is_compiling() else out


class Classifier(pl.LightningModule):
    """`constant`: its compiled forward gives constant logits; `wrong_loss`: its compiled
    training_step doubles the loss (the forward alone compiles right); `step_log`: it logs
    ``self.global_step``, a value dynamo guards on that changes every step; `late_log`:
    at that batch index its step calls ``torch.sin`` (which `refusing` fails to compile)."""

    def __init__(
        self,
        constant: bool = False,
        manual: bool = False,
        wrong_loss: bool = False,
        step_log: bool = False,
        late_log: int | None = None,
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = Net(constant)
        self.automatic_optimization = not manual
        self.wrong_loss, self.step_log, self.late_log = wrong_loss, step_log, late_log

    def training_step(self, batch: Any, index: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        if self.wrong_loss and torch.compiler.is_compiling():
            loss = loss * 2.0
        self.log("train_loss", loss)
        self.log("index", float(index))  # a float that changes every step
        self.log_dict({"x_mean": x.mean(), "half": 0.5})
        if self.step_log:
            self.log("step", float(self.global_step))
        if index == self.late_log:
            loss = loss + 0.0 * torch.sin(loss)
        if not self.automatic_optimization:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Steps(pl.Callback):
    """What each training batch logged, whether it ran the compiled training_step, and the
    graphs dynamo had compiled by its end."""

    def __init__(self) -> None:
        self.logged: list[dict[str, float]] = []
        self.compiled: list[bool] = []
        self.graphs: list[int] = []

    def on_train_batch_start(self, trainer: Any, module: Any, *args: Any) -> None:
        # after the AccelkitCallback's: what this batch trains with
        self.compiled.append("training_step" in vars(module))

    def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
        from torch._dynamo.utils import counters

        self.logged.append({k: float(v) for k, v in trainer.callback_metrics.items()})
        self.graphs.append(int(counters["stats"]["unique_graphs"]))


def fit(module: Any, **options: Any) -> AccelkitCallback:
    return fit_with_steps(module, **options)[0]


def fit_with_steps(
    module: Any, batches: int = STEPS, small: int | None = None, **options: Any
) -> tuple[AccelkitCallback, Steps]:
    """A one-epoch fit of `batches` batches of 8 rows (4 for the batch at index `small`)."""
    generator = torch.Generator().manual_seed(2)
    data = torch.utils.data.TensorDataset(
        torch.randn(8 * batches, 16, generator=generator),
        torch.randint(0, 4, (8 * batches,), generator=generator),
    )
    rows = [list(range(8 * i, 8 * i + (4 if i == small else 8))) for i in range(batches)]
    callback, steps = AccelkitCallback(**options), Steps()
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[callback, steps])  # fmt: skip
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_sampler=rows))
    return callback, steps


def by_name(callback: AccelkitCallback) -> dict[str, Any]:
    return {c["name"].split("+")[0]: c for c in callback.report.tuning["candidates"]}


def test_tune_runs_the_trials_on_the_fits_first_batches() -> None:
    module = Classifier()
    with compiled_as():
        callback, steps = fit_with_steps(module, tune=True)
    report = callback.report
    tuning = report.tuning
    assert tuning["decision"] == "tuned"
    assert tuning["steps"] == taken(tuning["candidates"]) <= registry.trial_steps(1, cuda=False)
    names = [c["name"].split("+")[0] for c in tuning["candidates"]]
    # the forward alone: only if it fails; CUDA graphs and max-autotune: on a GPU only
    assert names == ["eager", "eager", "compile step", "cudagraphs", "max-autotune"]
    assert report.steps == STEPS  # every batch trained once, the trials included
    assert report.warmup_steps > tuning["steps"]  # the figures are the kept step's
    compiled = tuning["candidates"][2]
    assert compiled["status"] in ("chosen", "slower"), compiled["why"]
    assert compiled["settings"]["compiled"] == "training_step"
    assert steps.compiled[-1] == (compiled["status"] == "chosen")  # kept for the fit...
    assert "training_step" not in vars(module) and "forward" not in vars(module.net)  # ...only


def test_a_wrong_compiled_training_step_is_dropped_and_the_forward_is_tried() -> None:
    module = Classifier(wrong_loss=True)
    with compiled_as():
        callback, steps = fit_with_steps(module, tune=True)
    step, forward = by_name(callback)["compile step"], by_name(callback)["compile"]
    assert step["status"] == "failed" and "loss" in step["why"], step["why"]
    assert step["steps"] == 1  # checked on its first batch, which trained with the best so far
    assert forward["status"] in ("chosen", "slower"), forward["why"]
    assert forward["settings"]["compiled"] == "forward"
    assert not any(steps.compiled)  # no batch trained through the wrong step
    # Nothing trained on the doubled loss: the logged losses are those of a run without tune.
    _, control = fit_with_steps(Classifier(wrong_loss=True), tune=False)
    got = [row["train_loss"] for row in steps.logged]
    want = [row["train_loss"] for row in control.logged]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_self_log_of_the_compiled_step_reaches_the_trainer_as_without_tune() -> None:
    with compiled_as():
        _, tuned = fit_with_steps(Classifier(), tune=True)
    _, control = fit_with_steps(Classifier(), tune=False)
    compiled = [i for i, on in enumerate(tuned.compiled) if on]
    assert len(compiled) >= OWN - 1, tuned.compiled
    for index in compiled:
        got, want = tuned.logged[index], control.logged[index]
        assert got.keys() == want.keys() == {"train_loss", "index", "x_mean", "half"}
        assert got["index"] == want["index"] == index and got["half"] == 0.5
        assert got["x_mean"] == pytest.approx(want["x_mean"], rel=1e-6)
        assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-3)


def test_the_compiled_step_does_not_recompile_per_step() -> None:
    with compiled_as():
        callback, steps = fit_with_steps(Classifier(), tune=True)
    assert by_name(callback)["compile step"]["status"] in ("chosen", "slower")
    on = [i for i, compiled in enumerate(steps.compiled) if compiled]
    # Its first batches compile (the check's, then the batch index seen changing once);
    # the steps after them run what was compiled, logging a tensor and a float each step.
    # Switched off for the best's units of its paired rounds and on again: no recompile.
    after = [steps.graphs[i] for i in on[2:]]
    assert len(after) >= OWN - trials.WARMUP_UNITS and len(set(after)) == 1, steps.graphs


def test_a_compile_error_after_the_check_falls_back_to_eager_and_the_fit_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the compiled step's second timed unit of its own (the first candidate is the optimizer's,
    # its rounds run once here so that the compiled step's units are known in advance)
    monkeypatch.setattr(trials, "more_rounds", lambda trial: False)
    own = [i for i, who in enumerate(trials.ROUNDS) if who == trials.CANDIDATE]
    late = BASELINE + UNITS + trials.WARMUP_UNITS + own[1]
    module = Classifier(late_log=late)
    with compiled_as(backend=refusing(torch.sin)):
        callback, steps = fit_with_steps(module, tune=True)
    assert steps.compiled[late], steps.compiled  # this batch recompiled, failed, ran eager
    assert callback.report.steps == STEPS
    assert by_name(callback)["compile step"]["status"] in ("chosen", "slower")


def test_a_new_shapes_backward_that_fails_to_compile_falls_back_to_eager_and_the_fit_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: a recompile for a new shape during the compiled step's timed units, whose
    backward pass the compiler could not lower, raised from the Trainer's
    ``loss.backward()`` (AOT autograd lowers a backward pass lazily) and stopped the fit.
    Now the backward is lowered as the step compiles, where the fallback to eager reaches
    it."""
    monkeypatch.setattr(trials, "more_rounds", lambda trial: False)
    own = [i for i, who in enumerate(trials.ROUNDS) if who == trials.CANDIDATE]
    late = BASELINE + UNITS + trials.WARMUP_UNITS + own[1]
    with compiled_as(backend=backward_refusing_new_shapes()):
        callback, steps = fit_with_steps(Classifier(), small=late, tune=True)
    assert steps.compiled[late], steps.compiled  # the small batch ran the compiled step
    assert callback.report.steps == STEPS
    assert by_name(callback)["compile step"]["status"] in ("chosen", "slower")


def test_cuda_graphs_out_of_memory_in_the_trainers_step_end_their_trial_not_the_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: CUDA graphs of the compiled training_step that passed their check and ran
    out of memory in the Trainer's next step stopped the fit. Now the candidate is
    dropped there and the step runs again with the best so far (the device check is told
    CUDA; the graphs fail on their third call, after the check's two)."""
    events = graphs_out_of_memory(monkeypatch, fails_from=3)
    try:
        callback, steps = fit_with_steps(Classifier(), tune=True)
    finally:
        torch._dynamo.reset()
    candidates = callback.report.tuning["candidates"]
    graphed = next(c for c in candidates if c["settings"].get("cudagraphs"))
    assert graphed["status"] == "failed" and "out of memory" in graphed["why"], graphed
    assert events == ["graphs' step", "release"]
    assert callback.report.steps == STEPS and len(steps.logged) == STEPS
    assert all(row.keys() == {"train_loss", "index", "x_mean", "half"} for row in steps.logged)


def test_an_eager_bests_error_in_a_graphs_candidates_rounds_ends_the_trial_not_the_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: with compile not kept, the best so far ran its units of the CUDA-graph
    candidate's paired rounds through the eager training_step, where no compiled wrapper
    stood to hand its error to the trials: out of memory beside the graphs' pool stopped
    the fit. Now the module's layers run guarded while a candidate's trial runs: the
    candidate is dropped, its pool given back, and the layer's forward runs again."""
    pool = graphs_holding_a_pool(monkeypatch, beside_eager=True)
    module = Classifier()
    module.net = NeedsThePool(module.net, pool)
    try:
        callback, steps = fit_with_steps(module, tune=True)
    finally:
        torch._dynamo.reset()
    graphed = graphs_trial(callback.report)
    assert graphed["status"] == "failed" and graphed["why"] == "out of memory", graphed
    assert pool.failed == pool.released == 1  # once, and its pool went back at once
    assert callback.report.steps == STEPS and len(steps.logged) == STEPS
    assert "forward" not in vars(module.net) and "training_step" not in vars(module)


def test_a_training_step_that_fails_to_compile_is_dropped_at_its_check() -> None:
    module = Classifier()
    with compiled_as(backend=refusing(torch.nn.functional.cross_entropy)):
        callback, steps = fit_with_steps(module, tune=True)
    step, forward = by_name(callback)["compile step"], by_name(callback)["compile"]
    assert step["status"] == "failed" and "cannot compile cross_entropy" in step["why"]
    assert forward["status"] in ("chosen", "slower"), forward["why"]
    assert not any(steps.compiled)


def test_a_training_step_that_recompiles_every_step_is_dropped() -> None:
    module = Classifier(step_log=True)
    with compiled_as():  # a trial more: the forward-only compile after it
        callback, _ = fit_with_steps(module, STEPS + UNITS, tune=True)
    step = by_name(callback)["compile step"]
    assert step["status"] == "failed" and "recompiles as it trains" in step["why"], step["why"]
    assert by_name(callback)["compile"]["status"] in ("chosen", "slower")
    assert "training_step" not in vars(module)


def test_a_wrong_compiled_child_is_dropped_and_the_fit_trains_on() -> None:
    module = Classifier(constant=True)
    with compiled_as():
        callback = fit(module, tune=True)
    # "differs" (its loss) or "differ" (its gradients): the batch checked decides
    step, forward = by_name(callback)["compile step"], by_name(callback)["compile"]
    assert step["status"] == "failed" and "differ" in step["why"], step["why"]
    assert forward["status"] == "failed" and "differ" in forward["why"], forward["why"]
    assert "forward" not in vars(module.net) and "training_step" not in vars(module)
    assert callback.report.steps == STEPS


class Quiet(Classifier):
    def log(self, *args: Any, **kwargs: Any) -> None:
        """Logs nothing: dynamo cannot trace Lightning's `log` (a script compiling its own
        training_step must keep it out)."""

    def log_dict(self, *args: Any, **kwargs: Any) -> None:
        """Logs nothing."""


def test_a_training_step_the_script_compiled_is_left_alone() -> None:
    module = Quiet()
    with compiled_as():
        module.training_step = torch.compile(module.training_step)
        script_step = module.training_step
        callback = fit(module, tune=True)
    assert by_name(callback)["compile"] == {**by_name(callback)["compile"], "status": "skipped"}
    assert "the script compiled training_step" in by_name(callback)["compile"]["why"]
    assert vars(module)["training_step"] is script_step


def test_a_manual_optimization_module_is_not_tuned_and_says_why() -> None:
    module = Classifier(manual=True)
    callback, steps = fit_with_steps(module, tune=True)
    assert callback.report.tuning["decision"] == (
        "not tuned: the LightningModule steps its own optimizers (automatic_optimization=False)"
    )
    assert not any(steps.compiled)


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
