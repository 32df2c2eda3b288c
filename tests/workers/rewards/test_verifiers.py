"""The built-in verifiers against hand-written cases, and the text helpers under them."""

from __future__ import annotations

import pytest

from workers.rewards import VERIFIERS, ScoreItem, overlong_penalty_value, think_structure
from workers.rewards.text import final_number, gsm8k_gold, last_boxed, math_number, numbers
from workers.spec import RewardSpec


def term(name: str, **kw):
    return RewardSpec.model_validate({"functions": [{"name": name, **kw}]}).functions[0]


def score(name: str, completion: str, answer: str, tokens: int = 0, max_new: int = 0, **kw):
    item = ScoreItem("p", completion, answer, completion_tokens=tokens, max_new_tokens=max_new)
    return VERIFIERS.get(name)(item, term(name, **kw))


# ------------------------------------------------------------------------- text helpers


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{ {a}{b} }", " {a}{b} "),
        (r"\boxed{\sqrt{\frac{3}{4}}} and more", r"\sqrt{\frac{3}{4}}"),
        (r"\fbox{7}", "7"),
        (r"no box here", None),
        (r"\boxed{unclosed {", None),
        (r"\boxed{2} \boxed{3", "2"),  # the last one never closes: the last closed one
    ],
)
def test_last_boxed_keeps_nested_braces(text, boxed):
    assert last_boxed(text) == boxed


def test_numbers_strip_thousands_separators_and_keep_signs():
    assert numbers("pay $1,234.50 then -3, 12% and 1,2345") == ["1234.50", "-3", "12", "1", "2345"]
    assert numbers("5-3=2") == ["5", "3", "2"]  # a minus between digits is not a sign
    assert numbers("x2 and y") == []  # part of a name
    assert final_number("the total is 1,000,000.") == "1000000"
    assert final_number("none") is None


def test_gsm8k_gold_is_what_follows_the_marks():
    assert gsm8k_gold("She has 3 + 4 = 7 apples.\n#### 7") == "7"
    assert gsm8k_gold("#### 1,200") == "1,200"
    assert gsm8k_gold("42") == "42"  # no marks: the whole answer


def test_math_number_reads_fractions():
    assert math_number(r"\frac{2}{4}") == 0.5
    assert math_number(r"$\dfrac{-1}{2}$") == -0.5
    assert math_number("1/2") == 0.5 and math_number("0.5") == 0.5
    assert math_number(r"\frac{1}{0}") is None and math_number("x") is None


# ---------------------------------------------------------------------------- verifiers


def test_exact_match():
    assert score("exact_match", " 42 ", "42").score == 1.0
    assert score("exact_match", "42x", "42").score == 0.0
    assert score("exact_match", "42", "42").correct is True


@pytest.mark.parametrize(
    ("completion", "position", "expected"),
    [
        ("3 + 4 = 7", "last", 1.0),
        ("3 + 4 = 7", "first", 0.0),  # the behaviour before `position`, kept by name
        ("answer: 7.0!", "last", 1.0),
        ("7 apples, no: 8", "last", 0.0),
        ("none", "last", 0.0),
    ],
)
def test_numeric_match_compares_the_last_number_by_default(completion, position, expected):
    assert score("numeric_match", completion, "7", position=position).score == expected


def test_numeric_match_default_is_last():
    assert term("numeric_match").position == "last"


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("Each costs $2, so 600 × 2 = 1,200 dollars.", "600 * 2 = 1200\n#### 1,200", 1.0),
        ("It is 1,200. No wait, 1,300", "#### 1200", 0.0),  # the FINAL number counts
        ("The answer is -5.", "#### -5", 1.0),
        ("72 / 2 = 36 clips in May, 72 + 36 = 108 in all", "... #### 108", 1.0),
        ("I do not know", "#### 3", 0.0),
    ],
)
def test_gsm8k_takes_the_final_number(completion, gold, expected):
    got = score("gsm8k", completion, gold)
    assert got.score == expected and got.correct is bool(expected)


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        (r"so the answer is \boxed{\frac{1}{2}}", r"\frac{1}{2}", 1.0),
        (r"\boxed{\frac{2}{4}}", "0.5", 1.0),  # as numbers
        (r"\boxed{ \dfrac{1}{2} }", r"$\frac{1}{2}$", 1.0),  # normalized text
        (r"first \boxed{3}, finally \boxed{4}", "4", 1.0),
        (r"\boxed{x^{2}+1}", r"\boxed{x^{2}+1}", 1.0),  # a boxed gold
        (r"\boxed{3}", "4", 0.0),
        ("4", "4", 0.0),  # no box, no match
    ],
)
def test_boxed_match(completion, gold, expected):
    assert score("boxed_match", completion, gold).score == expected


def test_format_think_structure():
    assert think_structure("<think>a+b</think> 5")
    assert not think_structure("<think>a+b</think>")  # no answer after it
    assert not think_structure("5 <think>a</think> 5")  # not first
    assert not think_structure("<think>a<think>b</think> 5")
    assert not think_structure("<think>never closed 5")
    assert score("format", "<reason>x</reason>y", "", think_tag="reason").score == 1.0
    got = score("format", "<think>x</think> 5", "")
    assert got.score == 1.0 and got.correct is None  # shaping: never decides accuracy


def test_format_pattern_spans_lines():
    assert score("format", "line 1\nline 2\nANSWER: 3", "", pattern=r".*ANSWER: \d+").score == 1
    assert score("format", "no answer", "", pattern=r".*ANSWER: \d+").score == 0


def test_format_regex_is_kept():
    assert score("format_regex", " 42 ", "", pattern=r"\d+").score == 1.0
    assert score("format_regex", "4\n2", "", pattern=r"\d+").score == 0.0


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (12, 0.0), (13, -0.25), (14, -0.5), (16, -1.0), (20, -1.0)],
)
def test_overlong_penalty_at_the_buffers_edges(length, expected):
    # max 16, buffer 4: free up to 12 tokens, then linear to −1 at 16
    assert overlong_penalty_value(length, 16, 4) == pytest.approx(expected)
    assert score("overlong_penalty", "x", "", tokens=length, max_new=16, buffer=4).score == (
        pytest.approx(expected)
    )


def test_overlong_penalty_takes_its_own_max_over_the_rollouts():
    own = {"buffer": 50, "max_new_tokens": 150}
    got = score("overlong_penalty", "x", "", tokens=100, max_new=4096, **own)
    assert got.score == 0.0 and got.details == {"tokens": 100, "max": 150}
    assert score("overlong_penalty", "x", "", tokens=125, max_new=4096, **own).score == -0.5
