"""The weighted sum of terms, its per-term parts, accuracy from the verifier terms, and the
loop's batch scoring of a step."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from workers.data import Example, Task
from workers.envs import EpisodeState, GroupEpisodes
from workers.grants import Grants
from workers.loop.scoring import accuracy, eval_correct, score_groups, term_metrics
from workers.rewards import RewardServiceError, ScoreItem, make_scorer
from workers.rollout.base import GroupResult, Sample, SamplingParams
from workers.spec import RewardSpec, RunSpec, spec_errors

from .test_service import LOOPBACK, free_port


def scorer(*terms):
    grants = Grants(egress=LOOPBACK)
    return make_scorer(RewardSpec.model_validate({"functions": list(terms)}), grants)


async def test_weighted_sum_and_its_parts():
    s = scorer(
        {"name": "boxed_match"},
        {"name": "format", "weight": 0.2},
        {"name": "overlong_penalty", "buffer": 4, "weight": 0.5},
    )
    got = await s.score(
        [
            ScoreItem(
                "p", r"<think>1+1</think> \boxed{2}", "2", completion_tokens=14, max_new_tokens=16
            ),  # fmt: skip
            ScoreItem("p", r"\boxed{3}", "2", completion_tokens=16, max_new_tokens=16),
        ]
    )
    right, wrong = got
    assert right.terms == {"boxed_match": 1.0, "format": 1.0, "overlong_penalty": -0.5}
    assert right.reward == pytest.approx(1.0 + 0.2 - 0.25)
    assert right.details["boxed_match"] == {"extracted": "2", "gold": "2"}
    assert right.details["overlong_penalty"] == {"tokens": 14, "max": 16}
    assert right.correct is True  # the verifier (boxed_match) is right; shaping does not count
    assert wrong.terms == {"boxed_match": 0.0, "format": 0.0, "overlong_penalty": -1.0}
    assert wrong.reward == pytest.approx(-0.5) and wrong.correct is False


async def test_accuracy_needs_every_verifier_term():
    s = scorer({"name": "gsm8k"}, {"name": "boxed_match"}, {"name": "format_regex",
                                                            "pattern": "x"})  # fmt: skip
    got = await s.score([ScoreItem("p", r"\boxed{7}", "7"), ScoreItem("p", "7", "7")])
    assert [g.correct for g in got] == [True, False]  # the second has no box
    assert await s.correct([ScoreItem("p", r"\boxed{7}", "7")]) == [True]


async def test_shaping_terms_alone_give_no_accuracy():
    s = scorer({"name": "format"})
    got = await s.score([ScoreItem("p", "<think>a</think>b", "")])
    assert got[0].correct is None and await s.correct([ScoreItem("p", "", "")]) == [None]
    assert math.isnan(accuracy([None, None])) and accuracy([True, None, False]) == 0.5


async def test_two_terms_of_one_name_are_logged_by_their_labels():
    s = scorer(
        {"name": "format_regex", "pattern": r"\d+", "label": "digits"},
        {"name": "format_regex", "pattern": r"[a-z]+", "label": "letters", "weight": 2},
    )
    got = await s.score([ScoreItem("p", "abc", "")])
    assert got[0].terms == {"digits": 0.0, "letters": 1.0} and got[0].reward == 2.0


async def test_a_failing_term_fails_the_whole_batch():
    # a dead service next to a local term: no partial reward comes back
    url = f"http://127.0.0.1:{free_port()}/"
    s = scorer({"name": "exact_match"}, {"name": "service", "url": url, "max_retries": 0})
    with pytest.raises(RewardServiceError, match=url):
        await s.score([ScoreItem("p", "a", "a")])


def test_old_specs_stay_valid():
    # specs dumped before the union carried pattern: null on every term
    old = {"functions": [{"name": "exact_match", "weight": 1.0, "pattern": None},
                         {"name": "numeric_match", "weight": 0.5, "pattern": None},
                         {"name": "format_regex", "weight": 0.1, "pattern": r"\d+"}]}  # fmt: skip
    spec = RewardSpec.model_validate(old)
    assert [t.name for t in spec.functions] == ["exact_match", "numeric_match", "format_regex"]
    assert spec_errors({"reward": old}) == []
    again = RunSpec.model_validate({"reward": RunSpec.model_validate({"reward": old}).to_dict()
                                    ["reward"]})  # fmt: skip
    assert again.reward == spec


@pytest.mark.parametrize(
    ("reward", "field", "message"),
    [
        ({"functions": [{"name": "overlong_penalty"}]}, "reward.functions.0.buffer", "required"),
        (
            {"functions": [{"name": "exact_match"}, {"name": "overlong_penalty", "buffer": 0}]},
            "reward.functions.1.buffer",
            "must be > 0",
        ),  # fmt: skip
        (
            {"functions": [{"name": "overlong_penalty", "buffer": 9}]},
            "reward.functions.0.buffer",
            "must be <= rollout.max_new_tokens (8)",
        ),  # fmt: skip
        (
            {"functions": [{"name": "exact_match"}, {"name": "exact_match"}]},
            "reward.functions.1.label",
            "term 0 is logged as 'exact_match' too",
        ),  # fmt: skip
        (
            {"functions": [{"name": "exact_match", "label": "a/b"}]},
            "reward.functions.0.label",
            "should match",
        ),  # fmt: skip
        (
            {"functions": [{"name": "gsm8k", "pattern": "x"}]},
            "reward.functions.0.pattern",
            "unknown key",
        ),  # fmt: skip
        (
            {"functions": [{"name": "format", "pattern": "("}]},
            "reward.functions.0.pattern",
            "invalid regex",
        ),  # fmt: skip
        ({"functions": [{"weight": 2}]}, "reward.functions.0.name", "required"),
        ({"functions": []}, "reward.functions", "at least 1"),
    ],
)
def test_bad_terms_are_reported_by_path(reward, field, message):
    errors = spec_errors({"reward": reward})
    assert [e["field"] for e in errors] == [field], errors
    assert message in errors[0]["message"]


def test_the_schema_describes_every_term():
    from workers.spec import spec_json_schema

    schema = spec_json_schema()
    defs = schema["$defs"]
    functions = defs["RewardSpec"]["properties"]["functions"]
    names = set(functions["items"]["discriminator"]["mapping"])
    assert names == {"exact_match", "numeric_match", "format_regex", "format", "gsm8k",
                     "boxed_match", "math_verify", "overlong_penalty", "service", "env",
                     "reasoning_gym"}  # fmt: skip
    service = defs["ServiceTerm"]["properties"]
    assert {"url", "timeout_s", "batch_size", "max_retries", "secret"} <= set(service)
    assert all(service[k].get("description") for k in ("url", "timeout_s", "secret"))


# ------------------------------------------------------------------- in the loop


def _ctx(task: Task, strict: bool, *terms):
    return SimpleNamespace(
        task=task, scorer=scorer(*terms), strict_accuracy=strict,
        params=SamplingParams(1.0, 16),
    )  # fmt: skip


def _group(texts: list[str]) -> GroupEpisodes:
    """One-turn episodes of these completions, as the producer scores them."""
    samples = [Sample(token_ids=list(range(len(t))), text=t, finish_reason="stop") for t in texts]
    states = [EpisodeState(j, [1]) for j in range(len(texts))]
    return GroupEpisodes(GroupResult("g", [1], samples), "p", states)


async def test_a_step_is_scored_at_once_with_its_terms():
    task = Task("dataset", [], [])
    ctx = _ctx(task, False, {"name": "numeric_match"}, {"name": "overlong_penalty", "buffer": 4})
    examples = [Example("1+1?", "2"), Example("2+2?", "4")]
    results = [_group(["so 2", "3"]), _group(["it is 4 " + "x" * 6, "4"])]
    scored = await score_groups(ctx, examples, results)
    assert [g.rewards for g in scored] == [[1.0, 0.0], [0.5, 1.0]]  # 14 tokens: −0.5
    assert [g.correct for g in scored] == [[True, False], [True, True]]
    groups = [SimpleNamespace(terms=g.terms) for g in scored]
    assert term_metrics(groups) == {
        "reward/numeric_match/mean": 0.75,
        "reward/overlong_penalty/mean": -0.125,
    }


async def test_built_in_tasks_keep_strict_accuracy():
    task = Task("arithmetic", [], [])
    ctx = _ctx(task, True, {"name": "numeric_match"})
    scored = await score_groups(ctx, [Example("1+1=", "2")], [_group(["2", "so 2"])])
    assert scored[0].rewards == [1.0, 1.0] and scored[0].correct == [True, False]
    answers = [_group(["2"]), _group(["so 2"])]
    assert await eval_correct(ctx, [Example("1+1=", "2")] * 2, answers) == [True, False]
    loose = _ctx(task, False, {"name": "numeric_match"})
    assert await eval_correct(loose, [Example("1+1=", "2")] * 2, answers) == [True, True]
