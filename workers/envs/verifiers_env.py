"""Environments written for `verifiers` (0.4, `verifiers.v1`), run unchanged.

What a verifiers environment declares is its taskset: the tasks (`Taskset.load()`: a prompt,
a system prompt, the task's own data), their tools (`Toolset`s with `@vf.tool` methods,
from `Task.toolsets` and `Taskset.toolsets`) and their scoring (`@vf.reward` and
`@vf.metric` methods, judged on the finished trace by `Task.score`). Here those run in the
job's process, as they are: the taskset's tasks are the examples (`data.task: environment`;
the last tenth, at most `data.eval_size`, held out), each episode gets its own toolset
instances (`setup`, then `setup_task`), the model's tool calls are answered by calling the
`@vf.tool` methods, and the first reply without a tool call ends the episode, which is then
scored by `Task.score` on a verifiers `Trace` of the conversation. The episode's reward is
the trace's (`trace.reward`, the weighted sum of its rewards).

Not taken from verifiers: its harnesses, runtimes and model clients (the episode is
Paddock's, on Paddock's engine) and MCP transport (the tools are called in-process, under
`env.step_timeout_s`). A tool is advertised under its MCP name (`<server>_<tool>`, as
verifiers' servers name them) with a JSON schema made from its signature.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

from pydantic import create_model

from ..data.examples import Example
from .base import Message, ModelTurn, Observation, Toolbox

MAX_TASKS = 100_000  # an infinite taskset is read this far


def is_verifiers_taskset(obj: Any) -> bool:
    try:
        from verifiers.v1 import Taskset
    except ImportError:
        return False
    return isinstance(obj, Taskset)


def _tool_schema(name: str, fn: Any) -> dict:
    """The OpenAI schema of a `@vf.tool` method, from its signature (as MCP builds it)."""
    fields = {}
    for pname, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = p.annotation if p.annotation is not inspect.Parameter.empty else Any
        fields[pname] = (ann, ... if p.default is inspect.Parameter.empty else p.default)
    schema = create_model(f"{name}_args", **fields).model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": (inspect.getdoc(fn) or "").strip(),
            "parameters": schema,
        },
    }


def _toolsets(task: Any, taskset: Any) -> list[Any]:
    return [*type(task).toolsets(task.config), *type(taskset).toolsets(taskset.config)]


def _tools_of(toolsets: list[Any]) -> dict[str, tuple[dict, Any]]:
    from verifiers.v1.utils.decorators import discover_decorated

    tools = {}
    for ts in toolsets:
        prefix = ts.server_name
        for fn in discover_decorated(ts, "tool"):
            bare = getattr(fn, "tool_name", None) or fn.__name__
            name = f"{prefix}_{bare}" if prefix else bare
            tools[name] = (_tool_schema(name, fn), ts._with_state(fn))
    return tools


def _messages(data: Any) -> list[Message]:
    prompt = data.prompt
    out: list[Message] = []
    if data.system_prompt:
        out.append({"role": "system", "content": data.system_prompt})
    if isinstance(prompt, str):
        out.append({"role": "user", "content": prompt})
    else:
        for m in prompt or []:
            dumped = m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
            out.append({"role": dumped["role"], "content": dumped.get("content") or ""})
    return out


class VerifiersSession:
    def __init__(self, task: Any, toolsets: list[Any]):
        self.task, self.toolsets = task, toolsets
        self.prompt = _messages(task.data)
        self.toolbox = Toolbox(_tools_of(toolsets))
        self.conversation: list[tuple[str, Any]] = []  # (kind, verifiers message)

    async def step(self, turn: ModelTurn) -> Observation:
        import verifiers.v1 as vf

        calls = [
            vf.ToolCall(id=f"call-{turn.index}-{i}", name=c.name or "", arguments=c.raw or "{}")
            for i, c in enumerate(turn.calls)
        ]
        self.conversation.append(
            ("assistant", vf.AssistantMessage(content=turn.content, tool_calls=calls or None))
        )
        if not turn.calls:
            reward = await self._score()
            return Observation(done=True, reward=reward)
        obs = await self.toolbox.answer(turn.calls)
        for call, msg in zip(calls, obs.messages, strict=True):
            tool = vf.ToolMessage(tool_call_id=call.id, name=msg["name"], content=msg["content"])
            self.conversation.append(("tool", tool))
        return obs

    async def _score(self) -> float:
        import verifiers.v1 as vf
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask

        nodes = []
        for m in self.prompt:
            cls = vf.SystemMessage if m["role"] == "system" else vf.UserMessage
            nodes.append((cls(content=m["content"]), False))
        nodes += [(m, kind == "assistant") for kind, m in self.conversation]
        trace = vf.Trace(
            task=TraceTask(type=type(self.task).__name__, data=self.task.data),
            agent=AgentInfo(config=vf.AgentConfig()),
            nodes=[
                MessageNode(parent=i - 1 if i else None, message=m, sampled=sampled)
                for i, (m, sampled) in enumerate(nodes)
            ],
        )
        await self.task.score(trace)
        return trace.reward

    async def close(self) -> None:
        for ts in self.toolsets:
            await ts._exit_stack.aclose()


class VerifiersEnvironment:
    def __init__(self, taskset: Any, name: str):
        self.name = name
        self.taskset = taskset
        view = taskset if taskset.bounded else taskset.take(MAX_TASKS)
        self.tasks = list(itertools.islice(iter(view), MAX_TASKS))
        if not self.tasks:
            raise ValueError(f"environment {name!r}: the verifiers taskset has no tasks")
        first = _tools_of(_toolsets(self.tasks[0], taskset))
        self.tools = tuple(schema for schema, _ in first.values())

    def examples(self, eval_size: int) -> tuple[list[Example], list[Example]]:
        made = [
            Example(_messages(t.data), str(getattr(t.data, "answer", "")), {"vf_task": i})
            for i, t in enumerate(self.tasks)
        ]
        cut = min(eval_size, max(1, len(made) // 10)) if len(made) > 1 else 0
        return made[: len(made) - cut] or made, made[len(made) - cut :]

    async def start(self, example: Example, seed: int) -> VerifiersSession:
        index = example.metadata.get("vf_task")
        if not isinstance(index, int) or not 0 <= index < len(self.tasks):
            raise ValueError(
                f"environment {self.name!r} plays its own tasks: use data.task: environment"
            )
        task = self.tasks[index]
        toolsets = _toolsets(task, self.taskset)
        for ts in toolsets:
            await ts.setup()
            await ts.setup_task(task)
        return VerifiersSession(task, toolsets)

    async def close(self) -> None:
        pass
