"""From an example's prompt to the token ids every engine is given, and to the text the
sample inspector shows.

`prompt_ids` is the one place the data plane tokenizes a prompt: the producer and eval call
it, and the engines receive its ids as they are (`GroupRequest.prompt_ids`; vLLM as a
`TokensPrompt`), so torch, vLLM and TensorRT-LLM decode after the same tokens, and the
trainer scores those same tokens.

A prompt is a string, encoded as it is (no BOS or other special tokens added: the built-in
tasks and plain-text datasets are completions), or a list of chat messages, rendered by the
tokenizer's own chat template with the generation prompt (`add_generation_prompt=True`).
The template is always the model's: the spec has no field for template text. A template
is Jinja, which transformers renders in a sandbox, but sandbox escapes have been found
before, and a template that is not the model's own would not know its special tokens
either; the model directory comes from a root the platform's operator allows
(`PADDOCK_MODEL_ROOTS`), so its template is the operator's, not the config author's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Message = dict[str, str]
Prompt = str | list[Message]


def as_chat(prompt: Prompt, *, system_prompt: str | None, chat_template: bool) -> Prompt:
    """The prompt as the data config asks for it: a string prompt becomes one user message
    with `chat_template: true`; `system_prompt` goes first in a conversation without one."""
    if isinstance(prompt, str):
        if not chat_template:
            if system_prompt is not None:
                raise ValueError(
                    "data.system_prompt: the prompts are plain strings; set "
                    "data.chat_template: true to send them as chat messages after it"
                )
            return prompt
        prompt = [{"role": "user", "content": prompt}]
    if system_prompt is not None and prompt[0]["role"] != "system":
        prompt = [{"role": "system", "content": system_prompt}, *prompt]
    return prompt


def _check_template(tokenizer: Any) -> None:
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or "the model"
        raise ValueError(
            f"data: the prompts are chat messages but the tokenizer of {name} has no chat "
            "template (a base model): use string prompts, or an instruct model's directory"
        )


def prompt_ids(
    tokenizer: Any, prompt: Prompt, template_kwargs: Mapping[str, Any] | None = None
) -> list[int]:
    """The token ids of `prompt`, as every engine gets them."""
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt, add_special_tokens=False))
    _check_template(tokenizer)
    ids = tokenizer.apply_chat_template(
        prompt,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
        **dict(template_kwargs or {}),
    )
    return list(ids)


def prompt_text(
    tokenizer: Any, prompt: Prompt, template_kwargs: Mapping[str, Any] | None = None
) -> str:
    """What the model reads, as text: the rendered template (special tokens and all) for
    messages, the string itself otherwise."""
    if isinstance(prompt, str):
        return prompt
    _check_template(tokenizer)
    return tokenizer.apply_chat_template(
        prompt, add_generation_prompt=True, tokenize=False, **dict(template_kwargs or {})
    )
