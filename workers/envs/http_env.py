"""An environment behind HTTP (`env.name: http`, `env.server`), in NeMo Gym's style: the
environment is a server of the team's, the job a client of it.

    GET  {url}/tools           → {"tools": [OpenAI tool schemas]}             (once, at start)
    POST {url}/seed_session    {"seed", "example": {"prompt", "answer", "metadata"}}
                               → {"session_id": str, "prompt": messages | null}
    POST {url}/tools/{name}    {"session_id", "turn", "arguments": {...}}   → {"output": str}
    POST {url}/verify          {"session_id", "turn", "response": str}
                               → {"done": bool (default true), "reward": float | null,
                                  "correct": bool | null, "messages": [...] (when not done)}
    POST {url}/close           {"session_id"}                               (best effort)

A turn with tool calls is answered call by call through /tools/{name} (a malformed call is
answered by the job itself, as an error observation, and never sent); a turn without one
goes to /verify, which ends the episode with its reward or answers with messages (a user
simulator) to go on. `turn` lets a server recognise a retried request. Every request goes
through the shared client (workers/http_json.py) on a session that keeps the run's egress
policy (workers/egress.py), with the headers of the team secret `secret` names
(workers/grants.py): `timeout_s` an attempt, retries on connection errors, timeouts, 429
and 5xx, then a failure naming the URL (never the reply's body), which fails the episode,
not the run. A reply that is not what the contract says fails it too.
"""

from __future__ import annotations

import json
import math
from typing import Any

import aiohttp

from ..data.examples import Example
from ..egress import EgressRefused, egress_session
from ..grants import Grants
from ..http_json import post_json
from ..spec import EnvServerSpec
from .base import ModelTurn, Observation, Toolbox
from .tool_calls import function_schema


class EnvServerError(RuntimeError):
    pass


def _object(url: str, payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except ValueError:
        data = None
    if data is None:
        raise EnvServerError(
            f"environment server {url}: the reply is not JSON ({len(payload)} bytes)"
        )
    if not isinstance(data, dict):
        raise EnvServerError(f"environment server {url}: the reply is not a JSON object")
    return data


def _messages(url: str, value: Any) -> list[dict]:
    if not isinstance(value, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value
    ):
        raise EnvServerError(f"environment server {url}: messages must be [{{role, content}}]")
    return value


class HttpSession:
    def __init__(self, env: HttpEnvironment, session_id: str, prompt: Any):
        self.env, self.session_id, self.prompt = env, session_id, prompt
        self.turn = 0
        # each tool a POST to /tools/{name}; a server failure fails the episode
        self.toolbox = Toolbox(
            {name: (schema, self._tool(name)) for name, schema in env.schemas.items()},
            fatal=(EnvServerError,),
        )

    def _tool(self, name: str):
        async def post(**arguments: Any) -> str:
            body = {"session_id": self.session_id, "turn": self.turn, "arguments": arguments}
            got = await self.env.post(f"tools/{name}", body)
            if not isinstance(got.get("output"), str):
                raise EnvServerError(f'environment server {self.env.url}: no "output" string')
            return got["output"]

        return post

    async def step(self, turn: ModelTurn) -> Observation:
        env = self.env
        self.turn = turn.index
        if turn.calls:  # malformed calls are answered here, never sent
            return await self.toolbox.answer(turn.calls)
        got = await env.post(
            "verify", {"session_id": self.session_id, "turn": turn.index, "response": turn.text}
        )
        done = got.get("done", True)
        reward, correct = got.get("reward"), got.get("correct")
        if not isinstance(done, bool) or (
            reward is not None
            and (isinstance(reward, bool) or not isinstance(reward, int | float)
                 or not math.isfinite(reward))
        ) or not isinstance(correct, bool | None):  # fmt: skip
            raise EnvServerError(
                f"environment server {env.url}: /verify answered done={done!r}, "
                f"reward={reward!r}, correct={correct!r}"
            )
        if done:
            return Observation(done=True, reward=reward, correct=correct)
        return Observation(_messages(env.url, got.get("messages")))

    async def close(self) -> None:
        try:
            await self.env.post("close", {"session_id": self.session_id}, retries=0)
        except Exception:  # noqa: S110 - best effort: the episode has its answers
            pass


class HttpEnvironment:
    name = "http"

    def __init__(self, spec: EnvServerSpec, grants: Grants):
        self.spec = spec
        self.url = spec.url.rstrip("/")
        self.egress = grants.egress
        what = f"environment server {self.url}"
        try:  # checked now: a refused URL or a missing secret fails the run at its start
            self.egress.check_url(spec.url)
        except EgressRefused as exc:
            raise EnvServerError(f"{what}: {exc}") from None
        self.headers = {
            "Content-Type": "application/json",
            **grants.secret_headers(what, spec.secret, EnvServerError),
        }
        self.tools: tuple[dict, ...] = ()
        self.schemas: dict[str, dict] = {}  # tool name → its schema
        self._session: aiohttp.ClientSession | None = None
        self._started = False

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = egress_session(self.egress, headers=self.headers)
        return self._session

    async def post(self, path: str, body: dict, retries: int | None = None) -> dict[str, Any]:
        url = f"{self.url}/{path}"
        payload = await post_json(
            self._client(), url, body, what=f"environment server {url}",
            timeout_s=self.spec.timeout_s,
            max_retries=self.spec.max_retries if retries is None else retries,
            error=EnvServerError,
        )  # fmt: skip
        return _object(url, payload)

    async def load_tools(self) -> None:
        """The server's tools, before the first prompt is rendered (setup calls it)."""
        url = f"{self.url}/tools"
        timeout = aiohttp.ClientTimeout(total=self.spec.timeout_s)
        try:
            async with self._client().get(url, timeout=timeout) as resp:
                payload, status = await resp.read(), resp.status
        except (TimeoutError, aiohttp.ClientError, EgressRefused) as exc:
            raise EnvServerError(f"environment server {url}: {type(exc).__name__}: {exc}") from None
        if status != 200:
            raise EnvServerError(f"environment server {url}: HTTP {status}")
        tools = _object(url, payload).get("tools", [])
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise EnvServerError(f'environment server {url}: "tools" must be a list of schemas')
        self.tools = tuple(tools)
        self.schemas = {function_schema(t).get("name", ""): t for t in tools}

    async def start(self, example: Example, seed: int) -> HttpSession:
        got = await self.post(
            "seed_session",
            {
                "seed": seed,
                "example": {"prompt": example.prompt, "answer": example.answer,
                            "metadata": example.metadata},
            },
        )  # fmt: skip
        sid = got.get("session_id")
        if not isinstance(sid, str) or not sid:
            raise EnvServerError(f'environment server {self.url}: no "session_id" string')
        prompt = got.get("prompt")
        return HttpSession(
            self, sid, example.prompt if prompt is None else _messages(self.url, prompt)
        )

    def examples(self, eval_size: int) -> None:
        return None  # the data task's examples, sent with each session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
