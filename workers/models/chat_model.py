"""The tiny chat model: a small Qwen2 with the byte-level BPE chat tokenizer, warmed up on
the reasoning task (`model.tiny.task: reasoning`) or on calculator episodes (`calculator`:
tool calls, the template with `tools=`; workers/envs/calculator.py).

Built like the character-level tiny model (same directory layout, same recipe-hash cache,
same biased warm-up), with what an instruct model from a hub has besides: a chat template,
two EOS ids in generation_config.json (`<|im_end|>`, `<|endoftext|>`), and room for
responses of a couple of hundred tokens.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2ForCausalLM

from ..data.examples import Example
from ..data.reasoning import reasoning_examples, terms_of, worked_solution
from ..envs import calculator
from ..envs.render import ChatRenderer
from ..spec import TinyModelSpec
from .build_progress import OnStep
from .chat_tokenizer import (
    CHAT_TEMPLATE,
    TOOLS_CHAT_TEMPLATE,
    build_chat_tokenizer,
    eos_token_ids,
)
from .qwen2 import pad_rows, qwen2_config

# Bump when this build changes in a way the recipe fields do not capture.
CHAT_BUILD_VERSION = 1
VOCAB_SIZE = 512
MAX_POSITIONS = 320  # prompt (≤ 40 tokens) + the longest chains, with room to spare
CORPUS_SIZE = 4000  # examples the BPE merges are learnt from
BATCH_SIZE = 64  # examples a warm-up step
MICRO_BATCH = 16  # of similar length, padded together
LR = 3e-3


def _template(spec: TinyModelSpec) -> str:
    return TOOLS_CHAT_TEMPLATE if spec.task == "calculator" else CHAT_TEMPLATE


def chat_recipe(spec: TinyModelSpec) -> dict:
    recipe = {
        "spec": spec.model_dump(),
        "chat_build": CHAT_BUILD_VERSION,
        "vocab_size": VOCAB_SIZE,
        "max_positions": MAX_POSITIONS,
        "template": _template(spec),
    }
    if spec.task == "calculator":  # the episodes' layout, which the warm-up is built from
        recipe["episodes"] = {"tool": calculator.ADD_TOOL, "calculator_build": 3}
    return recipe


def render(tok: PreTrainedTokenizerFast, messages: list[dict]) -> str:
    """A conversation as the model reads it, the generation prompt opened."""
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def sft_rows(
    tok: PreTrainedTokenizerFast, prompts: list[list[int]], responses: list[str]
) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) of `chat prompt + response + <|im_end|>`, labels on the response and
    the end of turn. The response is tokenized on its own, as the engine emits it after
    the prompt."""
    answers = tok(responses, add_special_tokens=False)["input_ids"]
    end = tok.eos_token_id
    return [
        (p + a + [end], [-100] * len(p) + a + [end]) for p, a in zip(prompts, answers, strict=True)
    ]


def warm_up_chat(
    model: Qwen2ForCausalLM,
    clean: list[tuple[list[int], list[int]]],
    biased: list[tuple[list[int], list[int]]],
    pad_id: int,
    spec: TinyModelSpec,
    on_step: OnStep | None = None,
) -> None:
    """As the character model's warm-up (clean targets, then a fraction `warmup_bias` of
    biased ones for the last `warmup_bias_steps`), with each batch sorted by length and cut
    into micro-batches: one long chain no longer pads a whole batch to its length (the
    lengths are heavy-tailed), so a step costs about its real tokens."""
    rng = random.Random(0)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    model.train()
    steps = spec.warmup_steps
    for step in range(steps):
        frac = spec.warmup_bias if step >= steps - spec.warmup_bias_steps else 0.0
        picks = rng.sample(range(len(clean)), BATCH_SIZE)
        rows = [biased[i] if rng.random() < frac else clean[i] for i in picks]
        rows.sort(key=lambda r: len(r[0]))
        n_labels = sum(sum(t != -100 for t in r[1]) for r in rows)
        opt.zero_grad(set_to_none=True)
        for at in range(0, len(rows), MICRO_BATCH):
            ids, attn, labels = pad_rows(rows[at : at + MICRO_BATCH], pad_id)
            logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]  # [B, L-1, V]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                labels[:, 1:].reshape(-1),
                ignore_index=-100,
                reduction="sum",
            )
            (loss / n_labels).backward()  # the batch's token mean, over its micro-batches
        opt.step()
        if on_step is not None:
            on_step(step + 1)
    model.eval()


def episode_rows(
    renderer: ChatRenderer, prompt: list[dict], turns: list[dict]
) -> tuple[list[int], list[int]]:
    """(ids, labels) of one episode exactly as a run lays it out (envs/episode.py): the
    prompt with the tools, each assistant reply tokenized on its own and ended by
    <|im_end|> (labelled), each tool answer as the renderer appends it (not labelled)."""
    tok = renderer.tokenizer
    ids = renderer.prompt_ids(prompt)
    labels = [-100] * len(ids)
    answers: list[dict] = []
    for m in turns:
        if m["role"] != "assistant":
            answers.append(m)
            continue
        if answers:
            got = renderer.answer_ids(answers, ended_on_eos=True)
            ids, labels, answers = ids + got, labels + [-100] * len(got), []
        reply = tok(m["content"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids, labels = ids + reply, labels + reply
    return ids, labels


def _reasoning_task() -> tuple[list[str], str, object]:
    """The reasoning task's (tokenizer corpus, template, rows of a tokenizer)."""
    train, _held_out = reasoning_examples()
    sft = [Example(ex.prompt, worked_solution(terms_of(ex))) for ex in train]
    # What the template puts between the special tokens (which BPE must not learn to
    # spell): role headers and message contents.
    corpus = [
        f"{m['role']}\n{m['content']}\nassistant\n{ex.answer}"
        for ex in sft[:CORPUS_SIZE]
        for m in ex.prompt
    ]

    def rows(tok):
        # the prompt as a run tokenizes it: the template applied, with the generation prompt
        prompts = tok([render(tok, ex.prompt) for ex in train], add_special_tokens=False)
        clean = sft_rows(tok, prompts["input_ids"], [ex.answer for ex in sft])
        biased = sft_rows(
            tok,
            prompts["input_ids"],
            [worked_solution(terms_of(ex), off_by_one=True) for ex in train],
        )
        return clean, biased

    return corpus, CHAT_TEMPLATE, rows


def _calculator_task() -> tuple[list[str], str, object]:
    """Calculator episodes (an `add` call a term, then the boxed total), and as the biased
    rows replies that skip the tool and guess: greedy, the model then mostly guesses;
    sampled, it often still calls the tool."""
    train, _held_out = calculator.long_sum_examples(n=8000)
    corpus = [
        f"{m['role']}\n{m['content']}"
        for ex in train[:CORPUS_SIZE]
        for m in [*ex.prompt, *calculator.worked_episode(ex)]
    ]
    corpus += [json.dumps(calculator.ADD_TOOL)] * 50

    def rows(tok):
        renderer = ChatRenderer(tok, eos_token_ids(tok), calculator.Calculator().tools)
        rng = random.Random(1)
        clean = [episode_rows(renderer, ex.prompt, calculator.worked_episode(ex)) for ex in train]
        biased = [
            episode_rows(renderer, ex.prompt, calculator.worked_episode(ex, guess=True, rng=rng))
            for ex in train
        ]
        return clean, biased

    return corpus, TOOLS_CHAT_TEMPLATE, rows


def build_chat_model(spec: TinyModelSpec, out: Path, on_step: OnStep | None = None) -> dict:
    """Train the tokenizer, build and warm up the model, save both into `out`. Returns
    facts for paddock_recipe.json."""
    corpus, template, rows = (_calculator_task if spec.task == "calculator" else _reasoning_task)()
    tok = build_chat_tokenizer(corpus, VOCAB_SIZE, template=template)
    eos = eos_token_ids(tok)
    torch.manual_seed(0)
    # EOS as Qwen's instruct configs: end of turn
    config = qwen2_config(spec, tok, MAX_POSITIONS, eos_token_id=eos[0], bos_token_id=eos[1])
    model = Qwen2ForCausalLM(config)
    # Both EOS ids, as an instruct model declares them: what engines stop on.
    model.generation_config = GenerationConfig(
        bos_token_id=eos[1], eos_token_id=eos, pad_token_id=tok.pad_token_id
    )
    clean, biased = rows(tok)
    warm_up_chat(model, clean, biased, tok.pad_token_id, spec, on_step)
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return {"vocab_size": len(tok), "eos_token_id": eos}
