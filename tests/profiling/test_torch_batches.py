"""The batch and output convention of the PyTorch model libraries
(`accelkit.profiling.torch_batches`): how a batch is split and passed, where the loss is
read, what is refused and how the refusal reads."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.profiling import torch_batches

pytestmark = pytest.mark.torch

LOSS = torch.tensor(0.5)


def test_split_takes_targets_from_a_tuple_or_a_dicts_labels():
    x, y, z = torch.zeros(4, 3), torch.zeros(4), torch.ones(4)
    assert torch_batches.split((x, y)) == (x, y)
    inputs, targets = torch_batches.split([x, y, z])
    assert inputs is x and targets == (y, z)
    inputs, targets = torch_batches.split({"input_ids": x, "labels": y})
    assert inputs == {"input_ids": x} and targets is y
    encoding = transformers.BatchEncoding({"input_ids": x, "labels": y})  # a UserDict
    assert torch_batches.split(encoding) == ({"input_ids": x}, y)


@pytest.mark.parametrize(
    ("batch", "received"),
    [
        (torch.zeros(8, 16), "Tensor of shape (8, 16) torch.float32"),
        ((torch.zeros(8, 16),), "tuple of 1: (Tensor of shape (8, 16)"),
        (
            {"input_ids": torch.zeros(2, 3, dtype=torch.long), "attention_mask": None},
            "dict with keys ['input_ids', 'attention_mask']",
        ),
    ],
)
def test_a_batch_without_targets_is_refused_when_there_is_a_loss_fn(batch, received):
    with pytest.raises(ValueError, match="with a loss_fn each batch must be") as error:
        torch_batches.split(batch)
    message = str(error.value)
    assert received in message
    assert "'labels'" in message and "(inputs, targets)" in message and "loss_fn=None" in message


def test_call_passes_dicts_as_keywords_tuples_as_positions_else_one_argument():
    def model(*args, **kwargs):
        return args, kwargs

    x = torch.zeros(2)
    assert torch_batches.call(model, {"a": x}) == ((), {"a": x})
    assert torch_batches.call(model, (x, x)) == ((x, x), {})
    assert torch_batches.call(model, x) == ((x,), {})


@pytest.mark.parametrize(
    "output",
    [
        LOSS,
        {"loss": LOSS, "logits": torch.zeros(2, 3)},
        transformers.modeling_outputs.CausalLMOutput(loss=LOSS, logits=torch.zeros(2, 3)),
        collections.namedtuple("Out", "logits loss")(torch.zeros(2, 3), LOSS),  # noqa: PYI024 .loss
        (LOSS, torch.zeros(2, 3)),  # transformers' return_dict=False
        [torch.zeros(2, 3), LOSS],  # nanoGPT's (logits, loss)
    ],
)
def test_the_loss_is_read_from_every_accepted_output(output):
    assert torch_batches.loss_of(output) is LOSS


@pytest.mark.parametrize(
    ("output", "received", "hint"),
    [
        (
            transformers.modeling_outputs.CausalLMOutput(logits=torch.zeros(2, 3)),
            "CausalLMOutput with keys ['logits'], loss=None",
            "without labels",
        ),
        ({"logits": torch.zeros(2, 3)}, "dict with keys ['logits']", "give a loss_fn"),
        ({"loss": None}, "output['loss'] is None", "without labels"),
        (torch.zeros(4, 3), "Tensor of shape (4, 3) torch.float32", "reduce the loss"),
        (
            (torch.zeros(2, 3), None),
            "tuple of 2: (Tensor of shape (2, 3) torch.float32, None)",
            "give a loss_fn",
        ),
        (torch.tensor(3), "Tensor of shape () torch.int64", "give a loss_fn"),
        (None, "returned None", "without labels"),
        ("text", "returned str", "give a loss_fn"),
    ],
)
def test_an_output_without_a_loss_is_refused_naming_it_and_what_is_accepted(output, received, hint):
    with pytest.raises(ValueError, match="with loss_fn=None") as error:
        torch_batches.loss_of(output)
    message = str(error.value)
    assert received in message and hint in message
    assert "with loss_fn=None the model's output must be a 0-d tensor" in message
    assert "ModelOutput with a 'loss'" in message and "tuple/list holding one 0-d tensor" in message


def test_a_loss_fn_returning_an_unreduced_loss_is_refused():
    with pytest.raises(ValueError, match=r"loss_fn returned Tensor of shape \(8,\)") as error:
        torch_batches.loss_of(torch.ones(8), source=torch_batches.LOSS_FN)
    assert "loss_fn must return a 0-d tensor" in str(error.value)
    assert "reduction='mean'" in str(error.value)


def test_token_ids_prefer_input_ids_and_the_mask_must_match_their_shape():
    ids, mask = torch.ones(4, 7, dtype=torch.long), torch.ones(4, 7)
    pixels = torch.zeros(4, 3, 8, 8)
    batch = {"pixel_values": pixels, "input_ids": ids, "attention_mask": mask}
    assert torch_batches.token_ids(batch) is ids
    assert torch_batches.attention_mask(batch, ids) is mask
    assert (
        torch_batches.attention_mask({"input_ids": ids, "attention_mask": mask[:, :3]}, ids) is None
    )
    assert torch_batches.token_ids((pixels, ids)) is None  # the first tensor: images
    assert torch_batches.token_ids(torch.zeros(4, 7)) is None  # float: not token ids
    assert torch_batches.batch_size({"scale": torch.tensor(2.0), "x": pixels}) == 4


# -- any container, any shape --------------------------------------------------------

CONTAINERS = ("tensor", "tuple", "list", "dict", "dict+mask", "encoding+mask")


def _batch(kind: str, ids, lengths):
    mask = (torch.arange(ids.shape[1])[None, :] < torch.tensor(lengths)[:, None]).long()
    labels = torch.zeros(ids.shape[0], dtype=torch.long)
    if kind == "tensor":
        return ids
    if kind in ("tuple", "list"):
        return (tuple if kind == "tuple" else list)([ids, labels])
    batch = {"input_ids": ids, "labels": labels}
    if kind.endswith("+mask"):
        batch["attention_mask"] = mask
    return transformers.BatchEncoding(batch) if kind.startswith("encoding") else batch


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(CONTAINERS),
    size=st.integers(1, 6),
    length=st.integers(1, 9),
    data=st.data(),
)
def test_samples_tokens_and_real_tokens_of_any_container(kind, size, length, data):
    lengths = data.draw(st.lists(st.integers(0, length), min_size=size, max_size=size))
    ids = torch.randint(0, 50, (size, length))
    batch = _batch(kind, ids, lengths)

    assert torch_batches.batch_size(batch) == size
    assert torch_batches.token_ids(batch) is ids
    mask = torch_batches.attention_mask(batch, ids)
    assert (mask is not None) == kind.endswith("+mask")
    if mask is not None:
        assert int(mask.sum()) == sum(lengths)
    if kind == "tensor":
        with pytest.raises(ValueError, match="Tensor of shape"):
            torch_batches.split(batch)
    else:
        inputs, targets = torch_batches.split(batch)
        assert targets.shape == (size,)
        received = torch_batches.call(lambda *a, **k: (a, k), inputs)
        assert any(t is ids for t in (*received[0], *received[1].values()))
