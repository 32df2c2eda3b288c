"""The tiny model directory, the tasks and the rewards."""

from __future__ import annotations

import json
import threading

import pytest
from transformers import AutoConfig, AutoTokenizer

from workers.data import arithmetic_examples, load_task, read_jsonl, reverse_examples
from workers.loop.types import draw
from workers.models import recipe_hash, tiny_model_dir
from workers.rewards import VERIFIERS, ScoreItem, make_scorer
from workers.spec import DataSpec, RewardSpec, TinyModelSpec


def test_tiny_model_is_a_plain_hf_qwen2_directory(tiny_dir):
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (tiny_dir / name).is_file(), name
    config = AutoConfig.from_pretrained(tiny_dir)
    assert config.model_type == "qwen2" and config.architectures == ["Qwen2ForCausalLM"]
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    ids = tok.encode("12+34=", add_special_tokens=False)
    assert len(ids) == 6 and tok.decode(ids) == "12+34="
    assert tok.padding_side == "left" and tok.eos_token == "<|endoftext|>"
    assert config.vocab_size == len(tok)


def test_recipe_hash_and_concurrent_build_once(tmp_path):
    spec = TinyModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                         warmup_steps=2, warmup_bias_steps=1)  # fmt: skip
    assert recipe_hash(spec) != recipe_hash(TinyModelSpec())
    dirs: list = []
    threads = [threading.Thread(target=lambda: dirs.append(tiny_model_dir(spec, tmp_path)))
               for _ in range(2)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert dirs[0] == dirs[1]
    built = [p.name for p in (tmp_path / "models").iterdir() if p.is_dir()]
    assert built == [dirs[0].name]  # no temporary directory left behind
    recipe = json.loads((dirs[0] / "paddock_recipe.json").read_text())
    assert recipe["spec"]["hidden_size"] == 16


def test_splits_are_disjoint_and_fixed():
    for train, held in (arithmetic_examples(), reverse_examples()):
        assert not {e.prompt for e in train} & {e.prompt for e in held}
        assert len(held) > 50
    assert arithmetic_examples()[1][:3] == arithmetic_examples()[1][:3]
    ex = reverse_examples()[0][0]
    assert ex.prompt == f"rev {ex.answer[::-1]}="


def test_jsonl_task(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": str(i)}) + "\n"
                            for i in range(20)))  # fmt: skip
    task = load_task(DataSpec(task="jsonl", path=str(path), eval_size=5))
    assert len(task.train) == 18 and [e.prompt for e in task.eval] == ["q18", "q19"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    with pytest.raises(ValueError, match="no column 'answer' in bad.jsonl"):
        read_jsonl(bad)


async def test_rewards():
    # the verifiers themselves: tests/workers/rewards/
    def one(name, completion, answer, **kw):
        term = RewardSpec.model_validate({"functions": [{"name": name, **kw}]}).functions[0]
        return VERIFIERS.get(name)(ScoreItem("p", completion, answer), term).score

    assert one("exact_match", " 42 ", "42") == 1.0
    assert one("exact_match", "42x", "42") == 0.0
    assert one("numeric_match", "answer: 42.0!", "42") == 1.0
    assert one("numeric_match", "none", "42") == 0.0
    assert one("format_regex", "42", "", pattern=r"\d+") == 1.0
    scorer = make_scorer(
        RewardSpec.model_validate(
            {
                "functions": [
                    {"name": "exact_match"},
                    {"name": "format_regex", "pattern": r"\d+", "weight": 0.5},
                ]
            }
        )
    )
    got = await scorer.score([ScoreItem("p", "41", "42"), ScoreItem("p", "42", "42")])
    assert [g.reward for g in got] == [0.5, 1.5]
    with pytest.raises(KeyError, match="known"):
        VERIFIERS.get("eval")


def test_draw_is_a_pure_function_of_seed_step_group():
    assert draw(0, 5, 2, 100) == draw(0, 5, 2, 100)
    assert draw(0, 5, 2, 100) != draw(0, 5, 3, 100)
    assert draw(0, 5, 2, 100) != draw(1, 5, 2, 100)
