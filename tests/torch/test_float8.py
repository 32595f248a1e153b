"""tune's float8 lever on the CPU: which layers it converts, that it is undone bit for
bit, tried in a real fit on top of the compiled step, and refused by its check.

torchao emulates float8 matmuls on the CPU (``Float8LinearConfig(emulate=True)``: the
values rounded to float8 with the same scales, multiplied in higher precision), so the
conversion, the check against the bf16 step and the undo are real here; only the GPU's
float8 tensor cores are not (`float8.unsupported` is opened for the fits below, and
tests/torch/test_float8_gpu.py runs them on a GPU that has them).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelkit
from accelkit.profiling.run_report import RunReport

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")
pytestmark = pytest.mark.torch

from accelkit.torch.tuning import float8, registry, trials

from ..helpers.compiling import compiled_as
from ..helpers.torch_data import CPU_PLAN

WIDE = 4096 + 16  # past torchao's size filter for any output width


def wide_net() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(WIDE, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def wide_batches(count: int) -> list[Any]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(16, WIDE, generator=generator),
            torch.randint(0, 8, (16,), generator=generator),
        )
        for _ in range(count)
    ]


def snapshot(model: Any) -> dict[str, Any]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def same(model: Any, saved: dict[str, Any]) -> bool:
    state = model.state_dict()
    return state.keys() == saved.keys() and all(torch.equal(state[k], v) for k, v in saved.items())


@pytest.fixture
def float8_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU taken for a GPU with float8 tensor cores (torchao emulates the matmuls),
    and the short runs here for long ones (`float8.unpaid` has tests of its own)."""
    monkeypatch.setattr(float8, "unsupported", lambda torch, device: None)
    monkeypatch.setattr(float8, "unpaid", lambda engine: None)


def fit(model: Any, data: list[Any], **kwargs: Any) -> RunReport:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kwargs.setdefault("tune", True)
    return accelkit.torch.fit(
        model, data, optimizer, torch.nn.CrossEntropyLoss(), plan=CPU_PLAN, progress=False, **kwargs
    )


def trial(report: RunReport, name: str = "float8") -> dict[str, Any]:
    return next(c for c in report.tuning["candidates"] if name in c["name"])


# -- which layers ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9000), st.integers(1, 9000))
def test_a_linear_layer_is_converted_where_its_dimensions_are_multiples_of_16_and_large(
    in_features: int, out_features: int
) -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(in_features, out_features, device="meta"),
        torch.nn.Linear(out_features, 16, device="meta"),  # the head
    )
    aligned = in_features % 16 == 0 and out_features % 16 == 0
    large = in_features > float8.SMALL_IN or out_features > float8.SMALL_OUT
    found = float8.eligible(model)
    assert (found.names == ("0",)) == (aligned and large)
    assert found.left.get("output head kept in bf16") == 1
    assert sum(found.left.values()) + len(found.names) == 2


def test_the_reasons_name_gpt2s_conv1d_layers_and_subclasses_of_linear() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=128, n_positions=16)
    found = float8.eligible(transformers.GPT2LMHeadModel(config))
    assert found.names == ()
    assert found.left["Conv1D layers (Hugging Face GPT-2's; torchao converts nn.Linear only)"] == 4
    assert "Conv1D" in found.why_none()
    attention = float8.eligible(torch.nn.MultiheadAttention(64, 2))
    assert attention.left == {
        "subclasses of nn.Linear (NonDynamicallyQuantizableLinear) left as they are": 1
    }


def test_a_transformers_models_output_embeddings_are_its_head() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=4160, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    found = float8.eligible(model)
    # The MLP's up and gate projections (64 -> 4160) pass the size filter, its down
    # projection (4160 in) too; the head (lm_head, last in the module order but also
    # the model's output embeddings) stays.
    assert set(found.names) == {
        "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"
    }  # fmt: skip
    assert found.left["output head kept in bf16"] == 1


# -- on and off ------------------------------------------------------------------------


def test_float8_layers_go_back_bit_for_bit_with_the_same_parameters_and_hooks() -> None:
    model = wide_net()
    params = list(model.parameters())
    original = model[0]
    calls: list[int] = []
    original.register_forward_hook(lambda *_: calls.append(1))
    layers = float8.Float8Layers(model, ("0",), emulate=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = wide_batches(1)[0]
    layers.on()
    assert type(model[0]).__name__ == "Float8Linear" and model[0].weight is original.weight
    torch.nn.functional.cross_entropy(model(x), y).backward()
    assert calls == [1]  # the original's hooks fire in float8 too
    saved = snapshot(model)  # the weights as training left them
    layers.off()
    layers.off()  # idempotent
    assert model[0] is original and list(model.parameters()) == params
    assert same(model, saved)
    optimizer.step()  # the optimizer still steps the model's own tensors
    assert not same(model, saved)


# -- in a real fit ---------------------------------------------------------------------


@pytest.mark.usefixtures("float8_here")
def test_a_fit_tries_float8_on_its_compiled_step_checked_against_bf16() -> None:
    model = wide_net()
    data = wide_batches(registry.trial_steps(1, cuda=False, float8=True) + 4)
    with compiled_as():
        report = fit(model, data, compile=True)
    tried = trial(report)
    assert tried["settings"]["float8"] is True and tried["settings"]["compile"] is True
    check = tried["check"]
    assert check["failed"] is None and check["grad_limit"] == float8.TOLERANCE.grads
    assert 0 < check["grad_difference"] < float8.TOLERANCE.grads
    kept = tried["status"] == "chosen"
    assert report.tuning["float8"] is kept
    assert (type(model[0]).__name__ == "Float8Linear") is kept  # a kept one stays
    assert type(model[2]) is torch.nn.Linear  # the head never converts


def test_a_short_run_that_compiled_itself_prices_float8_by_its_first_unit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """compile=True fixed the compile, so tune has no compile trial of its own: float8
    was tried however short the run. The baseline's first unit measures the compile."""
    monkeypatch.setattr(float8, "unsupported", lambda torch, device: None)
    model = wide_net()
    data = wide_batches(registry.trial_steps(1, cuda=False, float8=True) + 4)
    with compiled_as():
        report = fit(model, data, compile=True)
    baseline = report.tuning["candidates"][0]
    assert baseline["status"] == "baseline" and baseline["compile_seconds"] > 0
    tried = trial(report)
    assert tried["status"] == "skipped" and "would not pay back" in tried["why"], tried
    assert type(model[0]) is torch.nn.Linear


@pytest.mark.usefixtures("float8_here")
def test_float8_whose_gradients_disagree_is_dropped_and_undone_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A limit float8's rounding cannot meet: the check must refuse it on its first batch.
    monkeypatch.setattr(float8, "TOLERANCE", trials.Tolerance(grads=1e-4, source="test"))
    only = tuple(entry for entry in registry.LEVERS if entry.candidates is float8.lever)
    monkeypatch.setattr(registry, "LEVERS", only)  # no other lever to keep
    model = wide_net()
    data = wide_batches(registry.trial_steps(1, cuda=False, float8=True) + 4)
    with compiled_as():
        report = fit(model, data, compile=True)
    tried = trial(report)
    assert tried["status"] == "failed" and "gradients differ" in tried["why"]
    assert tried["check"]["failed"] == "gradients"
    assert type(model[0]) is torch.nn.Linear and report.tuning["float8"] is False
    # Undone bit for bit: its batch trained again with the compiled step, the run ends on
    # the weights of the same run without tune.
    twin = wide_net()
    with compiled_as():
        fit(twin, data, compile=True, tune=False)
    assert same(model, snapshot(twin))


@pytest.mark.usefixtures("float8_here")
def test_float8_needs_the_kept_step_compiled() -> None:
    with compiled_as():
        report = fit(
            wide_net(), wide_batches(registry.trial_steps(1, cuda=False) + 4), compile=False
        )
    skipped = trial(report)
    assert skipped["status"] == "skipped" and "not compiled" in skipped["why"]


@pytest.mark.usefixtures("float8_here")
def test_a_model_without_a_large_layer_records_why() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    data = [(torch.randn(8, 64), torch.randint(0, 8, (8,)))] * (
        registry.trial_steps(1, cuda=False) + 4
    )
    with compiled_as():
        report = fit(model, data, compile=True)
    assert trial(report)["why"] == (
        "no linear layer large enough for float8 (1 smaller than 4096 in x 1024 out "
        "features; 1 output head kept in bf16)"
    )


def test_no_record_speaks_of_float8_on_the_cpu() -> None:
    with compiled_as():
        report = fit(
            wide_net(), wide_batches(registry.trial_steps(1, cuda=False) + 4), compile=True
        )
    assert not [c for c in report.tuning["candidates"] if "float8" in c["name"]]
    assert report.tuning["float8"] is False


def test_a_gpu_without_float8_tensor_cores_is_named_with_its_capability(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    why = float8.unsupported(torch, torch.device("cuda", 0))
    assert why == (
        "NVIDIA A100-SXM4-80GB has compute capability 8.0: float8 needs compute capability "
        ">= 8.9 (float8 tensor cores: Ada, Hopper, Blackwell)"
    )


@pytest.mark.usefixtures("float8_here")
def test_precision_fp8_converts_every_eligible_layer_and_tune_leaves_them() -> None:
    plan = accelkit.plan_for("H100 SXM", precision="fp8")
    model = wide_net()
    data = wide_batches(registry.trial_steps(1, cuda=False) + 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with compiled_as():
        report = accelkit.torch.fit(
            model, data, optimizer, torch.nn.CrossEntropyLoss(), plan=plan, device="cpu",
            progress=False, tune=True, compile=True,
        )  # fmt: skip
    assert type(model[0]).__name__ == "Float8Linear" and type(model[2]) is torch.nn.Linear
    assert any("float8 (precision='fp8')" in change for change in report.facts["model_changes"])
    assert trial(report)["why"] == (
        "the model's linear layers run in float8 already (precision='fp8', or the script)"
    )


@pytest.mark.usefixtures("float8_here")
def test_a_torchao_that_refuses_the_layers_is_a_failed_record_not_a_failed_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchao.float8.float8_linear import Float8Linear

    def refuse(*_: Any, **__: Any) -> Any:
        raise RuntimeError("this torchao cannot convert the layer")

    monkeypatch.setattr(Float8Linear, "from_float", refuse)
    model = wide_net()
    data = wide_batches(registry.trial_steps(1, cuda=False) + 4)
    with compiled_as():
        report = fit(model, data, compile=True)
    tried = trial(report)
    assert tried["status"] == "failed" and "cannot convert" in tried["why"], tried["why"]
    assert report.steps == len(data) and type(model[0]) is torch.nn.Linear


@given(
    st.integers(0, 200_000),
    st.floats(1.0, 600.0),
    st.floats(0.01, 2.0),
    st.sampled_from(["tune", "script", "script before tune"]),
)
def test_float8_is_priced_at_its_compile_against_a_tenth_of_the_run_left(
    planned: int, compile_seconds: float, step_seconds: float, compiled_by: str
) -> None:
    """Tune's compile prices float8's; where the script or trainer compiled, the
    baseline's first unit does, and where that compiled before tune began (no overhead
    measured), float8 is tried."""
    from types import SimpleNamespace

    from accelkit.profiling.tuning import Trial

    if compiled_by == "tune":
        kept = Trial("compile", {"compile": True}, "chosen", step_seconds=step_seconds,
                     compile_seconds=compile_seconds)  # fmt: skip
        tried = [Trial("eager", {}, "baseline", step_seconds=2 * step_seconds), kept]
    else:
        measured = compile_seconds if compiled_by == "script" else None
        kept = Trial("compile", {"compile": True}, "baseline", step_seconds=step_seconds,
                     compile_seconds=measured)  # fmt: skip
        tried = [kept]
    fixed = None if compiled_by == "tune" else "the trainer compiled the model"
    door = SimpleNamespace(compile_fixed=fixed, planned=planned, unit=1)
    engine = SimpleNamespace(door=door, trials=tried, steps=50, best_trial=lambda: kept)
    left = max(planned - 50, 0) * step_seconds
    paid = float8.COMPILE_FACTOR * compile_seconds <= 0.1 * left
    if compiled_by == "script before tune":
        paid = True  # nothing measured to price it by
    assert (float8.unpaid(engine) is None) == paid  # type: ignore[arg-type]


@pytest.mark.usefixtures("float8_here")
def test_the_float8_matmuls_are_counted_as_float8_and_give_the_reports_share() -> None:
    """The GPU test found float8_share None where tune kept float8: torchao hands
    ``aten.mm`` its float8 tensor subclass and calls ``_scaled_mm`` below every dispatch
    mode, so the counter saw plain matmuls. Each of the converted layer's three matmuls
    (output, input gradient, weight gradient: torchao runs all three in float8) is
    2 x 16 x WIDE x 32 FLOPs."""
    plan = accelkit.plan_for("H100 SXM", precision="fp8")
    model = wide_net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    report = accelkit.torch.fit(
        model, wide_batches(6), optimizer, torch.nn.CrossEntropyLoss(), plan=plan,
        device="cpu", progress=False, tune=False, warmup=1, window=2,
    )  # fmt: skip
    float8_flops = 3 * 2 * 16 * WIDE * 32
    assert report.float8_share == pytest.approx(float8_flops / report.flops_per_step)
    assert report.precision_mfu is None or report.precision_mfu > 0
