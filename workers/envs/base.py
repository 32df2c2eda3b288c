"""The Paddock `Environment` protocol: what a multi-turn episode talks to.

An environment starts an episode from an example (its prompt: chat messages or text) and
answers each model turn with an observation: the messages to append (a tool result, a user
message, a game state), whether the episode is done, and, when it is, its own reward. It
never sees token ids: the episode (episode.py) renders its messages with the model's own
chat template, appends their tokens masked out of the loss, and submits the row again.

The adapters (gym.py, verifiers_env.py, http_env.py) put the field's environment APIs
behind this protocol; `single_turn` (no environment) is the one-turn case of the same path.
Every method is a coroutine; a blocking environment runs in a thread (`blocking`), and the
episode bounds each call by `env.step_timeout_s`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..data.examples import Example
from ..data.prompts import Prompt
from .tool_calls import ToolCall, check_call, function_schema

Message = dict[str, Any]


@dataclass(frozen=True)
class ModelTurn:
    """One model turn as the environment gets it."""

    text: str  # the reply, special tokens skipped
    content: str  # the reply's text outside its tool calls
    calls: tuple[ToolCall, ...]  # parsed per the model's family; malformed ones carry .error
    finish_reason: str  # stop | length
    index: int  # 0 for the first turn


@dataclass
class Observation:
    messages: list[Message] = field(default_factory=list)  # appended after the model's turn
    done: bool = False
    reward: float | None = None  # the environment's reward for the episode (when done)
    correct: bool | None = None  # the environment's verdict, for accuracy (when done)
    tool_calls: int = 0  # calls answered in `messages`
    tool_errors: int = 0  # of them, calls that could not be run (malformed, unknown, raised)
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Session(Protocol):
    """One episode of an environment."""

    prompt: Prompt  # what the model reads first

    async def step(self, turn: ModelTurn) -> Observation: ...

    async def close(self) -> None: ...


@runtime_checkable
class Environment(Protocol):
    name: str
    tools: tuple[dict, ...]  # OpenAI-style tool schemas, given to the chat template (`tools=`)

    async def start(self, example: Example, seed: int) -> Session:
        """A new episode of `example`; `seed` is a pure function of (run seed, step, group,
        sample), so a replayed episode starts the same."""

    def examples(self, eval_size: int) -> tuple[list[Example], list[Example]] | None:
        """The environment's own (train, held-out) episodes, for `data.task: environment`;
        None when it plays the data task's examples."""

    async def close(self) -> None: ...


# Blocking environments (Gymnasium's step, a verifiers tool written as a plain function)
# run here, never on the event loop. A hung call keeps its thread; the episode stops
# waiting for it at step_timeout_s.
_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="paddock-env")


async def blocking(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_THREADS, lambda: fn(*args, **kwargs))


async def call_maybe_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(...)`, awaited when it is a coroutine function, else run in a thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await blocking(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def tool_message(name: str | None, content: str) -> Message:
    return {"role": "tool", "name": name or "", "content": content}


class Toolbox:
    """Tools as functions with their OpenAI schemas: answers a turn's calls, each a tool
    message, in order; malformed calls, unknown tools and tools that raise are answered as
    an error message and counted. An exception of a `fatal` class is not the tool's answer
    but the environment's failure (an environment server that is down): it propagates."""

    def __init__(
        self,
        tools: Mapping[str, tuple[dict, Callable[..., Any]]],
        fatal: tuple[type[Exception], ...] = (),
    ):
        self._fns = {name: fn for name, (_, fn) in tools.items()}
        self.schemas = tuple(schema for schema, _ in tools.values())
        self._by_name = {name: function_schema(s) for name, (s, _) in tools.items()}
        self.fatal = fatal

    def __bool__(self) -> bool:
        return bool(self._fns)

    async def answer(self, calls: tuple[ToolCall, ...]) -> Observation:
        obs = Observation()
        for call in calls:
            call = check_call(call, self._by_name)
            obs.tool_calls += 1
            if not call.ok:
                obs.tool_errors += 1
                obs.messages.append(tool_message(call.name, f"error: {call.error}"))
                continue
            try:
                result = await call_maybe_async(self._fns[call.name], **call.arguments)
            except self.fatal:
                raise
            except Exception as exc:  # the tool's failure is the model's observation
                obs.tool_errors += 1
                obs.messages.append(tool_message(call.name, f"error: {type(exc).__name__}: {exc}"))
                continue
            obs.messages.append(tool_message(call.name, str(result)))
        return obs
