"""`resources.engine_process`: the rollout engine in a child process of an in-process run.
(The backend protocol itself is checked by the conformance suite's "process" engine.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
import torch

from workers.adapters.lora import read_adapter_dir
from workers.adapters.update import AdapterUpdate
from workers.policy import LoraPolicy
from workers.rollout import GroupRequest, SamplingParams
from workers.rollout.engine_process import EngineProcess, EngineProcessError
from workers.spec import parse_spec
from workers.train import train


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_an_engine_process_trains_exactly_like_the_in_process_engine(make_spec, tmp_path):
    # Same seeds, same backend code, CPU fp32: the samples and hence the adapter are the same
    # bits whichever process decodes them.
    train(make_spec("train.steps=2"), tmp_path / "here", progress=False)
    outcome = train(make_spec("train.steps=2", "resources.engine_process=true"),
                    tmp_path / "child", progress=False)  # fmt: skip
    assert outcome.state == "succeeded" and outcome.adapter_version == 2
    here, child = rows(tmp_path / "here"), rows(tmp_path / "child")
    assert [r.get("reward/mean") for r in here] == [r.get("reward/mean") for r in child]
    a, _ = read_adapter_dir(tmp_path / "here" / "checkpoints" / "step-2" / "adapter")
    b, _ = read_adapter_dir(tmp_path / "child" / "checkpoints" / "step-2" / "adapter")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=k)


def test_a_dead_engine_process_fails_the_calls_that_wait_on_it(make_spec):
    spec = parse_spec(make_spec())
    backend = EngineProcess(spec, spec.model.path)
    assert backend.pid != os.getpid()
    adapter = LoraPolicy(spec, spec.model.path).adapter_tensors()

    async def scenario() -> None:
        assert await backend.load_adapter(AdapterUpdate(0, tensors=adapter)) == 0
        await backend.pause("wait")  # a request now waits at the engine's gate
        request = GroupRequest("r", [5, 6, 7], 2, 0, SamplingParams(max_new_tokens=4))
        pending = asyncio.ensure_future(backend.generate([request]))
        while not backend._channel._pending:  # until the call is on its way to the child
            await asyncio.sleep(0)
        assert not pending.done()
        os.kill(backend.pid, signal.SIGKILL)
        with pytest.raises(EngineProcessError, match=r"is gone \(exit code -9\)"):
            await asyncio.wait_for(pending, 30)
        with pytest.raises(EngineProcessError, match="is gone"):
            await backend.resume()
        await backend.close()  # closing a dead engine is not an error

    asyncio.run(scenario())
