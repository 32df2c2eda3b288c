"""Per-row adapters in the static decoder (issue 21): rows of three adapters of different
ranks (2, 4 and 8, zero-padded to the table's 8) in one batch each get the logits of their
own adapter's PEFT forward, at prefill, every decode step and after compaction; a swap into
one slot changes that slot's rows only. fp32 on the CPU."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import Qwen3Config, Qwen3ForCausalLM

from workers.rollout.static_decode import StaticDecoder

from .test_static_decode import TARGETS, VOCAB, extend, prompts, reference

# name → (rank, alpha, targets): different ranks, scales and target modules
ADAPTERS = {
    "a": (2, 4, TARGETS),
    "b": (4, 16, ["q_proj", "v_proj", "down_proj"]),
    "c": (8, 8, TARGETS),
    "d": (4, 8, ["k_proj", "o_proj", "gate_proj", "up_proj"]),  # swapped into b's slot
}
SLOT = {"a": 0, "b": 1, "c": 2}


def multi_adapter_model():
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=128, tie_word_embeddings=True,
    )  # fmt: skip
    model = None
    for name, (r, alpha, targets) in ADAPTERS.items():
        cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=targets)
        if model is None:
            model = get_peft_model(Qwen3ForCausalLM(config).eval(), cfg, adapter_name=name)
        else:
            model.add_adapter(name, cfg)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "lora_B" in key:  # B starts at zero: make every adapter matter
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model.eval()


def load(decoder: StaticDecoder, model, name: str, slot: int) -> None:
    r, alpha, _ = ADAPTERS[name]
    decoder.set_adapter(slot, get_peft_model_state_dict(model, adapter_name=name), alpha / r)


def under(model, name: str, seq: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    model.set_adapter(name)
    return reference(model, seq, attn)


def per_row(model, names: list[str], seq, attn) -> torch.Tensor:
    """Each row's logits under its own adapter's PEFT forward."""
    return torch.cat(
        [under(model, n, seq[i : i + 1], attn[i : i + 1]) for i, n in enumerate(names)]
    )


@pytest.fixture(scope="module")
def model():
    return multi_adapter_model()


def test_rows_of_three_adapters_get_their_own_adapters_logits(model):
    decoder = StaticDecoder(model, max_batch=8, graphs=False, adapters=3, max_rank=8)
    assert decoder.max_rank == 8
    for name, slot in SLOT.items():
        load(decoder, model, name, slot)
    ids, attn = prompts()
    # prompt 0 twice (under a and under b), prompts 1 and 2 under c and a; prompt 0's
    # a-copy fans out to two rows
    ids, attn = torch.cat([ids[:1], ids]), torch.cat([attn[:1], attn])
    slots = torch.tensor([0, 1, 2, 0])
    fan = torch.tensor([0, 0, 1, 2, 3])
    names = ["a", "a", "b", "c", "a"]
    decoder.reserve(ids.shape[1] + 8)
    logits = decoder.prefill(ids, attn, fan=fan, adapters=slots)
    seq, mask = ids[fan], attn[fan]
    want = per_row(model, names, seq, mask)
    torch.testing.assert_close(logits, want, atol=1e-5, rtol=1e-5)
    # the adapters differ: a row served another adapter would show
    assert (under(model, "b", seq[:1], mask[:1]) - want[:1]).abs().max() > 0.1
    for _ in range(3):
        tokens = logits.argmax(-1)
        seq, mask = extend(seq, mask, tokens)
        logits = decoder.step(tokens)
        torch.testing.assert_close(logits, per_row(model, names, seq, mask), atol=1e-5, rtol=1e-5)
    keep = torch.tensor([2, 3])  # rows of b and c move to the front and keep their slots
    decoder.compact(keep)
    tokens = logits[keep].argmax(-1)
    seq, mask = extend(seq[keep], mask[keep], tokens)
    logits = decoder.step(tokens)
    torch.testing.assert_close(logits, per_row(model, ["b", "c"], seq, mask), atol=1e-5, rtol=1e-5)


def test_a_swap_into_one_slot_changes_only_that_slots_rows(model):
    decoder = StaticDecoder(model, max_batch=8, graphs=False, adapters=3, max_rank=8)
    for name, slot in SLOT.items():
        load(decoder, model, name, slot)
    ids, attn = prompts()
    slots = torch.tensor([0, 1, 2])
    before = decoder.prefill(ids, attn, adapters=slots)
    probe = ids[1][attn[1].bool()].tolist()
    scored = [decoder.score(probe, s) for s in range(3)]
    load(decoder, model, "d", 1)
    after = decoder.prefill(ids, attn, adapters=slots)
    assert torch.equal(after[0], before[0]) and torch.equal(after[2], before[2])
    torch.testing.assert_close(
        after[1:2], under(model, "d", ids[1:2], attn[1:2]), atol=1e-5, rtol=1e-5
    )
    assert (after[1] - before[1]).abs().max() > 0.1
    # the probe's path: every position's logits under one slot, the batch untouched
    rescored = [decoder.score(probe, s) for s in range(3)]
    assert torch.equal(rescored[0], scored[0]) and torch.equal(rescored[2], scored[2])
    seq = torch.tensor([probe])
    model.set_adapter("d")
    with torch.no_grad():
        full = model(input_ids=seq).logits[0]
    torch.testing.assert_close(rescored[1], full, atol=1e-5, rtol=1e-5)
    # an emptied slot serves the base model
    decoder.set_adapter(1, None, 1.0)
    with model.disable_adapter():
        base = reference(model, ids[1:2], attn[1:2])
    empty = decoder.prefill(ids, attn, adapters=slots)
    torch.testing.assert_close(empty[1:2], base, atol=1e-5, rtol=1e-5)


def test_adapters_that_do_not_fit_are_refused(model):
    decoder = StaticDecoder(model, max_batch=4, graphs=False, adapters=2, max_rank=8)
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_{}.weight"
    big = {key.format("A"): torch.zeros(16, 64), key.format("B"): torch.zeros(64, 16)}
    with pytest.raises(ValueError, match="rank 16 does not fit slots of rank 8"):
        decoder.set_adapter(0, big, 1.0)
    with pytest.raises(ValueError, match="outside the table"):
        load(decoder, model, "a", 2)
    with pytest.raises(ValueError, match="names no linear"):
        decoder.set_adapter(0, {"base_model.model.lm_head.lora_A.weight": torch.zeros(2, 64)}, 1)
