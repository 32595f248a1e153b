"""accelkit.torch.fit and Meter on models as their libraries train them: transformers
models given dict batches with their labels, models returning a dict, a tuple or a
`ModelOutput`, a loss_fn given the `ModelOutput`; real (unpadded) tokens/s."""

from __future__ import annotations

import pytest

import accelkit

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.torch

from accelkit.profiling.flops_torch import count_train_step_flops

from ..helpers.torch_data import CPU_PLAN, mlp, separable
from ..helpers.transformers_models import bert, gpt2, llama, lm_batches


def fit(model, batches, loss_fn=None, **kwargs):
    kwargs.setdefault("plan", CPU_PLAN)
    kwargs.setdefault("progress", False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=kwargs.pop("lr", 1e-3))
    return accelkit.torch.fit(model, batches, optimizer, loss_fn, **kwargs)


def steady(batches, report):
    """The batches of the steady state (after warm-up), for figures counted by hand."""
    return batches[report.warmup_steps : report.steps]


# -- transformers models, the Hugging Face way ----------------------------------------


def test_gpt2_trains_on_dict_batches_with_labels_and_loss_fn_none():
    """Issue 9: this raised TypeError (a CausalLMOutputWithCrossAttentions divided by 1)."""
    model = gpt2()
    batches = lm_batches(n=4, batch=4, length=32)

    report = fit(model, batches, epochs=4, warmup=2, lr=3e-3)

    assert report.steps == 16 and len(report.losses) == 4
    assert report.losses[-1] < report.losses[0]  # it learns the four batches
    assert report.batch_size == 4
    assert report.tokens_per_second == pytest.approx(
        4 * 32 * report.steady_steps / report.steady_seconds
    )
    # The count is the model's own loss path (labels in the batch), on the first batch.
    assert report.flops_per_step == count_train_step_flops(model, batches[0]).total > 0
    assert report.flops_method == "torch FlopCounterMode on the first step"
    # No attention_mask in these batches: no real-token figure, and the reason.
    assert report.real_tokens_per_second is None
    assert "attention_mask" in report.notes["real_tokens_per_second"]


def test_bert_masked_lm_with_padding_reports_padded_and_real_tokens():
    model = bert("masked_lm")
    lengths = [
        [32, 20, 9, 1],
        [32, 32, 5, 12],
        [16, 16, 16, 16],
        [3, 31, 30, 29],
        [8, 9, 10, 11],
        [32, 1, 1, 1],
    ]
    batches = [
        lm_batches(n=1, batch=4, length=32, real=real, seed=i)[0] for i, real in enumerate(lengths)
    ]

    report = fit(model, batches, warmup=2)

    counted = steady(batches, report)
    assert report.steady_steps == 4
    assert report.tokens_per_second == pytest.approx(4 * 32 * 4 / report.steady_seconds)
    real = sum(int(b["attention_mask"].sum()) for b in counted)  # 331 of 512 positions
    assert real == sum(map(sum, lengths[2:]))
    assert report.real_tokens_per_second == pytest.approx(real / report.steady_seconds)
    assert "real_tokens_per_second" not in report.notes
    assert "real, without padding" in str(report)
    assert (
        accelkit.RunReport.from_dict(report.to_dict()).real_tokens_per_second
        == report.real_tokens_per_second
    )


def test_bert_classifier_with_a_loss_fn_gets_the_model_output_and_the_labels():
    """A dict batch with a loss_fn: the model is called without `labels`, and the loss_fn
    gets the `ModelOutput` as the model returned it, with the labels."""
    model = bert("classification")
    batches = lm_batches(n=5, batch=4, length=16, real=[16, 12, 8, 4], labels="class")
    seen = []

    def loss_fn(output, labels):
        seen.append((type(output).__name__, output.loss, labels.shape))
        return torch.nn.functional.cross_entropy(output.logits, labels)

    report = fit(model, batches, loss_fn, warmup=1)

    # once per trained batch: the FLOPs are counted on the first step as it trains
    assert seen == [("SequenceClassifierOutput", None, (4,))] * 5
    assert report.steps == 5 and report.flops_per_step > 0 and report.losses


def test_llama_trains_on_dict_batches():
    model = llama()
    batches = lm_batches(n=4, batch=2, length=24, real=[24, 10])

    report = fit(model, batches, warmup=1)

    assert report.steps == 4 and report.losses and report.flops_per_step > 0
    assert report.real_tokens_per_second == pytest.approx(
        34 * report.steady_steps / report.steady_seconds
    )


def test_meter_reads_a_batch_encoding_in_a_hand_written_loop():
    """A transformers `BatchEncoding` is a UserDict, not a dict: the meter found no batch
    size and no tokens in it."""
    model = gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [
        transformers.BatchEncoding(b) for b in lm_batches(n=5, batch=2, length=16, real=[16, 7])
    ]
    meter = accelkit.torch.Meter(model, plan=CPU_PLAN, warmup=1, sample_gpu=False)

    with meter:
        for batch in batches:
            with meter.step(batch):
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

    report = meter.report()
    assert report.batch_size == 2 and report.flops_per_step > 0
    assert report.tokens_per_second == pytest.approx(2 * 16 * 4 / report.steady_seconds)
    assert report.real_tokens_per_second == pytest.approx(23 * 4 / report.steady_seconds)


# -- other batch and output forms -----------------------------------------------------


class Returns(torch.nn.Module):
    """An MLP classifier returning its loss in the form given: a dict with "loss",
    ``(loss, logits)``, ``(logits, loss)``, or the loss alone."""

    def __init__(self, form: str) -> None:
        super().__init__()
        self.form, self.net = form, mlp()

    def forward(self, x, y):
        logits = self.net(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        return {
            "dict": {"loss": loss, "logits": logits},
            "loss first": (loss, logits),
            "loss last": (logits, loss),
            "scalar": loss,
        }[self.form]


@pytest.mark.parametrize("form", ["dict", "loss first", "loss last", "scalar"])
def test_the_model_may_return_its_loss_in_a_dict_a_tuple_or_alone(form):
    """A tuple batch and loss_fn=None: the model takes the whole batch, ``model(x, y)``."""
    report = fit(Returns(form), separable(), epochs=3, lr=1e-2)

    assert report.losses[-1] < 0.5 * report.losses[0]
    assert report.batch_size == 32 and report.flops_per_step > 0


def test_a_single_tensor_batch_for_a_model_returning_a_scalar():
    class Autoencoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp(16, 4, 16)

        def forward(self, x):
            return torch.nn.functional.mse_loss(self.net(x), x)

    batches = [x for x, _ in separable()]

    report = fit(Autoencoder(), batches, epochs=3, lr=1e-2)

    assert report.losses[-1] < report.losses[0] and report.batch_size == 32


def test_tuple_batches_with_dict_inputs_and_a_loss_fn():
    class Named(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def forward(self, features):
            return {"logits": self.net(features)}

    batches = [({"features": x}, y) for x, y in separable()]

    report = fit(
        Named(),
        batches,
        lambda out, y: torch.nn.functional.cross_entropy(out["logits"], y),
        epochs=2,
        lr=1e-2,
    )

    assert report.losses[-1] < report.losses[0] and report.batch_size == 32


# -- what cannot be used: a ValueError saying what came and what is accepted ----------


def test_a_transformers_model_without_labels_and_no_loss_fn_is_refused():
    """Issue 9: a TypeError from inside the loop (None divided by 1)."""
    batches = lm_batches(n=2, labels="none")
    with pytest.raises(ValueError, match="CausalLMOutputWithCrossAttentions") as error:
        fit(gpt2(), batches)
    message = str(error.value)
    assert "CausalLMOutputWithCrossAttentions" in message and "loss=None" in message
    assert "labels" in message and "a 0-d tensor" in message and "ModelOutput" in message


def test_a_model_returning_logits_with_no_loss_fn_is_refused():
    """Was a RuntimeError from backward ("grad can be implicitly created only for scalar
    outputs"), which does not say that a loss_fn is missing."""
    with pytest.raises(ValueError, match=r"Tensor of shape \(32, 4\)") as error:
        fit(mlp(), [x for x, _ in separable()][:2], None)
    assert "give a loss_fn" in str(error.value)


def test_an_unreduced_loss_from_the_loss_fn_is_refused():
    loss_fn = torch.nn.CrossEntropyLoss(reduction="none")
    with pytest.raises(ValueError, match=r"loss_fn returned Tensor of shape \(32,\)") as error:
        fit(mlp(), separable(), loss_fn)
    assert "reduction='mean'" in str(error.value)


def test_a_per_token_loss_in_the_output_is_refused():
    class PerToken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def forward(self, x, y):
            return {"loss": torch.nn.functional.cross_entropy(self.net(x), y, reduction="none")}

    with pytest.raises(ValueError, match=r"output\['loss'\] is Tensor of shape \(32,\)"):
        fit(PerToken(), separable())


@pytest.mark.parametrize(
    ("batches", "received"),
    [
        (lambda: [x for x, _ in separable()], "Tensor of shape (32, 16)"),
        (lambda: lm_batches(n=2, labels="none"), "dict with keys ['input_ids']"),
    ],
)
def test_a_loss_fn_with_batches_that_hold_no_targets_is_refused(batches, received):
    """A dict batch with a loss_fn used to be refused as not "(inputs, targets)" whatever
    it held; now its "labels" are the targets, and without them the message says so."""
    with pytest.raises(ValueError, match="with a loss_fn each batch must be") as error:
        fit(gpt2(), batches(), lambda output, targets: output.logits.mean())
    assert received in str(error.value) and "'labels'" in str(error.value)


def test_errors_of_the_model_and_the_loss_fn_pass_through_unchanged():
    batches = [{"x": x, "y": y, "pixel_values": x} for x, y in separable()]
    with pytest.raises(TypeError, match="pixel_values"):  # the model takes no pixel_values
        fit(Returns("scalar"), batches)

    def loss_fn(output, labels):
        raise KeyError("the user's own")

    with pytest.raises(KeyError, match="the user's own"):
        fit(gpt2(), lm_batches(n=2), loss_fn)


def test_a_batch_encoding_moves_to_the_device_whole() -> None:
    """transformers' BatchEncoding is a UserDict, not a dict: every tensor in it moves."""
    from accelkit.torch.training.prepare import to_device

    encoding = transformers.BatchEncoding(
        {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3)}
    )
    moved = to_device(encoding, torch.device("meta"))
    assert {k: v.device.type for k, v in moved.items()} == {
        "input_ids": "meta",
        "attention_mask": "meta",
    }
