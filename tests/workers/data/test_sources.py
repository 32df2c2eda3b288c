"""Dataset sources (JSONL, Parquet, save_to_disk) and their column mapping, including the
verl and NeMo-RL layouts as those frameworks write them, built here with pyarrow and
`datasets`."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workers.data import load_task, read_examples
from workers.spec import DataSpec


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def verl_rows(n: int, split: str = "train") -> list[dict]:
    """verl's RL parquet layout (its gsm8k preprocessing writes these columns)."""
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"What is {i}+{i}? Let's think step by step."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
            "extra_info": {"split": split, "index": i, "question": f"What is {i}+{i}?"},
        }
        for i in range(n)
    ]


def test_verl_parquet_loads_without_conversion(tmp_path):
    train = tmp_path / "train.parquet"
    test = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(verl_rows(12)), train)
    pq.write_table(pa.Table.from_pylist(verl_rows(4, "test")), test)
    spec = DataSpec(
        task="dataset", path=str(train), eval_path=test.as_uri(),
        answer_key="reward_model.ground_truth",
    )  # fmt: skip
    task = load_task(spec)
    assert len(task.train) == 12 and len(task.eval) == 4
    ex = task.train[5]
    assert ex.prompt == [{"role": "user", "content": "What is 5+5? Let's think step by step."}]
    assert ex.answer == "10"
    assert ex.metadata["data_source"] == "openai/gsm8k"
    assert ex.metadata["extra_info"] == {"split": "train", "index": 5, "question": "What is 5+5?"}
    assert ex.metadata["reward_model"] == {"style": "rule", "ground_truth": "10"}
    assert "prompt" not in ex.metadata


def test_nemo_rl_jsonl_layouts_load_without_conversion(tmp_path):
    # OpenAI-style messages, the last (assistant) message holding the reference answer
    messages = write_jsonl(
        tmp_path / "math.jsonl",
        [
            {
                "messages": [
                    {"role": "user", "content": f"Solve {i}*3. Put the answer in \\boxed{{}}."},
                    {"role": "assistant", "content": str(3 * i)},
                ],
                "task_name": "math",
            }
            for i in range(10)
        ],
    )
    task = load_task(
        DataSpec(
            task="dataset", path=str(messages), prompt_key="messages",
            answer_key="messages.-1.content", system_prompt="Reason, then answer.",
        )
    )  # fmt: skip
    ex = task.train[2]
    assert ex.prompt == [
        {"role": "system", "content": "Reason, then answer."},
        {"role": "user", "content": "Solve 2*3. Put the answer in \\boxed{}."},
    ]
    assert ex.answer == "6" and ex.metadata == {"task_name": "math"}
    assert len(task.train) == 9 and task.eval[0].answer == "27"  # the last 10% held out
    # the ResponseDataset layout: {input, output}
    response = write_jsonl(
        tmp_path / "resp.jsonl", [{"input": f"{i}+1=", "output": str(i + 1)} for i in range(5)]
    )
    ex = read_examples(str(response), prompt_key="input", answer_key="output")[4]
    assert (ex.prompt, ex.answer) == ("4+1=", "5")


def test_save_to_disk_directory_with_splits(tmp_path):
    rows = {
        split: [{"question": f"{split} {i}", "gold": {"value": i}} for i in range(n)]
        for split, n in (("train", 8), ("test", 3))
    }
    dd = datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in rows.items()})
    dd.save_to_disk(str(tmp_path / "dd"))
    spec = DataSpec(
        task="dataset", path=str(tmp_path / "dd"), prompt_key="question",
        answer_key="gold.value", eval_split="test",
    )  # fmt: skip
    task = load_task(spec)
    assert [e.prompt for e in task.eval] == ["test 0", "test 1", "test 2"]
    assert len(task.train) == 8 and task.train[7].answer == "7"
    with pytest.raises(ValueError, match=r"data.split: .* no split 'dev' \(splits: train, test\)"):
        load_task(spec.model_copy(update={"split": "dev"}))
    # a single Dataset directory
    datasets.Dataset.from_list(rows["train"]).save_to_disk(str(tmp_path / "one"))
    one = read_examples(str(tmp_path / "one"), prompt_key="question", answer_key="gold.value")
    assert len(one) == 8


def test_parquet_shards_by_pattern(tmp_path):
    shards = tmp_path / "data"
    shards.mkdir()
    rows = verl_rows(9)
    for i in range(3):
        pq.write_table(pa.Table.from_pylist(rows[3 * i : 3 * i + 3]), shards / f"train-{i}.parquet")
    got = read_examples(str(shards / "train-*.parquet"), answer_key="reward_model.ground_truth")
    assert sorted(int(e.answer) for e in got) == [2 * i for i in range(9)]
    with pytest.raises(ValueError, match="not one written by save_to_disk"):
        read_examples(str(shards))
    with pytest.raises(FileNotFoundError, match="no file matches"):
        read_examples(str(shards / "test-*.parquet"))


def test_legacy_jsonl_task_still_reads_prompt_and_answer(tmp_path):
    path = write_jsonl(tmp_path / "d.txt", [{"prompt": f"q{i}", "answer": i} for i in range(20)])
    task = load_task(DataSpec(task="jsonl", path=str(path), eval_size=5))
    assert len(task.train) == 18 and [e.prompt for e in task.eval] == ["q18", "q19"]
    assert task.eval[0].answer == "18"  # numbers become their text


def test_answers_of_other_types(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [{"prompt": "a", "answer": ["1", "one"]}, {"prompt": "b", "answer": ["2"]}],
    )
    assert [e.answer for e in read_examples(str(path))] == ['["1", "one"]', '["2"]']


@pytest.mark.parametrize(
    ("rows", "keys", "error"),
    [
        (
            [{"question": "q", "answer": "1"}],
            {},
            r"data.prompt_key: no column 'prompt' in d.jsonl \(columns: question, answer\)",
        ),
        (
            [{"prompt": "q", "reward_model": {"style": "rule"}}],
            {"answer_key": "reward_model.ground_truth"},
            r"data.answer_key: row 0 of d.jsonl: reward_model has no key 'ground_truth' "
            r"\(keys: style\)",
        ),
        (
            [{"prompt": "q", "answer": "1"}, {"prompt": "r", "answer": None}],
            {},
            r"data.answer_key: row 1 of d.jsonl: answer is null",
        ),
        (
            [{"prompt": [{"role": "user"}], "answer": "1"}],
            {},
            r"data.prompt_key: row 0 of d.jsonl: prompt message 0 is not an object with a "
            r"string role and content",
        ),
        (
            [{"prompt": [{"role": "assistant", "content": "4"}], "answer": "1"}],
            {},
            r"data.prompt_key: row 0 of d.jsonl: prompt has no message before the reference",
        ),
        (
            [{"m": [{"role": "user", "content": "x"}], "answer": "1"}],
            {"prompt_key": "m", "answer_key": "m.3.content"},
            r"data.answer_key: row 0 of d.jsonl: m is a list of 1; '3' is not an index of it",
        ),
    ],
)
def test_mapping_errors_name_the_setting_row_and_column(tmp_path, rows, keys, error):
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(ValueError, match=error):
        read_examples(str(path), **keys)


def test_path_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="data.path: .*nope.jsonl does not exist"):
        read_examples(str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="data.path: dataset://7 names an uploaded dataset"):
        read_examples("dataset://7")
    (tmp_path / "d.csv").write_text("prompt,answer\n")
    with pytest.raises(ValueError, match="set data.format"):
        read_examples(str(tmp_path / "d.csv"))
    (tmp_path / "broken.jsonl").write_text('{"prompt": "a", "answer": \n')
    with pytest.raises(ValueError, match="data.path: .*broken.jsonl is not readable as jsonl"):
        read_examples(str(tmp_path / "broken.jsonl"))
    with pytest.raises(ValueError, match="data.prompt_key: no column 'prompt' in e.jsonl"):
        load_task(
            DataSpec(
                task="dataset",
                path=str(write_jsonl(tmp_path / "t.jsonl", [{"prompt": "a", "answer": "1"}] * 3)),
                eval_path=str(write_jsonl(tmp_path / "e.jsonl", [{"q": "a", "answer": "1"}])),
            )
        )
