"""Chat tokenizers built here, with `tokenizers`, in the styles of the two model families the
field trains most (no hub): special tokens are single ids, and each has a chat template
written in the Jinja those models' own templates use."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from workers.adapters.lora import load_tokenizer

CORPUS = [
    "You are a careful assistant. Add the numbers and put the answer in a box.",
    "What is 12+30? Answer: 42. The sum of 7 and 8 is 15. Reverse abc to get cba.",
    "system user assistant think Please reason step by step, then answer.",
]

LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{- message['content'] | trim }}{{- '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

STYLES = {
    "llama3": {
        "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                     "<|end_header_id|>", "<|eot_id|>"],
        "bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "template": LLAMA3_TEMPLATE,
    },
    "qwen3": {
        "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
        "bos": None, "eos": "<|im_end|>", "template": QWEN3_TEMPLATE,
    },
}  # fmt: skip


def build_chat_tokenizer(out: Path, style: str, template: str | None = "default") -> Path:
    """A byte-level BPE tokenizer directory, saved and read back as a model's would be."""
    cfg = STYLES[style]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=cfg["specials"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=cfg["bos"],
        eos_token=cfg["eos"],
        pad_token=cfg["eos"],
        chat_template=cfg["template"] if template == "default" else template,
    )
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="session", params=sorted(STYLES))
def chat_tokenizer(request, tmp_path_factory):
    """(style, tokenizer) for each style, loaded the way a run loads its model's."""
    path = build_chat_tokenizer(tmp_path_factory.mktemp(request.param), request.param)
    return request.param, load_tokenizer(path)


@pytest.fixture(scope="session")
def qwen3_tokenizer(tmp_path_factory):
    return load_tokenizer(build_chat_tokenizer(tmp_path_factory.mktemp("qwen3"), "qwen3"))


@pytest.fixture(scope="session")
def base_tokenizer(tmp_path_factory):
    """A tokenizer without a chat template (a base model's)."""
    path = build_chat_tokenizer(tmp_path_factory.mktemp("base"), "qwen3", template=None)
    return load_tokenizer(path)


# a template written in the tiny model's character vocabulary (it has no '<', '|' or newline)
TINY_TEMPLATE = (
    "{%- for m in messages %}{{ m['role'] }}: {{ m['content'] }}; {% endfor %}"
    "{%- if add_generation_prompt %}assistant: {% endif %}"
)


@pytest.fixture(scope="session")
def chat_tiny_dir(tiny_dir: Path, tmp_path_factory) -> Path:
    """The tiny model with a chat template in its tokenizer config, as an instruct model's
    directory has one."""
    out = tmp_path_factory.mktemp("chat-tiny") / "model"
    shutil.copytree(tiny_dir, out)
    tok = load_tokenizer(out)
    tok.chat_template = TINY_TEMPLATE
    tok.save_pretrained(out)
    return out
