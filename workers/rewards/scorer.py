"""One scorer for a reward spec: every term scores the whole batch (concurrently: a service
call and the math_verify process overlap), then the weighted sum and its parts per sample."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from ..grants import Grants
from ..grpo.registry import Registry
from ..spec import RewardSpec
from .base import RewardError, Role, SampleScore, ScoreItem, TermScore, TermScorer, run_all
from .math_verify_term import MathVerifyScorer
from .service import ServiceScorer
from .verifiers import PATTERN_TIMEOUT_S, ROLES, TIMED, VERIFIERS, Verifier

# a batch's pattern matches (one term's) may take this long in all; past it, each remaining
# sample gets PATTERN_FLOOR_S, which a pattern that does not backtrack needs no more than
PATTERN_BUDGET_S = 5.0
PATTERN_FLOOR_S = 0.01


class LocalTerm:
    """A per-sample verifier of verifiers.py, run in a thread: never on the event loop, which
    a pool's other runs share. A verifier of a user's pattern (TIMED) gets a time limit per
    sample, and the batch a budget: a catastrophic pattern costs its own samples (scored 0),
    never the step, the run, or the others."""

    def __init__(self, fn: Verifier, term: Any, role: Role, timed: bool = False):
        self.fn, self.term, self.role, self.timed = fn, term, role, timed

    async def score(self, items: list[ScoreItem]) -> list[TermScore]:
        return await asyncio.to_thread(self._batch, items)

    def _batch(self, items: list[ScoreItem]) -> list[TermScore]:
        if not self.timed:
            return [self.fn(item, self.term) for item in items]
        out, spent = [], 0.0
        for item in items:
            limit = PATTERN_TIMEOUT_S if spent < PATTERN_BUDGET_S else PATTERN_FLOOR_S
            started = time.perf_counter()
            out.append(self.fn(item, self.term, limit))
            spent += time.perf_counter() - started
        return out

    async def close(self) -> None:
        pass


# a term's scorer from its spec and the run's grants (secrets, egress policy)
TermFactory = Callable[[Any, Grants], TermScorer]
TERMS: Registry[TermFactory] = Registry("reward")
for _name in VERIFIERS.names():
    TERMS.register(_name)(
        lambda term, grants, _n=_name: LocalTerm(VERIFIERS.get(_n), term, ROLES[_n], _n in TIMED)
    )
TERMS.register("math_verify")(lambda term, grants: MathVerifyScorer(term))
TERMS.register("service")(ServiceScorer)


class Scorer:
    def __init__(self, spec: RewardSpec, grants: Grants):
        self.keys = [t.key for t in spec.functions]
        self.weights = [t.weight for t in spec.functions]
        self.terms: list[TermScorer] = []
        try:
            for t in spec.functions:
                self.terms.append(TERMS.get(t.name)(t, grants))
        except BaseException:
            for built in self.terms:  # a later term failed: stop what already started
                _close_soon(built)
            raise
        self.roles = [t.role for t in self.terms]

    @property
    def has_verifier(self) -> bool:
        return "verifier" in self.roles

    async def _run(self, which: list[int], items: list[ScoreItem]) -> list[list[TermScore]]:
        if not items or not which:
            return [[] for _ in which]
        # concurrently (a service call and the math_verify child overlap); one term failing
        # cancels the others
        done = await run_all([self.terms[i].score(items) for i in which])
        out = []
        for i, got in zip(which, done, strict=True):
            if len(got) != len(items):
                raise RewardError(
                    f"reward term {self.keys[i]!r} scored {len(got)} of {len(items)} samples"
                )
            for s in got:
                if not math.isfinite(s.score):
                    raise RewardError(f"reward term {self.keys[i]!r} gave {s.score}")
            out.append(got)
        return out

    async def score(self, items: list[ScoreItem]) -> list[SampleScore]:
        every = list(range(len(self.terms)))
        per_term = await self._run(every, items)
        out = []
        for j in range(len(items)):
            parts = [per_term[i][j] for i in every]
            checks = [p.correct for p, r in zip(parts, self.roles, strict=True) if r == "verifier"]
            out.append(
                SampleScore(
                    reward=sum(w * p.score for w, p in zip(self.weights, parts, strict=True)),
                    terms={k: p.score for k, p in zip(self.keys, parts, strict=True)},
                    details={
                        k: p.details for k, p in zip(self.keys, parts, strict=True) if p.details
                    },
                    correct=all(bool(c) for c in checks) if checks else None,
                )
            )
        return out

    async def correct(self, items: list[ScoreItem]) -> list[bool | None]:
        """Accuracy alone (eval): only the verifier terms run."""
        which = [i for i, r in enumerate(self.roles) if r == "verifier"]
        if not which:
            return [None] * len(items)
        per_term = await self._run(which, items)
        return [all(bool(t[j].correct) for t in per_term) for j in range(len(items))]

    async def close(self) -> None:
        for t in self.terms:
            await t.close()


def _close_soon(term: TermScorer) -> None:
    try:
        asyncio.get_running_loop().create_task(term.close())
    except RuntimeError:  # no loop: nothing of it was started (children start lazily)
        pass


def make_scorer(spec: RewardSpec, grants: Grants | None = None) -> Scorer:
    """The scorer of `spec`: `await scorer.score(items)` → one SampleScore per item. `grants`:
    the run's secrets and egress policy (default: `paddock train`'s, from the environment)."""
    return Scorer(spec, grants if grants is not None else Grants.standalone())
