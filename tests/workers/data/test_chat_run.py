"""A run on a chat dataset: NeMo-RL-layout messages through the tokenizer's template, end to
end through the sync driver on the torch backend; the inspector's samples show the prompt as
the model read it, and prompts over the limit are dropped and counted in the log."""

from __future__ import annotations

import json
import re
from pathlib import Path

from workers.events import Event
from workers.train import train


def test_a_chat_dataset_trains_and_the_samples_show_the_rendered_prompt(
    make_spec, chat_tiny_dir: Path, tmp_path: Path
):
    rows = [
        {"messages": [{"role": "user", "content": f"{a}+{b}="},
                      {"role": "assistant", "content": str(a + b)}]}
        for a in range(8) for b in range(8)
    ]  # fmt: skip
    rows.append({"messages": [{"role": "user", "content": "1+1=" * 40},
                              {"role": "assistant", "content": "2"}]})  # fmt: skip
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = make_spec(
        "train.steps=2", "train.log_samples=4",
        model={"path": str(chat_tiny_dir)},
        data={"task": "dataset", "path": str(path), "eval_path": str(path), "eval_size": 8,
              "prompt_key": "messages", "answer_key": "messages.-1.content",
              "max_prompt_tokens": 40},
    )  # fmt: skip
    events: list[Event] = []
    outcome = train(spec, tmp_path / "run", progress=False, on_event=events.append)
    assert outcome.state == "succeeded"
    items = [i for e in events if e.type == "samples" for i in e.items]
    assert items
    for item in items:  # the template's rendering, its answer the closing assistant message
        m = re.fullmatch(r"user: (\d+)\+(\d+)=; assistant: ", item["prompt"])
        assert m, item["prompt"]
        assert item["answer"] == str(int(m[1]) + int(m[2]))
    logs = [e.message for e in events if e.type == "log"]
    assert any("dropped 1 train prompts" in m for m in logs), logs
    assert any("dropped 1 eval prompts" in m for m in logs), logs
