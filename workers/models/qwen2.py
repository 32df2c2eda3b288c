"""What both locally built models (the tiny one, tiny.py, and the chat one, chat_model.py)
are made of: their Qwen2 config and the right-padded rows of their supervised warm-up."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config

from ..spec import TinyModelSpec

MAX_POSITIONS = 64  # the tiny model's context; the chat model sets its own


def qwen2_config(
    spec: TinyModelSpec,
    tok: PreTrainedTokenizerFast,
    max_positions: int = MAX_POSITIONS,
    eos_token_id: int | None = None,
    bos_token_id: int | None = None,
) -> Qwen2Config:
    """The Qwen2 config of a locally built model (the tiny and the chat one); EOS and BOS
    default to the tokenizer's EOS."""
    eos = tok.eos_token_id if eos_token_id is None else eos_token_id
    return Qwen2Config(
        vocab_size=len(tok),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=eos if bos_token_id is None else bos_token_id,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
        rope_theta=10000.0,
        torch_dtype="float32",
    )


def pad_rows(
    rows: list[tuple[list[int], list[int]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, labels) rows, right-padded into [B, L] ids, attention mask and labels."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id)  # [B, L]
    labels = torch.full((len(rows), width), -100)  # [B, L]
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (x, y) in enumerate(rows):
        ids[i, : len(x)], labels[i, : len(y)], attn[i, : len(x)] = (
            torch.tensor(x),
            torch.tensor(y),
            1,
        )
    return ids, attn, labels
