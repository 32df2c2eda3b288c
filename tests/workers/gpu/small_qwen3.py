"""A small Qwen3 (GQA, head_dim 64) at random init saved in bf16 with the char tokenizer: the
model of the GPU tests (no weights can be downloaded; the fast paths' behaviour does not
depend on their values)."""

from __future__ import annotations

from pathlib import Path

import torch


def build_small_qwen3(out: Path, device: str = "cpu", **shape) -> Path:
    """`shape` gives the sizes; KV heads (half the heads), head_dim (64) and the positions
    (512) have defaults. `device` draws the weights there (a 0.6B shape: seconds on a GPU)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from workers.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    config = Qwen3Config(
        **{
            "num_key_value_heads": shape["num_attention_heads"] // 2,
            "head_dim": 64,
            "max_position_embeddings": 512,
            **shape,
        },
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    return out
