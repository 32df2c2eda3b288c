"""A byte-level BPE chat tokenizer in the Qwen style, trained locally with `tokenizers`.

What an instruct model from a hub brings, built offline: byte-level BPE (any text encodes;
digits split one a token, as Qwen's pre-tokenizer does), the special tokens `<|endoftext|>`,
`<|im_start|>` and `<|im_end|>`, a chat template in the tokenizer config, and two EOS ids:
`<|im_end|>` ends an assistant turn (the tokenizer's eos) and `<|endoftext|>` ends a
document (also the pad token). Saved with `save_pretrained`, it loads through
AutoTokenizer, vLLM and `apply_chat_template` as a hub model's does.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]  # ids 0, 1, 2

# Qwen2's layout: each message is `<|im_start|>role\ncontent<|im_end|>\n`, and the
# generation prompt opens an assistant turn. (No default system prompt: the prompts of
# the built-in task stay short.)
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


# The tool-use model's template (`model.tiny.task: calculator`) adds, before the messages, a
# system turn listing the tools `apply_chat_template(tools=...)` is given, one JSON schema a
# line, as Qwen's does (shorter). Tool results are messages of role `tool`. The tool-less
# model keeps CHAT_TEMPLATE itself (its recipe hash, so its cached builds, stay).
TOOLS_PREAMBLE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n<tools>\\n' -}}"
    "{%- for tool in tools -%}{{- tool | tojson -}}{{- '\\n' -}}{%- endfor -%}"
    "{{- '</tools><|im_end|>\\n' -}}"
    "{%- endif -%}"
)
TOOLS_CHAT_TEMPLATE = TOOLS_PREAMBLE + CHAT_TEMPLATE


def build_chat_tokenizer(
    corpus: Iterable[str], vocab_size: int = 512, template: str = CHAT_TEMPLATE
) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on `corpus` (the rendered chat texts of a task); deterministic
    for a given corpus and vocab size."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte stays encodable
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
        chat_template=template,
        padding_side="left",  # generation pads prompts on the left
        clean_up_tokenization_spaces=False,
    )


def eos_token_ids(tok: PreTrainedTokenizerFast) -> list[int]:
    """The ids that end a generation: end of turn first (the tokenizer's eos), then end of
    text; what generation_config.json's eos_token_id lists."""
    return [tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(ENDOFTEXT)]
