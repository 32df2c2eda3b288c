"""Prompt token ids: the tokenizer's own chat template with the generation prompt for chat
messages, the plain encoding for strings; the same ids through `load_task` and the loop."""

from __future__ import annotations

import pytest

from workers.data import Example, Task, load_task, prompt_ids, prompt_text
from workers.data.prompts import as_chat
from workers.spec import DataSpec, spec_errors

CHAT = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is 12+30?"},
]


def expected_text(style: str, messages, thinking: bool = True) -> str:
    """The conversation rendered by hand the way each family's template lays it out."""
    if style == "llama3":
        turns = "".join(
            f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content']}<|eot_id|>"
            for m in messages
        )
        return "<|begin_of_text|>" + turns + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    tail = "" if thinking else "<think>\n\n</think>\n\n"
    return turns + "<|im_start|>assistant\n" + tail


def test_chat_ids_equal_apply_chat_template(chat_tokenizer):
    style, tok = chat_tokenizer
    reference = tok.apply_chat_template(
        CHAT, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    ids = prompt_ids(tok, CHAT)
    assert ids == list(reference)
    # ... and both are the hand-rendered layout, special tokens as single ids, one BOS at most
    assert ids == tok.encode(expected_text(style, CHAT), add_special_tokens=False)
    if tok.bos_token_id is not None:
        assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert prompt_text(tok, CHAT) == expected_text(style, CHAT)


def test_template_kwargs_pass_through(qwen3_tokenizer):
    tok = qwen3_tokenizer
    off = {"enable_thinking": False}
    reference = tok.apply_chat_template(
        CHAT, add_generation_prompt=True, tokenize=True, return_dict=False, **off
    )
    assert prompt_ids(tok, CHAT, off) == list(reference)
    assert prompt_text(tok, CHAT, off) == expected_text("qwen3", CHAT, thinking=False)
    assert prompt_ids(tok, CHAT, off) != prompt_ids(tok, CHAT)


def test_string_prompts_are_encoded_as_they_are(chat_tokenizer):
    _, tok = chat_tokenizer
    assert prompt_ids(tok, "12+30=") == tok.encode("12+30=", add_special_tokens=False)
    assert prompt_text(tok, "12+30=") == "12+30="


def test_as_chat():
    assert as_chat("q", system_prompt=None, chat_template=False) == "q"
    assert as_chat("q", system_prompt="S", chat_template=True) == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "q"},
    ]
    # a conversation's own system message is kept; the configured one is not doubled
    assert as_chat(CHAT, system_prompt="S", chat_template=False) == CHAT
    with pytest.raises(ValueError, match="data.system_prompt"):
        as_chat("q", system_prompt="S", chat_template=False)


def test_load_task_puts_string_prompts_in_chat_form(qwen3_tokenizer, tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(f'{{"prompt": "q{i}", "answer": "{i}"}}\n' for i in range(10)))
    spec = DataSpec(
        task="dataset",
        path=str(path),
        chat_template=True,
        system_prompt="Be brief.",
        chat_template_kwargs={"enable_thinking": False},
    )
    task = load_task(spec, qwen3_tokenizer)
    ex = task.train[0]
    assert ex.prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "q0"},
    ]
    assert task.template_kwargs == {"enable_thinking": False}
    ids = prompt_ids(qwen3_tokenizer, ex.prompt, task.template_kwargs)
    text = expected_text("qwen3", ex.prompt, thinking=False)
    assert ids == qwen3_tokenizer.encode(text, add_special_tokens=False)


def test_max_prompt_tokens_drops_and_counts_or_refuses(qwen3_tokenizer, tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [("short", "1")] * 6 + [("a much longer prompt " * 8, "2")] * 4
    path.write_text("".join(f'{{"prompt": "{p}", "answer": "{a}"}}\n' for p, a in rows))
    limit = len(prompt_ids(qwen3_tokenizer, "short"))
    spec = DataSpec(task="dataset", path=str(path), eval_path=str(path), max_prompt_tokens=limit)
    task = load_task(spec, qwen3_tokenizer)
    assert len(task.train) == 6 and task.dropped == {"train": 4, "eval": 4}
    assert all(ex.prompt == "short" for ex in task.train + task.eval)
    refuse = spec.model_copy(update={"overlong_prompts": "error"})
    with pytest.raises(ValueError, match=r"data.max_prompt_tokens: prompt 6 of the train split"):
        load_task(refuse, qwen3_tokenizer)
    with pytest.raises(ValueError, match="every prompt"):
        load_task(spec.model_copy(update={"max_prompt_tokens": 1}), qwen3_tokenizer)


def test_messages_need_the_tokenizers_template(base_tokenizer, tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "hi"}], "answer": "x"}\n' * 3)
    with pytest.raises(ValueError, match="has no chat template"):
        load_task(DataSpec(task="dataset", path=str(path)), base_tokenizer)


def test_no_template_text_or_apply_arguments_from_the_config():
    for key in ("chat_template", "tokenize", "add_generation_prompt", "tokenizer_kwargs"):
        errors = spec_errors({"data": {"chat_template_kwargs": {key: "x"}}})
        assert [e["field"] for e in errors] == [f"data.chat_template_kwargs.{key}"], key
    assert spec_errors({"data": {"chat_template": "{{ messages }}"}})[0]["field"] == (
        "data.chat_template"
    )
    assert spec_errors({"data": {"chat_template_kwargs": {"enable_thinking": False}}}) == []


def test_example_keeps_its_two_field_form():
    ex = Example("1+2=", "3")
    assert (ex.prompt, ex.answer, ex.metadata) == ("1+2=", "3", {})
    assert Task("t", [ex], [ex]).template_kwargs == {}


def test_a_chat_row_after_string_rows_still_needs_the_template(base_tokenizer, tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        '{"prompt": "a", "answer": "1"}\n' * 3
        + '{"prompt": [{"role": "user", "content": "hi"}], "answer": "x"}\n'
    )
    spec = DataSpec(task="dataset", path=str(path), eval_path=str(path))
    with pytest.raises(ValueError, match="has no chat template"):
        load_task(spec, base_tokenizer)
