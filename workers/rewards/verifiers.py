"""The built-in per-sample verifiers, registered by name: pure functions of (item, term) →
TermScore. math_verify (a child process) and service (HTTP) score whole batches elsewhere;
`scorer.py` puts them all behind one interface."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import regex

from ..grpo.registry import Registry
from ..spec import (
    BoxedMatchTerm,
    EnvTerm,
    ExactMatchTerm,
    FormatRegexTerm,
    FormatTerm,
    Gsm8kTerm,
    NumericMatchTerm,
    OverlongPenaltyTerm,
    ReasoningGymTerm,
)
from .base import Role, ScoreItem, TermScore
from .text import final_number, gsm8k_gold, last_boxed, math_number, normalize_math, numbers

Verifier = Callable[[ScoreItem, Any], TermScore]
VERIFIERS: Registry[Verifier] = Registry("reward")
ROLES: dict[str, Role] = {}
# The verifiers that run a user's regular expression: `regex` with a time limit per sample
# (a pattern can backtrack for hours on one completion), `timeout_s` given by the caller
# (scorer.py's LocalTerm, which also bounds a whole batch). A match past it scores 0 for
# that sample, saying so in its details: the step and the run go on.
TIMED: set[str] = set()
PATTERN_TIMEOUT_S = 0.25

_SHOW = 200  # characters of extracted text kept in details


def _short(s: str | None) -> str | None:
    return s if s is None or len(s) <= _SHOW else s[:_SHOW] + "…"


def verifier(name: str, role: Role, timed: bool = False) -> Callable[[Verifier], Verifier]:
    def deco(fn: Verifier) -> Verifier:
        ROLES[name] = role
        if timed:
            TIMED.add(name)
        return VERIFIERS.register(name)(fn)

    return deco


def _binary(ok: bool, role: Role, **details: Any) -> TermScore:
    return TermScore(float(ok), ok if role == "verifier" else None, details)


def _same_number(a: str | None, b: str | None, tol: float) -> bool:
    x = None if a is None else math_number(a)
    y = None if b is None else math_number(b)
    return x is not None and y is not None and abs(x - y) <= tol


@verifier("exact_match", "verifier")
def exact_match(item: ScoreItem, term: ExactMatchTerm) -> TermScore:
    return _binary(item.completion.strip() == item.answer.strip(), "verifier")


@verifier("numeric_match", "verifier")
def numeric_match(item: ScoreItem, term: NumericMatchTerm) -> TermScore:
    found = numbers(item.completion)
    picked = (found[-1] if term.position == "last" else found[0]) if found else None
    ok = _same_number(picked, item.answer, term.tolerance)
    return _binary(ok, "verifier", extracted=picked)


@verifier("gsm8k", "verifier")
def gsm8k(item: ScoreItem, term: Gsm8kTerm) -> TermScore:
    gold = gsm8k_gold(item.answer)
    picked = final_number(item.completion)
    ok = _same_number(picked, gold.replace(",", ""), term.tolerance)
    return _binary(ok, "verifier", extracted=picked, gold=_short(gold))


@verifier("boxed_match", "verifier")
def boxed_match(item: ScoreItem, term: BoxedMatchTerm) -> TermScore:
    picked = last_boxed(item.completion)
    gold = last_boxed(item.answer) or item.answer  # a gold answer may come boxed too
    ok = picked is not None and (
        normalize_math(picked) == normalize_math(gold) or _same_number(picked, gold, 1e-9)
    )
    return _binary(ok, "verifier", extracted=_short(picked), gold=_short(gold))


@lru_cache(maxsize=64)
def _compiled(pattern: str, flags: int) -> regex.Pattern:
    return regex.compile(pattern, flags)


def pattern_score(pattern: str, flags: int, text: str, timeout_s: float) -> TermScore:
    """1 when `text` fully matches `pattern`; 0, with `timeout` in the details, when the
    match did not finish within `timeout_s` (the GIL released meanwhile)."""
    try:
        found = _compiled(pattern, flags).fullmatch(text, concurrent=True, timeout=timeout_s)
    except TimeoutError:
        return TermScore(0.0, None, {"timeout": f"the pattern did not finish in {timeout_s:g} s"})
    return _binary(found is not None, "shaping")


@verifier("format_regex", "shaping", timed=True)
def format_regex(
    item: ScoreItem, term: FormatRegexTerm, timeout_s: float = PATTERN_TIMEOUT_S
) -> TermScore:
    return pattern_score(term.pattern, 0, item.completion.strip(), timeout_s)


def think_structure(completion: str, tag: str = "think") -> bool:
    """`<think>…</think>` first (once, closed), then a non-empty answer."""
    open_, close = f"<{tag}>", f"</{tag}>"
    text = completion.strip()
    if not text.startswith(open_) or text.count(open_) != 1 or text.count(close) != 1:
        return False
    _, _, answer = text.partition(close)
    return bool(answer.strip())


@verifier("format", "shaping", timed=True)
def format_(item: ScoreItem, term: FormatTerm, timeout_s: float = PATTERN_TIMEOUT_S) -> TermScore:
    if term.pattern is not None:
        return pattern_score(term.pattern, regex.DOTALL, item.completion.strip(), timeout_s)
    return _binary(think_structure(item.completion, term.think_tag), "shaping")


def overlong_penalty_value(length: int, max_len: int, buffer: int) -> float:
    """DAPO's soft overlong punishment: 0 up to max_len − buffer tokens, then linear to −1
    at max_len (and −1 beyond)."""
    free = max_len - buffer
    if length <= free:
        return 0.0
    return max(-1.0, (free - length) / buffer)


@verifier("overlong_penalty", "shaping")
def overlong_penalty(item: ScoreItem, term: OverlongPenaltyTerm) -> TermScore:
    max_len = term.max_new_tokens or item.max_new_tokens
    if max_len <= 0:
        raise ValueError("overlong_penalty needs max_new_tokens (of the term or the rollout)")
    value = overlong_penalty_value(item.completion_tokens, max_len, term.buffer)
    return TermScore(value, None, {"tokens": item.completion_tokens, "max": max_len})


@verifier("env", "verifier")
def env_reward(item: ScoreItem, term: EnvTerm) -> TermScore:
    """The environment's reward for the episode; its own verdict when it gave one, else
    the threshold's. An episode whose environment gave no reward scores 0."""
    score = item.env_reward if item.env_reward is not None else 0.0
    correct = item.env_correct
    if correct is None and term.correct_threshold is not None:
        correct = item.env_reward is not None and score >= term.correct_threshold
    return TermScore(float(score), correct, {} if item.env_reward is not None else {"none": True})


@verifier("reasoning_gym", "verifier")
def reasoning_gym_score(item: ScoreItem, term: ReasoningGymTerm) -> TermScore:
    """reasoning-gym's own scorer of the generated entry, on the completion's last
    <answer>…</answer> (the whole completion without one)."""
    from reasoning_gym import get_score_answer_fn
    from reasoning_gym.utils import extract_answer

    entry = item.metadata.get("reasoning_gym")
    if not isinstance(entry, dict):
        raise ValueError("reasoning_gym: the example carries no reasoning-gym entry")
    answer = extract_answer(item.completion)
    if answer is None:
        answer = item.completion.strip()
    score = float(get_score_answer_fn(entry["metadata"]["source_dataset"])(answer, entry))
    return TermScore(score, score >= 1.0, {"extracted": _short(answer)})
