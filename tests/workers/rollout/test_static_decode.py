"""The static-cache decoder (workers/rollout/static_decode.py) against the transformers
forward it replaces: the same logits at every step for each supported architecture, with
left-padded prompts fanned out to several rows, compaction, an adapter reload and the
model's base weights shared, not copied. (The conformance suite runs the whole backend on
it; tests/workers/gpu runs it with CUDA graphs in bf16.)"""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from workers.rollout.static_decode import StaticDecoder, supports

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VOCAB = 97
ARCHS = {
    "qwen3": (Qwen3ForCausalLM, Qwen3Config, {"head_dim": 16}),  # per-head q/k norms
    "llama": (LlamaForCausalLM, LlamaConfig, {}),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config, {}),  # q/k/v biases
}


def lora_model(arch: str, targets=TARGETS, **extra):
    cls, config_cls, kw = ARCHS[arch]
    torch.manual_seed(0)
    config = config_cls(
        **{"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 128, "tie_word_embeddings": True, **kw, **extra},
    )  # fmt: skip
    model = get_peft_model(
        cls(config).eval(), LoraConfig(r=4, lora_alpha=8, target_modules=targets)
    )
    randomize_lora_b(model, 0)
    return model


def randomize_lora_b(model, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # B starts at zero: make the adapter matter
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def reference(model, seq: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        return model(input_ids=seq, attention_mask=attn, position_ids=pos).logits[:, -1]


def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, VOCAB, (3, 10), generator=torch.Generator().manual_seed(1))
    attn = torch.ones_like(ids)
    attn[0, :4] = 0  # left padding of different widths
    attn[1, :2] = 0
    return ids.masked_fill(attn == 0, 0), attn


def extend(seq, attn, tokens):
    one = torch.ones((len(tokens), 1), dtype=attn.dtype)
    return torch.cat([seq, tokens[:, None]], 1), torch.cat([attn, one], 1)


@pytest.mark.parametrize("attention", ["bmm", "sdpa", "triton"])  # triton: its reference here
@pytest.mark.parametrize("arch", list(ARCHS))
def test_steps_match_the_transformers_forward(arch, attention):
    model = lora_model(arch)
    decoder = StaticDecoder(model, max_batch=8, graphs=False, attention=attention)
    ids, attn = prompts()
    fan = torch.tensor([0, 0, 1, 2])  # a group of two rows shares prompt 0's prefill
    decoder.reserve(ids.shape[1] + 8)
    logits = decoder.prefill(ids, attn, fan=fan)
    seq, mask = ids[fan], attn[fan]
    torch.testing.assert_close(logits, reference(model, seq, mask), atol=1e-5, rtol=1e-5)
    for _ in range(4):
        tokens = logits.argmax(-1)
        seq, mask = extend(seq, mask, tokens)
        logits = decoder.step(tokens)
        torch.testing.assert_close(logits, reference(model, seq, mask), atol=1e-5, rtol=1e-5)
    # rows 0 and 2 finish: the others move to the front and decode on
    keep = torch.tensor([1, 3])
    decoder.compact(keep)
    tokens = logits[keep].argmax(-1)
    seq, mask = extend(seq[keep], mask[keep], tokens)
    logits = decoder.step(tokens)
    torch.testing.assert_close(logits, reference(model, seq, mask), atol=1e-5, rtol=1e-5)
    assert logits.shape == (2, VOCAB)


def test_an_adapter_reload_reaches_the_decoder_after_refresh():
    model = lora_model("qwen3")
    decoder = StaticDecoder(model, max_batch=4, graphs=False)
    ids, attn = prompts()
    before = decoder.prefill(ids, attn)
    randomize_lora_b(model, 1)  # what load_adapter_tensors does to the PEFT parameters
    decoder.refresh()
    after = decoder.prefill(ids, attn)
    torch.testing.assert_close(after, reference(model, ids, attn), atol=1e-5, rtol=1e-5)
    assert (after - before).abs().max() > 0.1  # the new adapter changed the logits


def test_base_weights_are_shared_not_copied_and_lora_stays_unmerged():
    model = lora_model("llama", targets=["q_proj", "v_proj", "down_proj"])  # some unwrapped
    attn = model.base_model.model.model.layers[0].self_attn
    q_base = attn.q_proj.base_layer.weight.detach().clone()
    decoder = StaticDecoder(model, max_batch=4, graphs=False)
    qkv = decoder.layers[0].qkv
    # the model's q/k/v weights are views of the stacked buffer, with their values
    assert attn.q_proj.base_layer.weight.data_ptr() == qkv.weight.data_ptr()
    assert attn.k_proj.weight.data_ptr() == qkv.weight[qkv.slices[1]].data_ptr()
    assert torch.equal(attn.q_proj.base_layer.weight, q_base)
    ids, attn_mask = prompts()
    torch.testing.assert_close(
        decoder.prefill(ids, attn_mask), reference(model, ids, attn_mask), atol=1e-5, rtol=1e-5
    )


def test_attention_auto_is_sdpa_where_the_triton_kernel_cannot_run():
    # the decode-attention kernel needs a GPU (decode_attention.works probes it there)
    assert StaticDecoder(lora_model("qwen3"), max_batch=4, graphs=False).attention == "sdpa"


def test_unsupported_models_are_named_with_the_reason():
    model = lora_model("qwen2", use_sliding_window=True, sliding_window=8)
    assert supports(model) == "sliding-window attention"
    with pytest.raises(ValueError, match="sliding-window"):
        StaticDecoder(model, max_batch=4)


def test_a_full_cache_is_refused_not_overrun():
    decoder = StaticDecoder(lora_model("qwen2"), max_batch=4, graphs=False)
    ids, attn = prompts()
    logits = decoder.prefill(ids, attn)
    for _ in range(decoder.length - ids.shape[1]):
        logits = decoder.step(logits.argmax(-1))
    with pytest.raises(RuntimeError, match="static cache full"):
        decoder.step(logits.argmax(-1))


def reference_rows(model, seqs: list[list[int]]) -> torch.Tensor:
    """Each sequence's next logits, run on its own (no padding at all)."""
    return torch.cat([reference(model, torch.tensor([s]), torch.ones(1, len(s))) for s in seqs])


def greedy_steps(decoder: StaticDecoder, ids, attn, steps: int):
    """Prefill the prompts and take `steps` greedy steps: the last logits and each row's
    sequence so far (its last argmax not yet fed)."""
    logits = decoder.prefill(ids, attn)
    seqs = [ids[r][attn[r].bool()].tolist() for r in range(ids.shape[0])]
    for _ in range(steps):
        tokens = logits.argmax(-1)
        seqs = [s + [t] for s, t in zip(seqs, tokens.tolist(), strict=True)]
        logits = decoder.step(tokens)
    return logits, seqs


@pytest.mark.parametrize("attention", ["bmm", "sdpa", "triton"])  # triton: its reference here
def test_new_prompts_take_freed_slots_while_the_other_rows_decode_on(attention):
    """Continuous batching: a finished row's slot takes a new prompt, another is appended,
    and every row, old or new, still gets the logits of its own sequence."""
    model = lora_model("qwen3")
    decoder = StaticDecoder(model, max_batch=8, graphs=False, attention=attention)
    ids, attn = prompts()
    decoder.reserve(ids.shape[1] + 12)
    logits, seqs = greedy_steps(decoder, ids, attn, 3)
    # row 1 has finished: slot 1 takes a short new prompt, slot 3 a longer one
    new = [[5, 6, 7], [8, 9, 10, 11, 12, 13]]
    new_ids = torch.tensor([[0, 0, 0, 5, 6, 7], new[1]])
    new_attn = (torch.arange(6) >= torch.tensor([[3], [0]])).long()
    first = decoder.prefill(new_ids, new_attn, slots=[1, 3])
    torch.testing.assert_close(first, reference_rows(model, new), atol=1e-5, rtol=1e-5)
    assert decoder.rows == 4 and decoder.ends[:4] == [13, 6, 13, 6]
    tokens = torch.cat([logits.argmax(-1), first[1:].argmax(-1)])
    tokens[1] = first[0].argmax()
    seqs = [seqs[0], new[0], seqs[2], new[1]]
    for _ in range(3):
        seqs = [s + [t] for s, t in zip(seqs, tokens.tolist(), strict=True)]
        logits = decoder.step(tokens)
        torch.testing.assert_close(logits, reference_rows(model, seqs), atol=1e-5, rtol=1e-5)
        tokens = logits.argmax(-1)
    # then rows leave (compaction keeps each row's own cache index)
    decoder.compact(torch.tensor([1, 3]))
    seqs = [seqs[1] + [tokens[1].item()], seqs[3] + [tokens[3].item()]]
    logits = decoder.step(tokens[[1, 3]])
    torch.testing.assert_close(logits, reference_rows(model, seqs), atol=1e-5, rtol=1e-5)


def test_admission_cannot_grow_the_cache_under_live_rows():
    decoder = StaticDecoder(lora_model("llama"), max_batch=4, graphs=False)
    ids, attn = prompts()
    decoder.prefill(ids, attn)
    wide = torch.ones((1, decoder.length + 5), dtype=torch.long)
    with pytest.raises(RuntimeError, match="reserved before"):
        decoder.prefill(wide, torch.ones_like(wide), slots=[3])


def test_the_compiled_step_is_one_graph_a_half_for_all_layers_and_equals_eager():
    """compile= (inductor on a GPU) compiles the step's two halves around attention; they
    take each layer's tensors as inputs, so dynamo traces them once for every layer (a
    per-layer guard would recompile each layer, and past eight run the rest eager). Traced
    with aot_eager, which needs no compiler: the logits must equal the eager decoder's."""
    import torch._dynamo

    model = lora_model("qwen3", num_hidden_layers=4)
    eager = StaticDecoder(model, max_batch=4, graphs=False)
    compiled = StaticDecoder(model, max_batch=4, graphs=False, compile="aot_eager")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    ids, attn = prompts()
    logits = [d.prefill(ids, attn) for d in (eager, compiled)]
    for _ in range(3):
        tokens = logits[0].argmax(-1)
        logits = [d.step(tokens) for d in (eager, compiled)]
        torch.testing.assert_close(logits[1], logits[0], atol=1e-6, rtol=1e-6)
    assert len(compiled.layers) == 4
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2


def test_a_retired_row_stops_walking_the_cache_until_its_slot_is_taken():
    """A finished row that keeps its slot (waiting for a new group) must not advance: with
    waves of prompts of different widths it would otherwise walk past the cache's end."""
    model = lora_model("qwen2")
    decoder = StaticDecoder(model, max_batch=4, graphs=False)
    ids, attn = prompts()
    decoder.reserve(ids.shape[1] + 6)
    logits = decoder.prefill(ids, attn)
    seqs = [ids[r][attn[r].bool()].tolist() for r in range(3)]
    decoder.retire([0])
    for _ in range(4):
        tokens = logits.argmax(-1)
        seqs = [s + [t] for s, t in zip(seqs, tokens.tolist(), strict=True)]
        logits = decoder.step(tokens)
        torch.testing.assert_close(
            logits[1:], reference_rows(model, seqs[1:]), atol=1e-5, rtol=1e-5
        )
    assert decoder.ends[:3] == [0, 14, 14] and decoder.t[0] == 0
    first = decoder.prefill(torch.tensor([[7, 8]]), torch.ones(1, 2, dtype=torch.long), slots=[0])
    torch.testing.assert_close(first, reference_rows(model, [[7, 8]]), atol=1e-5, rtol=1e-5)
    assert decoder.ends[:3] == [2, 14, 14] and not decoder.retired


@pytest.mark.parametrize("attention", ["bmm", "sdpa", "triton"])  # triton: its reference here
def test_a_parked_row_goes_on_from_its_cache_with_its_whole_sequences_logits(attention):
    """A finished row parked with its cache (an episode waiting for its tool) stays put
    while the others decode on; `extend` then appends its new tokens (suffixes of different
    lengths, rows of different left padding) and every row's logits are those of its whole
    sequence, there and at the steps after, also across a cache grown with its rows kept."""
    model = lora_model("qwen3")
    decoder = StaticDecoder(model, max_batch=4, graphs=False, attention=attention)
    ids, attn = prompts()
    decoder.reserve(ids.shape[1] + 8)
    logits, seqs = greedy_steps(decoder, ids, attn, 3)
    last = logits.argmax(-1).tolist()  # rows 0 and 2 end their turn with these tokens
    held = [decoder.ends[p] for p in (0, 2)]
    decoder.park([0, 2])
    for _ in range(2):  # row 1 decodes on; the parked rows stay where they are
        tokens = logits.argmax(-1)
        seqs[1] = seqs[1] + [tokens[1].item()]
        logits = decoder.step(tokens)
        torch.testing.assert_close(logits[1:2], reference_rows(model, seqs[1:2]))
    assert [decoder.ends[p] for p in (0, 2)] == held
    # the parked rows' sequences (the last token not yet in their caches) and answers
    answers = {0: [last[0], 11, 12, 13, 14], 2: [last[2], 21]}
    assert decoder.reserve(decoder.length + 70, keep=True)  # grown, the rows' caches kept
    first = decoder.extend([0, 2], held, [answers[0], answers[2]])
    seqs[0], seqs[2] = seqs[0] + answers[0], seqs[2] + answers[2]
    torch.testing.assert_close(first, reference_rows(model, [seqs[0], seqs[2]]))
    tokens = logits.argmax(-1)
    tokens[0], tokens[2] = first.argmax(-1)
    for _ in range(3):
        seqs = [s + [t] for s, t in zip(seqs, tokens.tolist(), strict=True)]
        logits = decoder.step(tokens)
        torch.testing.assert_close(logits, reference_rows(model, seqs), atol=1e-5, rtol=1e-5)
        tokens = logits.argmax(-1)


def test_rows_too_near_the_caches_end_for_a_shared_width_go_on_one_by_one():
    """Suffixes are padded to one width; where that would write past the cache's end for
    the row that starts latest, each row is extended at its own width instead, and every
    row still gets its whole sequence's logits."""
    model = lora_model("llama")
    decoder = StaticDecoder(model, max_batch=4, graphs=False)
    ids, attn = prompts()
    decoder.reserve(64)
    logits, seqs = greedy_steps(decoder, ids, attn, 3)
    decoder.park([1])  # row 1 ends its turn early, row 0 near the cache's end
    for _ in range(37):
        tokens = logits.argmax(-1)
        seqs[0] = seqs[0] + [tokens[0].item()]
        logits = decoder.step(tokens)
    decoder.park([0])
    held = [decoder.ends[p] for p in (0, 1)]
    answers = [[7] * (64 - held[0]), list(range(3, 23))]  # row 0's fills the cache
    assert held[0] + len(answers[1]) > decoder.length
    first = decoder.extend([0, 1], held, answers)
    want = reference_rows(model, [seqs[0] + answers[0], seqs[1] + answers[1]])
    torch.testing.assert_close(first, want, atol=1e-5, rtol=1e-5)
    assert decoder.ends[:2] == [64, held[1] + 20]
