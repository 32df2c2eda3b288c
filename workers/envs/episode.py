"""Episodes above the rollout protocol: turn by turn on the one decode loop of any engine.

A group's first turn is the group request every rollout makes (one prompt × G samples, the
group's seed): a single-turn run is exactly that and nothing more. Each sample is then an
episode of its own: when its turn ends (EOS, a stop string, max_new_tokens), the row has
left the engine; the environment answers off the event loop (an async call, or a thread for
a blocking one, bounded by `step_timeout_s`), its tokens are appended with loss mask 0, and
the row goes back to the engine as a new request whose prompt is the episode so far. The
engine meanwhile decodes the other rows: requests that become ready at the same moment go
in one `generate` call, and calls overlap (`TurnQueue`).

Turn k > 0 of sample j samples with its own seed (a pure function of the group's seed, j
and k), so an episode is a function of its tokens and the environment, on every engine.

An episode ends when the environment says done, at `max_turns` model turns, or at
`max_episode_tokens` (the turn that crosses it is cut there: truncated). An environment
that raises or exceeds its time limit fails its episode, not the run: the episode keeps
its tokens with loss mask 0 everywhere (no gradient of its own) and is counted.

A stop (pause, abort, a pool leaving) keeps each group's progress (`GroupProgress`:
picklable, checkpointed with the buffer): the first turn's partial samples, or each
episode's tokens, turns and the model's replies so far. Resuming starts a fresh session of
the environment and replays the recorded replies into it; an environment that answers a
replay differently fails that episode.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..data.examples import Example
from ..rollout.base import GroupRequest, GroupResult, RolloutBackend, Sample, SamplingParams
from .base import Environment, ModelTurn, Observation, Session
from .render import ChatRenderer
from .tool_calls import ToolFormat, parse_tool_calls


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int = 1
    max_episode_tokens: int | None = None  # None: max_turns × max_new_tokens bounds it
    step_timeout_s: float = 30.0


class EpisodeFailure(RuntimeError):
    """The environment failed this episode (it raised, hung, or replayed differently)."""


def turn_seed(group_seed: int, sample: int, turn: int) -> int:
    return random.Random(f"paddock-turn:{group_seed}:{sample}:{turn}").getrandbits(62)


@dataclass
class EpisodeState:
    """One episode's progress: everything a resume needs, no live session."""

    sample: int  # index in its group
    prompt_ids: list[int]
    tokens: list[int] = field(default_factory=list)  # after the prompt: model and env
    logprobs: list[float] = field(default_factory=list)  # 0.0 on env tokens
    versions: list[int] = field(default_factory=list)  # -1 on env tokens
    mask: list[int] = field(default_factory=list)  # 1 model, 0 env
    turns: list[dict[str, Any]] = field(default_factory=list)  # the inspector's record
    replies: list[tuple[str, str]] = field(default_factory=list)  # (text, finish) per model turn
    partial: Sample | None = None  # the model turn a stop cut short
    finish: str | None = None  # stop | truncated | failed, once done
    error: str | None = None
    reward: float | None = None  # the environment's
    correct: bool | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    env_s: float = 0.0
    wall_s: float = 0.0  # the episode's life, summed over its stretches (a resume adds)

    @property
    def done(self) -> bool:
        return self.finish is not None

    @property
    def model_turns(self) -> int:
        return len(self.replies)

    def add(self, tokens: list[int], logprobs: list[float], versions: list[int], model: bool):
        self.tokens += tokens
        self.logprobs += logprobs
        self.versions += versions
        self.mask += [1 if model else 0] * len(tokens)

    def sample_of(self, answer_text: str) -> Sample:
        """The episode as one sample: every token after the prompt, the model's unmasked.
        Its text is the last model reply (what rewards and accuracy read)."""
        mask = self.mask if self.finish != "failed" else [0] * len(self.mask)
        return Sample(
            list(self.tokens),
            list(self.logprobs),
            list(self.versions),
            "length" if self.finish == "truncated" else "stop",
            answer_text,
            loss_mask=None if all(mask) else list(mask),
        )


@dataclass
class GroupProgress:
    """A group of a step in flight: its first turn (built from the first session's prompt,
    with its partial samples after a stop), then, once that is done, its episodes."""

    request_id: str
    n: int
    seed: int
    params: SamplingParams
    request: GroupRequest | None = None
    episodes: list[EpisodeState] | None = None
    prompt: Any = None  # the first prompt as the sessions gave it (for the inspector)


@dataclass
class GroupEpisodes:
    result: GroupResult  # each episode as one sample
    prompt: Any  # the first prompt (messages or text), as the session gave it
    states: list[EpisodeState]


class TurnQueue:
    """Model turns to the engine: requests made in the same pass of the event loop go in one
    `generate` call (the first turns of a step's groups, the rows a call returned together),
    and a call does not wait for the previous ones."""

    def __init__(self, backend: RolloutBackend):
        self.backend = backend
        self._waiting: list[tuple[GroupRequest, asyncio.Future]] = []
        self._tasks: set[asyncio.Task] = set()

    async def generate(self, request: GroupRequest) -> GroupResult:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not self._waiting:
            loop.call_soon(self._flush)
        self._waiting.append((request, fut))
        return await fut

    def _flush(self) -> None:
        batch, self._waiting = self._waiting, []
        if batch:
            task = asyncio.ensure_future(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[GroupRequest, asyncio.Future]]) -> None:
        try:
            results = await self.backend.generate([r for r, _ in batch])
        except BaseException as exc:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, fut), res in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(res)


class EpisodeRunner:
    """Runs a step's groups as episodes of `env` (None: one turn, no environment)."""

    def __init__(
        self,
        backend: RolloutBackend,
        renderer: ChatRenderer,
        env: Environment | None,
        limits: EpisodeLimits,
        tool_format: ToolFormat = "hermes",
        stopping: Callable[[], bool] = lambda: False,
    ):
        self.queue = TurnQueue(backend)
        self.renderer, self.env, self.limits = renderer, env, limits
        self.tool_format = tool_format
        self.stopping = stopping

    # ---------------------------------------------------------------- a group

    async def run_group(self, progress: GroupProgress, example: Example) -> GroupEpisodes | None:
        """The group's episodes, or None when a stop cut it (`progress` then holds what a
        resume continues from)."""
        t0 = time.perf_counter()
        n = progress.n
        states = progress.episodes or [EpisodeState(j, []) for j in range(n)]
        sessions: list[Session | None] = [None] * n
        try:
            live = [j for j, s in enumerate(states) if not s.done]  # a resume skips the done
            opened = await asyncio.gather(
                *(self._open(states[j], example, progress.seed) for j in live),
                return_exceptions=True,
            )
            for j, got in zip(live, opened, strict=True):
                if isinstance(got, EpisodeFailure):
                    states[j].finish, states[j].error = "failed", str(got)
                elif isinstance(got, BaseException):
                    raise got
                else:
                    sessions[j] = got
            if progress.prompt is None:
                progress.prompt = next(
                    (s.prompt for s in sessions if s is not None), example.prompt
                )
            if progress.request is None:
                ids = self.renderer.prompt_ids(progress.prompt)
                progress.request = GroupRequest(
                    progress.request_id, ids, n, progress.seed, progress.params,
                    continued=self._continues(1),
                )  # fmt: skip
            if progress.episodes is None:
                first = await self._turn(progress.request)
                if first is None or first.aborted:
                    if first is not None:
                        progress.request = first.resubmission(progress.request)
                    return None
                for state, sample in zip(states, first.samples, strict=True):
                    state.prompt_ids = list(progress.request.prompt_ids)
                    if not state.done:  # not failed at its start
                        self._take_model_turn(state, sample)
                progress.episodes = states
                spent = time.perf_counter() - t0
                for state in states:
                    state.wall_s += spent
            await asyncio.gather(
                *(
                    self._episode(s, sess, progress)
                    for s, sess in zip(states, sessions, strict=True)
                    if sess is not None
                )
            )
        finally:
            for sess in sessions:
                if sess is not None:
                    await self._close(sess)
        if not all(s.done for s in states):
            return None
        result = GroupResult(
            progress.request_id,
            progress.request.prompt_ids,
            [s.sample_of(self._answer(s)) for s in states],
        )
        return GroupEpisodes(result, progress.prompt, states)

    async def _open(self, state: EpisodeState, example: Example, seed: int) -> Session:
        """A session of the episode, brought to where the episode was (a resume)."""
        if self.env is None:
            return _OneTurn(example)
        session = await self._env_call(state, self.env.start(example, seed))
        await self._replay(state, session)
        return session

    async def _turn(self, request: GroupRequest) -> GroupResult | None:
        """One model turn, resubmitted after the aborts of weight updates; None (or an
        aborted result, to keep) once stopping."""
        while True:
            if self.stopping():
                return None
            res = await self.queue.generate(request)
            if not res.aborted:
                return res
            if self.stopping():
                return res
            await asyncio.sleep(0.01)  # an abort: let the pause/resume around it finish
            request = res.resubmission(request)

    # ---------------------------------------------------------------- one episode

    async def _episode(self, state: EpisodeState, session: Session, group: GroupProgress) -> None:
        t0 = time.perf_counter()
        try:
            while not state.done:
                if state.partial is None and state.model_turns > len(self._env_turns(state)):
                    await self._env_turn(state, session)  # the last reply's answer
                    continue
                if self.stopping():
                    return
                res = await self._turn(self._next_request(state, group))
                if res is None or res.aborted:
                    if res is not None:
                        state.partial = res.samples[0]
                    return
                state.partial = None
                self._take_model_turn(state, res.samples[0])
        except EpisodeFailure as exc:
            state.finish, state.error = "failed", str(exc)
        finally:
            state.wall_s += time.perf_counter() - t0

    async def _env_call(self, state: EpisodeState, coro) -> Any:
        t0 = time.perf_counter()
        try:
            return await asyncio.wait_for(coro, self.limits.step_timeout_s)
        except TimeoutError:
            raise EpisodeFailure(
                "the environment did not answer within env.step_timeout_s="
                f"{self.limits.step_timeout_s:g} s"
            ) from None
        except EpisodeFailure:
            raise
        except Exception as exc:
            raise EpisodeFailure(f"the environment raised {type(exc).__name__}: {exc}") from exc
        finally:
            state.env_s += time.perf_counter() - t0

    async def _close(self, session: Session) -> None:
        try:
            await asyncio.wait_for(session.close(), self.limits.step_timeout_s)
        except Exception:  # noqa: S110 - a session that fails to close has given its answers
            pass

    @staticmethod
    def _env_turns(state: EpisodeState) -> list[dict]:
        return [t for t in state.turns if t["role"] == "env"]

    def _model_turn(self, text: str, finish: str, index: int) -> ModelTurn:
        parsed = parse_tool_calls(text, self.tool_format)
        return ModelTurn(text, parsed.content, parsed.calls, finish, index)

    async def _replay(self, state: EpisodeState, session: Session) -> None:
        """Bring a fresh session to where the episode was: each answered reply stepped
        again, its answer checked against the recorded one."""
        for k, turn in enumerate(self._env_turns(state)):
            text, finish = state.replies[k]
            obs = await self._env_call(state, session.step(self._model_turn(text, finish, k)))
            if obs.messages != turn["messages"] or obs.done != turn["done"]:
                raise EpisodeFailure(
                    f"on resume the environment answered turn {k} differently than before; "
                    "an environment must answer the same replies the same way"
                )

    async def _env_turn(self, state: EpisodeState, session: Session) -> None:
        """The environment's answer to the last model turn; ends the episode when it says
        done or a budget is reached."""
        k = state.model_turns - 1
        text, finish = state.replies[k]
        obs: Observation = await self._env_call(
            state, session.step(self._model_turn(text, finish, k))
        )
        state.tool_calls += obs.tool_calls
        state.tool_errors += obs.tool_errors
        last_turn = not obs.done and state.model_turns >= self.limits.max_turns
        ids: list[int] = []
        if not obs.done and not last_turn and obs.messages:
            ids = self.renderer.answer_ids(obs.messages, self._last_ended_on_eos(state))
        start = len(state.tokens)
        state.add(ids, [0.0] * len(ids), [-1] * len(ids), model=False)
        state.turns.append(
            {
                "role": "env", "start": start, "end": len(state.tokens),
                "messages": obs.messages, "done": obs.done,
                "tool_calls": obs.tool_calls, "tool_errors": obs.tool_errors,
            }
        )  # fmt: skip
        if obs.done:
            state.reward, state.correct = obs.reward, obs.correct
            state.finish = "stop"
        elif last_turn:
            state.finish = "truncated"
        else:
            self._over_budget(state)

    def _last_ended_on_eos(self, state: EpisodeState) -> bool:
        last = [t for t in state.turns if t["role"] == "model"][-1]
        return self.renderer.ended_on_eos(state.tokens[last["start"] : last["end"]])

    def _over_budget(self, state: EpisodeState) -> None:
        """Past max_episode_tokens: cut there, truncated."""
        budget = self.limits.max_episode_tokens
        if budget is None or len(state.tokens) < budget:
            return
        for name in ("tokens", "logprobs", "versions", "mask"):
            setattr(state, name, getattr(state, name)[:budget])
        for t in state.turns:
            t["start"], t["end"] = min(t["start"], budget), min(t["end"], budget)
        state.finish = "truncated"

    def _take_model_turn(self, state: EpisodeState, sample: Sample) -> None:
        start = len(state.tokens)
        state.add(list(sample.token_ids), list(sample.logprobs), list(sample.versions), True)
        versions = sorted(set(sample.versions))
        state.turns.append(
            {
                "role": "model", "start": start, "end": len(state.tokens),
                "text": sample.text, "finish": sample.finish_reason,
                "adapter_version": versions[0] if versions else -1,
                "adapter_versions": versions,
            }
        )  # fmt: skip
        state.replies.append((sample.text, sample.finish_reason or "stop"))
        if self.env is None:  # one turn: nothing to answer; its own finish (stop | length)
            state.finish = "truncated" if sample.finish_reason == "length" else "stop"
            return
        self._over_budget(state)

    def _next_request(self, state: EpisodeState, group: GroupProgress) -> GroupRequest:
        k = state.model_turns
        partial = [state.partial] if state.partial is not None else None
        return GroupRequest(
            f"{group.request_id}-e{state.sample}-t{k}",
            state.prompt_ids + state.tokens,
            1,
            turn_seed(group.seed, state.sample, k),
            group.params,
            partial=partial,
            continued=self._continues(k + 1),
        )

    def _continues(self, turns: int) -> bool:
        """Whether an episode may go on after `turns` model turns (the engine may then keep
        the turn's cache for the next: its prompt starts with this turn's sequence)."""
        return self.env is not None and turns < self.limits.max_turns

    @staticmethod
    def _answer(state: EpisodeState) -> str:
        model = [t for t in state.turns if t["role"] == "model"]
        return model[-1]["text"] if model else ""


class _OneTurn:
    """No environment: the episode is the first turn."""

    def __init__(self, example: Example):
        self.prompt = example.prompt

    async def step(self, turn: ModelTurn) -> Observation:
        return Observation(done=True)

    async def close(self) -> None:
        pass


def episode_record(state: EpisodeState) -> dict[str, Any]:
    """What a scored group keeps of an episode: its turns (for the inspector and the
    metrics) and counters; JSON values only."""
    return {
        "turns": state.turns,
        "model_turns": state.model_turns,
        "tool_calls": state.tool_calls,
        "tool_errors": state.tool_errors,
        "env_s": state.env_s,
        "wall_s": state.wall_s,
        "finish": state.finish,
        "error": state.error,
    }
