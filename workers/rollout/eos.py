"""Which token ids end a generation: every EOS id the model declares.

An instruct model often declares two (Qwen: `<|im_end|>` ends a turn, `<|endoftext|>` a
document; Llama 3: `<|eot_id|>` and `<|end_of_text|>`), in generation_config.json's
`eos_token_id` list, while its tokenizer names one. Stopping on the tokenizer's alone lets
a sample run on past the end of its turn; every engine stops on all of them, and the
stopping token stays in the sample (the trainer scores it like any other token).
"""

from __future__ import annotations

import json
from pathlib import Path


def _ids(value: object) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return list(value)
    raise ValueError(f"eos_token_id must be an int or a list of ints, not {value!r}")


def eos_token_ids(model_dir: str | Path, tokenizer_eos: int | None) -> tuple[int, ...]:
    """The tokenizer's eos first (engines that take one end id get it), then the ids of
    generation_config.json, then config.json's, without repeats."""
    found = _ids(tokenizer_eos)
    for name in ("generation_config.json", "config.json"):
        path = Path(model_dir) / name
        if path.is_file():
            found += _ids(json.loads(path.read_text()).get("eos_token_id"))
    if not found:
        raise ValueError(
            f"{model_dir}: no EOS token id (neither the tokenizer nor generation_config.json "
            "nor config.json declares one); generation could only stop at max_new_tokens"
        )
    return tuple(dict.fromkeys(found))
