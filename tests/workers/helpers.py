"""Small test doubles and servers shared by the data-plane tests."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class SlowModel:
    """Delegates to an engine's model, sleeping before each forward, so that publishes of a
    whole training run land while requests are in flight (the loop tests' workload; a test
    of one control call holds the decode with `Parked` instead)."""

    def __init__(self, model, delay_s: float):
        self._model, self._delay = model, delay_s

    def __call__(self, *args, **kwargs):
        time.sleep(self._delay)
        return self._model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


class ExampleServer:
    """One of examples/'s reference servers (the reward service, the environment server)
    as a real process on a free port, with its fault flags; GET / answers its counts."""

    def __init__(self, script: Path, *flags: str):
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--port", "0", *flags], stdout=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline()  # "listening on http://127.0.0.1:PORT"
        assert line.startswith("listening on "), line
        self.url = line.split()[-1]

    def counts(self) -> dict:
        with urllib.request.urlopen(self.url, timeout=10) as r:
            return json.loads(r.read())

    def requests(self) -> int:
        return self.counts()["requests"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)


def server_fixture(script: Path):
    """A fixture starting `script`'s servers (`start(*flags)`), each stopped at the end."""

    @pytest.fixture
    def server():
        started: list[ExampleServer] = []

        def start(*flags: str) -> ExampleServer:
            started.append(ExampleServer(script, *flags))
            return started[-1]

        yield start
        for s in started:
            s.stop()

    return server


class Parked:
    """Holds the torch engine's decode thread between two decode steps, from the first turn
    where `when()` holds until `release()`: a test lands a pause, an abort or an adapter
    load there while rows are certainly in flight (an event, never a delay). The step lock
    is free while it is held, so the engine's control calls go through."""

    def __init__(self, engine, when: Callable[[], bool]):
        self.engine, self.when = engine, when
        self._reached, self._go = threading.Event(), threading.Event()
        engine.on_turn = self._on_turn

    def _on_turn(self) -> None:
        if not self._go.is_set() and self.when():
            self._reached.set()
            self._go.wait()

    async def reached(self, timeout_s: float = 120) -> None:
        """Until the decode thread is held (a bound for a hang, not a delay)."""
        if not await asyncio.to_thread(self._reached.wait, timeout_s):
            raise TimeoutError(f"the decode never reached the point to hold in {timeout_s} s")

    def release(self) -> None:
        self.engine.on_turn = None
        self._go.set()


class HeldStandIn:
    """Holds the TensorRT-LLM stand-in's requests before their next token, from the first
    token where `when()` holds until `release()`, as `Parked` holds the torch engine. They
    are tasks of the test's own event loop; a held request that is aborted goes on at once
    to end cancelled (the pause waits for that), the others stay held. A request submitted
    while they are held (an adapter load's probe) is not held."""

    def __init__(self, llm, when: Callable[[], bool]):
        self.llm, self.when = llm, when
        self._reached, self._go = asyncio.Event(), asyncio.Event()
        self._before: set[asyncio.Event] = set()  # the requests decoding before the hold
        llm.on_token = self._on_token

    async def _on_token(self, cancel: asyncio.Event) -> None:
        if self._go.is_set():
            return
        if not self._reached.is_set():
            self._before.add(cancel)
            if not self.when():
                return
            self._reached.set()
        if cancel not in self._before:
            return
        waits = [asyncio.ensure_future(e.wait()) for e in (self._go, cancel)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def reached(self, timeout_s: float = 120) -> None:
        """Until a request is held (a bound for a hang, not a delay)."""
        async with asyncio.timeout(timeout_s):
            await self._reached.wait()

    def release(self) -> None:
        self.llm.on_token = None
        self._go.set()


# the other two adapters of a pool of three: other ranks, targets, algorithms, learning
# rates, loss aggregation, temperature, lengths and micro-batching than the tests' specs
POOL_OTHERS = (
    ("seed=9", "train.lr=0.003", "algorithm.advantage=rloo", "algorithm.bypass_mode=false",
     "algorithm.kl_coef=0.05", "algorithm.loss_agg=seq_mean_token_mean",
     "rollout.temperature=0.7", "lora.r=4", "lora.alpha=4",
     "lora.target_modules=[q_proj, v_proj]"),
    ("seed=2", "train.lr=0.02", "train.micro_batch_size=5", "algorithm.advantage=dr_grpo",
     "algorithm.loss_agg=seq_mean_token_sum_norm", "rollout.max_new_tokens=6", "lora.r=2",
     "lora.alpha=8", "lora.dropout=0.05"),
)  # fmt: skip


class PooledTrainer:
    """A spec's adapter on a policy, stepped as `kind` says: `solo` (a run alone: the
    policy's own adapter), `pool1` (the one adapter added to a pool's policy, stepped by
    `train_steps`) or `pool3` (between two others, `POOL_OTHERS`, every step one forward
    and backward for the three, the others on their own batches)."""

    def __init__(self, kind: str, spec, make_spec):
        from workers.policy import LoraPolicy
        from workers.spec import parse_spec

        self.kind = kind
        if kind == "solo":
            self.policy = LoraPolicy(spec, spec.model.path)
            self.adapter, self.others = self.policy.adapter, []
            return
        # a pool's policy: its own adapter a placeholder (workers/pool/driver.py)
        host = spec.model_copy(update={"lora": spec.lora.model_copy(update={"r": 1})})
        self.policy = LoraPolicy(host, spec.model.path)
        others = [parse_spec(make_spec(*o)) for o in POOL_OTHERS] if kind == "pool3" else []
        self.others = [self.policy.add_adapter(o) for o in others[:1]]
        self.adapter = self.policy.add_adapter(spec)
        self.others += [self.policy.add_adapter(o) for o in others[1:]]

    def step(self, batch) -> dict[str, float]:
        if self.kind == "solo":
            return self.policy.train_step(self.adapter, batch)
        # the others on batches of their own shapes: the first half of this one, and all
        half = batch.slice(0, max(1, len(batch) // 2))
        steps = [(self.adapter, batch)]
        if self.others:
            steps = [(self.others[0], half), (self.adapter, batch), (self.others[1], batch)]
        before = self.policy.together[len(steps)]
        out = self.policy.train_steps(steps)
        assert self.policy.together[len(steps)] == before + 1  # together, not one by one
        errors = [o for o in out if isinstance(o, Exception)]
        if errors:
            raise errors[0]
        return out[1 if self.others else 0]
