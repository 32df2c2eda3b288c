"""Patterns (docs/security.md#patterns): a user's regular expression (`format_regex`, a
`format` term's pattern) is matched by the job with a time limit per sample and a budget per
batch, in a thread, never on the event loop that a pool's runs share. A catastrophic pattern
scores its own samples 0, saying so; the step, the run and the other samples go on."""

from __future__ import annotations

import asyncio
import time

import pytest

from workers.grants import Grants
from workers.rewards import ScoreItem, make_scorer
from workers.rewards import scorer as scorer_mod
from workers.spec import RewardSpec, spec_errors

CATASTROPHIC = r"(a|aa)+$"  # exponential backtracking on a run of a's that does not end the text
HOSTILE = "a" * 40 + "!"


def _scorer(*terms):
    return make_scorer(RewardSpec.model_validate({"functions": list(terms)}), Grants())


@pytest.mark.parametrize("term", [{"name": "format_regex", "pattern": CATASTROPHIC},
                                  {"name": "format", "pattern": CATASTROPHIC}])  # fmt: skip
async def test_a_catastrophic_pattern_fails_its_samples_not_the_step(term):
    scorer = _scorer(term, {"name": "exact_match", "label": "exact"})
    items = [ScoreItem("p", HOSTILE, HOSTILE), ScoreItem("p", "aaaa", "aaaa")]
    got = await scorer.score(items)  # returns: neither raises nor hangs
    key = term["name"]
    assert got[0].terms[key] == 0.0 and "did not finish" in got[0].details[key]["timeout"]
    assert got[1].terms[key] == 1.0 and key not in got[1].details
    assert [g.terms["exact"] for g in got] == [1.0, 1.0]  # the other term scored both


async def test_a_pattern_never_holds_the_event_loop():
    order: list[str] = []

    async def score():
        await _scorer({"name": "format_regex", "pattern": CATASTROPHIC}).score(
            [ScoreItem("p", HOSTILE, "")]
        )
        order.append("scored")

    async def other_run():  # what a pool's other member does on the same loop
        await asyncio.sleep(0)
        order.append("other run")

    await asyncio.gather(score(), other_run())
    assert order == ["other run", "scored"]


async def test_a_batch_of_hostile_samples_is_bounded_by_the_budget(monkeypatch):
    monkeypatch.setattr(scorer_mod, "PATTERN_BUDGET_S", 1.0)
    items = [ScoreItem("p", HOSTILE, "")] * 100  # unbounded: 100 × 0.25 s
    started = time.perf_counter()
    got = await _scorer({"name": "format_regex", "pattern": CATASTROPHIC}).score(items)
    assert all(g.reward == 0.0 and "timeout" in g.details["format_regex"] for g in got)
    assert time.perf_counter() - started < 1.0 + 0.25 + 100 * scorer_mod.PATTERN_FLOOR_S + 3


def test_a_pattern_is_checked_by_the_engine_that_runs_it():
    errors = spec_errors({"reward": {"functions": [{"name": "format_regex", "pattern": "(a"}]}})
    assert [e["field"] for e in errors] == ["reward.functions.0.pattern"]
    assert "invalid regex" in errors[0]["message"]
