"""The math_verify term: the job's side of `math_verify_worker.py`, a child process that
parses and compares with math-verify under its own (signal-based) timeouts. A sample whose
child gets stuck past the guard is scored 0 and the child is replaced."""

from __future__ import annotations

import asyncio
import collections
import json
import sys
from pathlib import Path

from ..spec import MathVerifyTerm
from .base import RewardError, Role, ScoreItem, TermScore

WORKER = Path(__file__).with_name("math_verify_worker.py")
_START_S = 60.0  # importing sympy on a loaded 2-core machine can take a while


class MathVerifyScorer:
    role: Role = "verifier"

    def __init__(self, term: MathVerifyTerm):
        self.timeout = term.timeout_s
        # parse gold, parse the completion, compare: each under timeout_s in the child
        self.guard_s = 3 * term.timeout_s + 10.0
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._drain: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self.restarts = 0

    async def _start(self) -> asyncio.subprocess.Process:
        # -P: the worker's folder is not put on sys.path (its names would shadow others)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-P", str(WORKER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 20,
        )  # fmt: skip
        self._drain = asyncio.create_task(self._keep_stderr(proc))
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), _START_S)
        except TimeoutError:
            line = b""
        if not line.startswith(b'{"ready"'):
            await self._kill(proc)
            tail = "".join(self._stderr).strip()[-1500:]
            raise RewardError(f"math_verify: the verifier process did not start: {tail}")
        return proc

    async def _keep_stderr(self, proc: asyncio.subprocess.Process) -> None:
        # keeps the pipe from filling up (math-verify logs its timeouts there)
        async for line in proc.stderr:
            self._stderr.append(line.decode(errors="replace"))

    async def _kill(self, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        if self._drain is not None:
            await self._drain
            self._drain = None

    async def _one(self, item: ScoreItem) -> TermScore:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await self._start()
        proc = self._proc
        req = {"gold": item.answer, "pred": item.completion, "timeout": self.timeout}
        proc.stdin.write((json.dumps(req) + "\n").encode())
        try:
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), self.guard_s)
        except (TimeoutError, ConnectionError):
            line = b""
        if not line:  # stuck past every timeout of its own, or died: replace it
            died = proc.returncode is not None
            await self._kill(proc)
            self._proc = None
            self.restarts += 1
            why = "verifier process died" if died else f"no answer in {self.guard_s:.0f} s"
            return TermScore(0.0, False, {"error": why})
        try:
            reply = json.loads(line)
        except ValueError:  # not our protocol: start afresh rather than misread the rest
            await self._kill(proc)
            self._proc = None
            return TermScore(0.0, False, {"error": f"unreadable reply {line[:80]!r}"})
        details = {k: reply[k] for k in ("gold", "pred", "error") if k in reply}
        ok = bool(reply.get("score"))
        return TermScore(float(ok), ok, details)

    async def score(self, items: list[ScoreItem]) -> list[TermScore]:
        async with self._lock:  # one child, one request at a time
            return [await self._one(item) for item in items]

    async def close(self) -> None:
        if self._proc is not None:
            proc, self._proc = self._proc, None
            if proc.returncode is None:
                proc.stdin.close()
                try:
                    await asyncio.wait_for(proc.wait(), 5)
                except TimeoutError:
                    pass
            await self._kill(proc)
