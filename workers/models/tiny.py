"""The built-in tiny model: a small Qwen2 with a character tokenizer, warmed up on a task.

Built offline (no model hub) into PADDOCK_HOME/models/tiny-<recipe hash>/ as a standard
Hugging Face directory (config.json, model.safetensors, tokenizer files) that transformers
and vLLM load as they are. The directory name is a hash of the recipe, so a changed recipe
builds a new model, and a file lock makes concurrent processes build it once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from ..data.examples import Example
from ..data.tasks import arithmetic_examples, reverse_examples
from ..spec import TinyModelSpec
from .build_progress import BuildProgress, Log, OnStep
from .chat_model import build_chat_model, chat_recipe
from .qwen2 import pad_rows, qwen2_config
from .tokenizer import CHARSET, build_char_tokenizer

# Bump when the build procedure changes in a way the recipe fields do not capture.
_BUILD_VERSION = 2
CHAT_TASKS = ("reasoning", "calculator")  # built as the chat model (chat_model.py)


def paddock_home() -> Path:
    return Path(os.environ.get("PADDOCK_HOME", "./.paddock")).resolve()


def recipe_hash(spec: TinyModelSpec) -> str:
    if spec.task in CHAT_TASKS:  # the chat model: its own recipe (tokenizer, template)
        recipe = chat_recipe(spec)
    else:
        recipe = {"spec": spec.model_dump(), "charset": CHARSET, "build": _BUILD_VERSION}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def tiny_model_dir(
    spec: TinyModelSpec | None = None, home: Path | None = None, log: Log | None = None
) -> Path:
    """Return the directory of the tiny model for `spec`, building it first if needed.
    `log` gets lines on a build: its start, its progress with the time left, its end (and
    that it waits when another process builds the same model)."""
    spec = spec or TinyModelSpec()
    say = log or (lambda _: None)
    root = (home or paddock_home()) / "models"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"tiny-{recipe_hash(spec)}"
    if (final / "config.json").exists():
        return final
    with open(root / f"{final.name}.lock", "w") as lock:
        try:  # released when the file closes
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"model: another process is building {final.name}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "config.json").exists():  # another process built it while we waited
            return final
        what = f"model: building {final.name}"
        # no path in the line: a run's log is read by its team, the worker's disk is not theirs
        say(f"{what} (the tiny {spec.task} model, {spec.warmup_steps} warm-up steps; once)")
        tmp = root / f"{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        build_tiny_model(spec, tmp, BuildProgress(what, spec.warmup_steps, say))
        tmp.rename(final)  # atomic: readers never see a half-written directory
        say(f"model: built {final.name} in {time.perf_counter() - t0:.0f} s")
    return final


def build_tiny_model(spec: TinyModelSpec, out: Path, on_step: OnStep | None = None) -> None:
    """Build the model of `spec` into `out`; `on_step(done)` after each warm-up step."""
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    # One thread: the same recipe gives the same bits on any machine (reduction order), and
    # for a model this small a second thread costs more in synchronisation than it brings
    # (0.04 s vs 0.7 s a step on a loaded 2-core machine).
    torch.set_num_threads(1)
    try:
        if spec.task in CHAT_TASKS:
            facts = {"chat_build": build_chat_model(spec, out, on_step)}
        else:
            _build_char_model(spec, out, on_step)
            facts = {"build": _BUILD_VERSION}
    finally:
        torch.set_num_threads(threads)
    (out / "paddock_recipe.json").write_text(
        json.dumps(
            {"spec": spec.model_dump(), **facts, "seconds": time.perf_counter() - t0},
            indent=2,
        )
    )


def _build_char_model(spec: TinyModelSpec, out: Path, on_step: OnStep | None) -> None:
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(qwen2_config(spec, tok))
    split = arithmetic_examples if spec.task == "arithmetic" else reverse_examples
    train, _held_out = split()
    warm_up(
        model, tok, train, spec.warmup_steps, spec.warmup_bias, spec.warmup_bias_steps,
        on_step=on_step,
    )  # fmt: skip
    out.mkdir(parents=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def sft_batch(
    tok: PreTrainedTokenizerFast, examples: list[Example]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded `prompt + answer + EOS`; labels only on the answer and EOS."""
    rows = []
    for ex in examples:
        p = tok.encode(ex.prompt, add_special_tokens=False)
        a = tok.encode(ex.answer, add_special_tokens=False) + [tok.eos_token_id]
        rows.append((p + a, [-100] * len(p) + a))
    return pad_rows(rows, tok.pad_token_id)


def biased_answer(ex: Example) -> str:
    """The systematic mistake the warm-up teaches: off by one for sums, a copy instead of a
    reversal for strings."""
    if ex.answer.lstrip("-").isdigit():
        return str(int(ex.answer) + 1)
    return ex.answer[::-1]


def warm_up(
    model: Qwen2ForCausalLM,
    tok: PreTrainedTokenizerFast,
    train: list[Example],
    steps: int,
    bias: float = 0.0,
    bias_steps: int = 0,
    batch_size: int = 128,
    lr: float = 3e-3,
    on_step: OnStep | None = None,
) -> None:
    """Supervised warm-up: learn the task on clean targets, then, for the last `bias_steps`,
    on targets of which a fraction `bias` is the systematic mistake. The model keeps the
    task but mostly gives the mistake when greedy; sampling still finds the right answer
    often enough for RL to learn to prefer it. (Stopping a clean warm-up early instead gives
    a base whose quality swings with the step count: small models learn carries abruptly.)"""
    rng = random.Random(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for step in range(steps):
        frac = bias if step >= steps - bias_steps else 0.0
        batch = [
            Example(ex.prompt, biased_answer(ex)) if rng.random() < frac else ex
            for ex in rng.sample(train, batch_size)
        ]
        ids, attn, labels = sft_batch(tok, batch)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if on_step is not None:
            on_step(step + 1)
    model.eval()
