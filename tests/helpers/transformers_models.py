"""Tiny Hugging Face transformers models built from their config classes (no download),
and the dict batches their libraries feed them, shared by the torch and profiling tests.

Import it after ``pytest.importorskip("transformers")``:

    from ..helpers.transformers_models import gpt2, lm_batches
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

# Token ids inside the small vocabularies, so configs do not warn about GPT-2's 50256.
_SPECIAL = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}


def gpt2(
    layers: int = 2,
    dim: int = 64,
    heads: int = 2,
    vocab: int = 1000,
    context: int = 64,
    seed: int = 0,
) -> Any:
    """`GPT2LMHeadModel` (LM head tied to the token embedding), dropout off."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=layers,
        n_embd=dim,
        n_head=heads,
        vocab_size=vocab,
        n_positions=context,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **_SPECIAL,
    )
    return transformers.GPT2LMHeadModel(config)


def bert(
    head: str = "masked_lm",
    layers: int = 2,
    dim: int = 64,
    heads: int = 2,
    vocab: int = 1000,
    context: int = 64,
    intermediate: int | None = None,
    labels: int = 3,
    seed: int = 0,
) -> Any:
    """`BertForMaskedLM` (``head="masked_lm"``) or `BertForSequenceClassification`
    (``head="classification"``, `labels` classes), dropout off."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        num_hidden_layers=layers,
        hidden_size=dim,
        num_attention_heads=heads,
        vocab_size=vocab,
        intermediate_size=intermediate or 4 * dim,
        max_position_embeddings=context,
        num_labels=labels,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=0,
    )
    model = (
        transformers.BertForMaskedLM
        if head == "masked_lm"
        else transformers.BertForSequenceClassification
    )
    return model(config)


def llama(
    layers: int = 2,
    dim: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 1000,
    context: int = 64,
    intermediate: int | None = None,
    seed: int = 0,
) -> Any:
    """`LlamaForCausalLM` with grouped-query attention (`kv_heads` < `heads`), untied head."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=dim,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        intermediate_size=intermediate or 3 * dim,
        max_position_embeddings=context,
        **_SPECIAL,
    )
    return transformers.LlamaForCausalLM(config)


def lm_batches(
    n: int = 6,
    batch: int = 4,
    length: int = 32,
    vocab: int = 1000,
    real: list[int] | None = None,
    labels: str = "ids",
    seed: int = 0,
) -> list[dict[str, torch.Tensor]]:
    """`n` dict batches as a tokenizer and collator give them: ``input_ids``,
    ``attention_mask`` and ``labels``.

    Args:
        real: the unpadded length of each row (right padding with id 0, mask 0); None:
            no padding, and no ``attention_mask`` key at all.
        labels: ``"ids"`` (causal or masked LM: the ids, -100 on padding),
            ``"class"`` (one class per row, of 3), or ``"none"`` (no ``labels`` key).
    """
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(1, vocab, (batch, length), generator=generator)
        item = {"input_ids": ids}
        if real is not None:
            mask = (torch.arange(length)[None, :] < torch.tensor(real)[:, None]).long()
            item["input_ids"] = ids = ids * mask
            item["attention_mask"] = mask
        if labels == "ids":
            item["labels"] = ids.masked_fill(item.get("attention_mask", ids + 1) == 0, -100)
        elif labels == "class":
            item["labels"] = torch.randint(0, 3, (batch,), generator=generator)
        out.append(item)
    return out
