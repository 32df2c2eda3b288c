"""The trainer's uncast LoRA inputs (workers/policy/mixed_precision.py): the same flags and the
same forward as PEFT's own disable_input_dtype_casting, from a list of the PEFT layers made
once instead of two walks of the model a forward."""

from __future__ import annotations

import contextlib

import torch
from peft import LoraConfig, get_peft_model
from peft.helpers import disable_input_dtype_casting
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen3Config, Qwen3ForCausalLM

from workers.policy.mixed_precision import tuner_layers, uncast_inputs

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _model():
    config = Qwen3Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, intermediate_size=48, max_position_embeddings=32,
    )  # fmt: skip
    torch.manual_seed(0)
    base = Qwen3ForCausalLM(config).to(torch.bfloat16)  # a bf16 base, the adapter fp32
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # nonzero, so the LoRA path shows in the output
            torch.nn.init.normal_(p, std=0.1)
    return model


def test_uncast_inputs_is_pefts_switch():
    model = _model()
    layers = tuner_layers(model)
    assert len(layers) == 2 * len(TARGETS)
    layers[3].cast_input_dtype_enabled = False  # a layer's own setting comes back as it was

    def flags():
        return [m.cast_input_dtype_enabled for m in layers]

    before = flags()
    ids = torch.randint(0, 64, (2, 12))
    outs = []
    for switch in (lambda: disable_input_dtype_casting(model), lambda: uncast_inputs(layers)):
        with torch.autocast("cpu", dtype=torch.bfloat16), switch():
            assert not any(flags())
            outs.append(model(input_ids=ids).logits)
        assert flags() == before
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
    # what the switch saves: with PEFT's cast on, each LoRA layer (but the one set off by
    # hand) copies its [2, 12, …] input to float32 on top of the norms' own upcasts
    counts = []
    for switch in (contextlib.nullcontext, lambda: uncast_inputs(layers)):
        with torch.autocast("cpu", dtype=torch.bfloat16), switch(), _Float32Copies() as copies:
            model(input_ids=ids)
        counts.append(copies.n)
    assert counts[0] - counts[1] == len(layers) - 1, counts


class _Float32Copies(TorchDispatchMode):
    """Counts activation-shaped ([2, 12, …]) copies to float32."""

    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        to_f32 = func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.float32
        if to_f32 and args[0].dim() == 3 and tuple(args[0].shape[:2]) == (2, 12):
            self.n += 1
        return func(*args, **kwargs)
