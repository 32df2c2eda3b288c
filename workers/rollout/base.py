"""The rollout backend protocol: one interface for the torch, vLLM and TensorRT-LLM engines.

Every method is a coroutine so that engines with native async APIs (vLLM's AsyncLLM,
TensorRT-LLM's AsyncLLM) implement it directly and blocking engines (torch) run their work in
a thread. Requests are groups: one prompt × n samples, the unit GRPO scores.

Two promises every backend keeps:
- logprobs are those of the sampled token under softmax(logits / temperature), untruncated;
- a token is labelled with adapter version v only if the engine had acknowledged serving v
  when it produced the token (`load_adapter` returns only after that acknowledgement).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args, runtime_checkable

from ..adapters.update import AdapterUpdate

PauseMode = Literal["abort", "keep", "wait"]


def pause_mode_check(mode: str) -> None:
    """Refuse a pause mode no engine knows (every backend's `pause` starts with this)."""
    if mode not in get_args(PauseMode):
        raise ValueError(f"unknown pause mode {mode!r}; known: {', '.join(get_args(PauseMode))}")


FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    max_new_tokens: int = 8
    stop: tuple[str, ...] = ()
    greedy: bool = False  # eval: argmax; logprobs still reported under the temperature


@dataclass
class Sample:
    token_ids: list[int] = field(default_factory=list)  # includes EOS when it stopped on EOS
    logprobs: list[float] = field(default_factory=list)  # one per token
    versions: list[int] = field(default_factory=list)  # adapter version per token
    finish_reason: FinishReason | None = None
    text: str = ""  # decoded completion, special tokens skipped
    # An episode of several turns (workers/envs/episode.py) as one sample: 0 on the tokens an
    # environment appended (tool results, user turns; logprob 0.0, version -1), which get no
    # gradient and count for no staleness. None: every token is the model's (what engines
    # return: they never see a mask).
    loss_mask: list[int] | None = None

    @property
    def model_tokens(self) -> int:
        """How many of the tokens are the model's."""
        return len(self.token_ids) if self.loss_mask is None else sum(self.loss_mask)

    @property
    def model_versions(self) -> list[int]:
        """The adapter versions of the model's own tokens."""
        if self.loss_mask is None:
            return self.versions
        return [v for v, m in zip(self.versions, self.loss_mask, strict=True) if m]

    @property
    def done(self) -> bool:
        return self.finish_reason in ("stop", "length")


@dataclass
class GroupRequest:
    request_id: str
    prompt_ids: list[int]
    n: int
    seed: int
    params: SamplingParams
    # Resubmission after an abort: the partial samples to continue (their tokens, logprobs
    # and versions are kept as they are).
    partial: list[Sample] | None = None
    # The samples' sequences come back as the start of a later request's prompt (an
    # episode's next turn): an engine may keep their cache for it.
    continued: bool = False


@dataclass
class GroupResult:
    request_id: str
    prompt_ids: list[int]
    samples: list[Sample]

    @property
    def aborted(self) -> bool:
        return any(not s.done for s in self.samples)

    @property
    def min_version(self) -> int:
        """The group's staleness is that of its oldest token."""
        versions = [v for s in self.samples for v in s.model_versions]
        return min(versions) if versions else -1

    def resubmission(self, request: GroupRequest) -> GroupRequest:
        return GroupRequest(
            request.request_id,
            request.prompt_ids,
            request.n,
            request.seed,
            request.params,
            partial=self.samples,
            continued=request.continued,
        )


@runtime_checkable
class RolloutBackend(Protocol):
    name: str
    # whether load_adapter checks the update's probe (the trainer computes one only then)
    needs_probe: bool
    # whether the constructor takes a `device` (an in-process engine: make_backend may name
    # an in-process run's second GPU; the others place themselves by their own settings)
    placeable: bool

    @property
    def served_version(self) -> int: ...

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        """Generate every request; requests cut short by an abort come back with unfinished
        samples (finish_reason "abort") so the caller can resubmit them."""

    async def load_adapter(self, update: AdapterUpdate) -> int:
        """Apply the adapter and return the version the engine now serves (the ack)."""

    async def pause(self, mode: PauseMode) -> None:
        """abort: end in-flight requests now; keep: freeze them until resume; wait: let them
        finish and hold new ones. Requests submitted while paused wait for resume."""

    async def resume(self) -> None: ...

    async def abort(self) -> list[GroupResult]:
        """Abort everything in flight; returns the partial results."""

    async def close(self) -> None: ...
