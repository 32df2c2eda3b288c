"""The chat model of the reasoning task (its tokenizer, template and EOS ids as transformers
loads them) and the task itself."""

from __future__ import annotations

import json
import statistics

from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from workers.data import load_task
from workers.data.prompts import prompt_ids
from workers.data.reasoning import (
    MAX_TERMS,
    MIN_TERMS,
    boxed_answer,
    reasoning_examples,
    terms_of,
    worked_solution,
)
from workers.models import recipe_hash
from workers.rollout.eos import eos_token_ids
from workers.spec import DataSpec, TinyModelSpec

from .conftest import CHAT_TEST_RECIPE


def test_chat_tokenizer_round_trips_through_autotokenizer(chat_dir):
    tok = AutoTokenizer.from_pretrained(chat_dir)
    im_start, im_end, eot = tok.convert_tokens_to_ids(
        ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    )
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.padding_side == "left"
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Add 3+4."},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nAdd 3+4.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tok.encode(text, add_special_tokens=False)
    # each special token is one id; digits are one a token (Qwen's pre-tokenizer)
    assert ids.count(im_start) == 3 and ids.count(im_end) == 2
    assert tok.convert_ids_to_tokens(tok.encode("12+345", add_special_tokens=False)) == list(
        "12+345"
    )
    assert tok.decode(ids) == text
    # what runs send to the engines is what the warm-up trained on
    assert prompt_ids(tok, messages) == ids
    closed = tok.apply_chat_template(
        [*messages, {"role": "assistant", "content": "3+4=7. \\boxed{7}"}], tokenize=False
    )
    assert closed.endswith("<|im_start|>assistant\n3+4=7. \\boxed{7}<|im_end|>\n")
    # byte-level: text the corpus never had still round-trips
    odd = "Ünïcødé — ∑ 🙂"
    assert tok.decode(tok.encode(odd, add_special_tokens=False)) == odd
    # both EOS ids declared, as an instruct model declares them
    gen = GenerationConfig.from_pretrained(chat_dir)
    assert gen.eos_token_id == [im_end, eot]
    config = AutoConfig.from_pretrained(chat_dir)
    assert config.eos_token_id == im_end and config.vocab_size == len(tok)
    assert eos_token_ids(chat_dir, tok.eos_token_id) == (im_end, eot)
    assert config.max_position_embeddings >= 256


def test_the_chat_recipe_has_its_own_hash_and_the_char_recipes_keep_theirs():
    # The character-level tiny model's hash is what cached models and tests rely on.
    assert recipe_hash(TinyModelSpec()) == "bd5f30af33fd"  # as before the chat model
    assert recipe_hash(CHAT_TEST_RECIPE) != recipe_hash(
        CHAT_TEST_RECIPE.model_copy(update={"task": "arithmetic"})
    )


def test_chat_model_records_its_recipe(chat_dir):
    recipe = json.loads((chat_dir / "paddock_recipe.json").read_text())
    assert recipe["spec"]["task"] == "reasoning"
    assert recipe["chat_build"]["eos_token_id"] == [
        AutoTokenizer.from_pretrained(chat_dir).convert_tokens_to_ids(t)
        for t in ("<|im_end|>", "<|endoftext|>")
    ]


def test_reasoning_task_splits_and_solutions():
    train, held = reasoning_examples()
    assert not {str(e.prompt) for e in train} & {str(e.prompt) for e in held}
    counts = [len(terms_of(e)) for e in train]
    assert min(counts) == MIN_TERMS and max(counts) == MAX_TERMS
    # heavy-tailed: short sums dominate, every length keeps a share
    share = {k: counts.count(k) / len(counts) for k in range(MIN_TERMS, MAX_TERMS + 1)}
    assert share[2] > 0.3 and all(v > 0.01 for v in share.values())
    assert statistics.median(counts) <= 3
    ex = train[0]
    assert ex.prompt[0]["role"] == "user" and ex.answer == str(sum(terms_of(ex)))
    assert worked_solution([3, 4, 5]) == "3+4=7, 7+5=12. \\boxed{12}"
    assert worked_solution([3, 4]) == "3+4=7. \\boxed{7}"
    # the warm-up's systematic mistake: the chain right, the box one more
    assert worked_solution([3, 4, 5], off_by_one=True) == "3+4=7, 7+5=12. \\boxed{13}"
    assert reasoning_examples()[1][:5] == held[:5]  # fixed, whatever the run's seed


def test_reasoning_accuracy_reads_the_last_box():
    task = load_task(DataSpec(task="reasoning", eval_size=50))
    assert task.name == "reasoning" and len(task.eval) == 50
    assert task.is_correct("3+4=7, 7+5=12. \\boxed{12}", "12")
    assert task.is_correct("\\boxed{7} no, \\boxed{ 12 }", "12")
    assert not task.is_correct("3+4=7, 7+5=12. 12", "12")
    assert not task.is_correct("\\boxed{12} no, \\boxed{13}", "12")
    assert boxed_answer("nothing") is None
