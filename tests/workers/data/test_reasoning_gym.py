"""reasoning-gym (the PyPI package) as a data source: its generators make the examples, its
own scorer is the `reasoning_gym` reward term."""

from __future__ import annotations

import pytest

from workers.data import load_task
from workers.grants import Grants
from workers.rewards import ScoreItem, make_scorer
from workers.spec import RewardSpec, parse_spec, spec_errors


def _spec(**rg) -> dict:
    return {
        "data": {"task": "reasoning_gym", "reasoning_gym": {"dataset": "basic_arithmetic",
                                                            "size": 20, "eval_size": 5, **rg}},
        "reward": {"functions": [{"name": "reasoning_gym"}]},
    }  # fmt: skip


def test_examples_come_from_the_generator_with_its_entries():
    spec = parse_spec(_spec(config={"min_terms": 2, "max_terms": 3}))
    task = load_task(spec.data)
    assert (len(task.train), len(task.eval)) == (20, 5)
    ex = task.train[0]
    assert ex.prompt[0]["role"] == "system" and "<answer>" in ex.prompt[0]["content"]
    entry = ex.metadata["reasoning_gym"]
    assert ex.prompt[1]["content"] == entry["question"] and ex.answer == entry["answer"]
    assert 2 <= entry["metadata"]["num_terms"] <= 3
    assert task.train[0].prompt != task.eval[0].prompt  # two seeds, not one list split


async def test_the_generators_own_scorer_scores_the_answer_tag():
    spec = parse_spec(_spec())
    ex = load_task(spec.data).train[0]
    scorer = make_scorer(RewardSpec.model_validate(spec.reward.model_dump()), Grants())
    items = [
        ScoreItem(ex.prompt, f"so <answer>{ex.answer}</answer>", ex.answer, ex.metadata),
        ScoreItem(ex.prompt, "<answer>nope</answer>", ex.answer, ex.metadata),
    ]
    got = await scorer.score(items)
    assert [g.reward for g in got] == [1.0, 0.0]
    assert [g.correct for g in got] == [True, False]
    await scorer.close()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"task": "reasoning_gym"}, "data.reasoning_gym"),
        ({"task": "arithmetic", "reasoning_gym": {"dataset": "chain_sum"}}, "data.reasoning_gym"),
        ({"task": "reasoning_gym", "reasoning_gym": {"dataset": "x", "config": {"f": {}}}},
         "data.reasoning_gym.config.f"),
    ],
)  # fmt: skip
def test_bad_settings_name_the_field(data, field):
    assert field in {e["field"] for e in spec_errors({"data": data})}


def test_an_unknown_generator_fails_naming_the_setting():
    with pytest.raises(ValueError, match="data.reasoning_gym"):
        load_task(parse_spec(_spec(dataset="no_such_generator")).data)
