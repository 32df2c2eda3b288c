"""math_verify: the math-verify library in its child process, under its own timeouts."""

from __future__ import annotations

import asyncio
import threading

import pytest

from workers.rewards import ScoreItem, make_scorer
from workers.spec import RewardSpec


def scorer(**kw):
    return make_scorer(RewardSpec.model_validate({"functions": [{"name": "math_verify", **kw}]}))


def items(pairs):
    return [ScoreItem("p", completion, gold) for completion, gold in pairs]


CASES = [
    # equivalent fractions, both ways round, and decimals
    (r"The answer is $\frac{2}{4}$", "1/2", 1.0),
    ("so it is 0.5", r"\frac{1}{2}", 1.0),
    (r"\boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"Adding up: 3 + 4 = 7, so \boxed{\frac{2}{4}}", r"$\frac{1}{2}$", 1.0),
    # nested braces in the box
    (r"\boxed{\sqrt{\frac{9}{4}}}", "3/2", 1.0),
    (r"\boxed{\frac{1}{3}}", "1/2", 0.0),
    # the box is the answer, whatever numbers came before it
    (r"We try 12, then 15: \boxed{15}", "15", 1.0),
    (r"We try 12, then 15: \boxed{12}", "15", 0.0),
    # symbolic
    (r"\boxed{x^2 + 2x + 1}", "(x+1)^2", 1.0),
    ("no answer at all", "3", 0.0),
]


async def test_math_verify_cases():
    s = scorer()
    try:
        got = await s.score(items([(c, g) for c, g, _ in CASES]))
    finally:
        await s.close()
    assert [g.reward for g in got] == [e for _, _, e in CASES], [g.details for g in got]
    assert all(g.correct is bool(e) for g, (_, _, e) in zip(got, CASES, strict=True))
    assert got[0].details["math_verify"]["pred"]  # what it parsed, for the inspector


async def test_a_runaway_expression_times_out_and_scores_zero():
    # sympy would take far longer than a second on this; math-verify's own alarm (in the
    # child's main thread) stops it, and the next sample is scored as usual
    s = scorer(timeout_s=1)
    try:
        got = await s.score(items([(r"\boxed{2^{2^{2^{100}}}}", "3"), (r"\boxed{3}", "3")]))
    finally:
        await s.close()
    assert [g.reward for g in got] == [0.0, 1.0]


def test_scoring_works_from_an_event_loop_off_the_main_thread():
    # math-verify's signal-based timeouts fail off the main thread of a process; ours run in
    # the child's main thread, so a driver's loop may run anywhere
    out: list = []

    def run():
        async def go():
            s = scorer()
            try:
                return await s.score(items([(r"\boxed{\frac{2}{4}}", "1/2")]))
            finally:
                await s.close()

        out.append(asyncio.run(go()))

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert out and out[0][0].reward == 1.0


async def test_a_killed_child_is_replaced():
    s = scorer()
    try:
        assert (await s.score(items([("1", "1")])))[0].reward == 1.0
        term = s.terms[0]
        term._proc.kill()
        await term._proc.wait()
        # the dead child is noticed when the next request is written, and a new one starts
        got = await s.score(items([("2", "2"), ("3", "3")]))
        assert [g.reward for g in got] == [1.0, 1.0]
        assert (await s.score(items([("4", "4")])))[0].reward == 1.0
    finally:
        await s.close()


@pytest.mark.parametrize("bad", [0, 121])
def test_timeout_bounds(bad):
    from workers.spec import spec_errors

    errors = spec_errors({"reward": {"functions": [{"name": "math_verify", "timeout_s": bad}]}})
    assert [e["field"] for e in errors] == ["reward.functions.0.timeout_s"]
