"""Messages to the token ids of an episode, with the model's own chat template.

The episode's ids are the prompt's (the template with `tools=` and the generation prompt),
then each model turn's sampled tokens exactly as the engine returned them, then, for each
environment answer, the tokens the template puts between the end of that model turn and
the next generation prompt. Those are found without re-rendering the model's reply (which
a template may rewrite): the template is applied to a stand-in conversation ending in an
assistant message, then to the same with the environment's messages and the generation
prompt; what the second adds is the answer's text. The template's scaffold after the end
of an assistant turn (Qwen's newline after `<|im_end|>`) comes first, and the end-of-turn
token itself when the model's turn stopped without one (a length cut, a stop string).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..data.prompts import Prompt, prompt_ids, prompt_text
from .base import Message

_STAND_IN: list[Message] = [
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": "y"},
]


class ChatRenderer:
    def __init__(
        self,
        tokenizer: Any,
        eos_ids: Sequence[int],
        tools: Sequence[dict] = (),
        template_kwargs: dict[str, Any] | None = None,
    ):
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(eos_ids)
        self.kwargs = dict(template_kwargs or {})
        if tools:  # set by Paddock from the environment, never by the config
            self.kwargs["tools"] = list(tools)
        self._tail: str | None = None

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        return prompt_ids(self.tokenizer, prompt, self.kwargs)

    def prompt_text(self, prompt: Prompt) -> str:
        return prompt_text(self.tokenizer, prompt, self.kwargs)

    def _render(self, messages: list[Message], generation: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation, tokenize=False, **self.kwargs
        )

    def _end_of_turn(self) -> tuple[str, str]:
        """(the end-of-turn token's text, the template's scaffold after it)."""
        if self._tail is None:
            base = self._render(_STAND_IN, generation=False)
            eos = self.tokenizer.eos_token
            at = base.rfind(eos) if eos else -1
            if at < 0:
                raise ValueError(
                    "env: the chat template does not end an assistant turn with the "
                    f"tokenizer's eos token {eos!r}; a multi-turn episode cannot be rendered"
                )
            self._tail = base[at + len(eos) :]
        return self.tokenizer.eos_token, self._tail

    def answer_ids(self, messages: list[Message], ended_on_eos: bool) -> list[int]:
        """The tokens appended after a model turn for the environment's `messages`, up to
        and including the next generation prompt."""
        eos, scaffold = self._end_of_turn()
        base = self._render(_STAND_IN, generation=False)
        full = self._render([*_STAND_IN, *messages], generation=True)
        if not full.startswith(base):
            raise ValueError(
                "env: the chat template renders a conversation's start differently once "
                "more messages follow; its answers cannot be appended token by token"
            )
        text = ("" if ended_on_eos else eos) + scaffold + full[len(base) :]
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def ended_on_eos(self, token_ids: Sequence[int]) -> bool:
        return bool(token_ids) and token_ids[-1] in self.eos_ids

    def text(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)
