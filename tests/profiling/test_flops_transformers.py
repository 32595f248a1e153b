"""FLOPs of one training step of real transformers models (GPT-2, BERT, Llama, built from
their config classes), against independent analytic counts.

The analytic count is PaLM's (appendix B): per token, 6·N for the matmul weights N (2·N
forward, 4·N backward: the gradients of each matmul's input and weight) plus 12·L·T·d for
attention over the full T x T scores (QKᵀ and AV, forward and backward). N counts every
weight a matmul multiplies by, the LM head included even when it is the token embedding
(GPT-2, BERT tie them: the lookup is free, the head's matmul is not); embeddings,
biases, norms, softmax and the loss are left out, as in the counter's convention. Every
matmul's input needs a gradient here (the embeddings are trained), so no layer is
discounted. The configs are large enough that those left-out terms are small, and small
enough that a step runs in well under a second on two CPU cores.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accelkit.profiling.flops_torch import count_train_step_flops

from ..helpers.transformers_models import bert, gpt2, llama, lm_batches

pytestmark = pytest.mark.torch

BATCH, LENGTH, DIM, LAYERS, VOCAB = 2, 128, 256, 4, 2048


def palm_flops(
    matmul_params: int,
    layers: int = LAYERS,
    dim: int = DIM,
    length: int = LENGTH,
    batch: int = BATCH,
) -> int:
    """6·N + 12·L·T·d training FLOPs per token (PaLM appendix B), times the tokens."""
    return (6 * matmul_params + 12 * layers * length * dim) * length * batch


def test_gpt2_counts_within_2_percent_of_6N_plus_attention():
    model = gpt2(layers=LAYERS, dim=DIM, heads=4, vocab=VOCAB, context=LENGTH)
    # Per layer: c_attn 3d², attention c_proj d², MLP c_fc 4d² and c_proj 4d²; the LM head
    # d·V (tied to wte).
    matmul_params = LAYERS * 12 * DIM * DIM + DIM * VOCAB

    count = count_train_step_flops(model, lm_batches(1, BATCH, LENGTH, VOCAB)[0])

    assert count.total == pytest.approx(palm_flops(matmul_params), rel=0.02)
    assert any("scalar loss the model returned" in note for note in count.notes)
    assert any("attention" in op for op in count.by_op), "SDPA must be counted"


def test_padding_is_counted_as_computed():
    """The model computes every position, padded or not: the count does not change."""
    model = gpt2(layers=LAYERS, dim=DIM, heads=4, vocab=VOCAB, context=LENGTH)
    full, padded = (
        count_train_step_flops(model, lm_batches(1, BATCH, LENGTH, VOCAB, real=real)[0]).total
        for real in (None, [LENGTH, LENGTH // 4])
    )
    assert padded == full


def test_bert_masked_lm_counts_within_2_percent():
    intermediate = 4 * DIM
    model = bert(
        layers=LAYERS, dim=DIM, heads=4, vocab=VOCAB, context=LENGTH, intermediate=intermediate
    )
    # Per layer: Q, K, V, output 4d², feed-forward 2·d·I; the MLM head's transform d²
    # and its decoder d·V (tied to the word embedding).
    matmul_params = LAYERS * (4 * DIM * DIM + 2 * DIM * intermediate) + DIM * DIM + DIM * VOCAB

    count = count_train_step_flops(model, lm_batches(1, BATCH, LENGTH, VOCAB, real=[LENGTH, 80])[0])

    # Bidirectional attention: the full T x T scores are really computed.
    assert count.total == pytest.approx(palm_flops(matmul_params), rel=0.02)


def test_llama_with_grouped_query_attention_counts_within_2_percent():
    heads, kv_heads, intermediate = 8, 2, 688
    kv_dim = DIM // heads * kv_heads
    model = llama(
        layers=LAYERS,
        dim=DIM,
        heads=heads,
        kv_heads=kv_heads,
        vocab=VOCAB,
        context=LENGTH,
        intermediate=intermediate,
    )
    # Per layer: q and o d², k and v d·kv_dim each, SwiGLU gate, up and down 3·d·I; the
    # untied LM head d·V. Attention runs over all query heads: 12·L·T·d still.
    matmul_params = (
        LAYERS * (2 * DIM * DIM + 2 * DIM * kv_dim + 3 * DIM * intermediate) + DIM * VOCAB
    )

    count = count_train_step_flops(model, lm_batches(1, BATCH, LENGTH, VOCAB)[0])

    assert count.total == pytest.approx(palm_flops(matmul_params), rel=0.02)


def test_a_loss_fn_and_labels_count_the_model_called_without_them():
    """With a loss_fn the labels leave the keyword arguments (accelkit.torch.fit splits
    them off the same way): the model runs no loss of its own, the counted step is the same."""
    model = bert("classification", layers=2, dim=64, heads=2, vocab=VOCAB, context=LENGTH)
    batch = lm_batches(1, BATCH, 32, VOCAB, labels="class")[0]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    seen = []

    def loss_fn(output, labels):
        seen.append(type(output).__name__)
        return torch.nn.functional.cross_entropy(output.logits, labels)

    with_fn = count_train_step_flops(model, inputs, batch["labels"], loss_fn)
    own = count_train_step_flops(model, batch)

    assert seen == ["SequenceClassifierOutput"]  # the ModelOutput, as the model returned it
    assert with_fn.total == own.total > 0
