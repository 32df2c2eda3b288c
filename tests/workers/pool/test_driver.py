"""The pool driver (workers/pool/driver.py) on the CPU with the torch pool engine: K runs of
the tiny task in one process over one base model, each driven by the single-run loop.

- a pool of one run gives bit for bit the adapter, and the same metrics, as that run alone;
- pause one run, abort another: the others step on, the paused one resumes to its end;
  both with the pool engine in this process and in a child process (`engine_process`);
- a NaN in one run's adapter fails that run alone, with its error in its own events;
- a run joins while the pool runs, another leaves (checkpointed, slot freed, no final
  status) and joins again from its checkpoint under its own id;
- async members of different lengths evaluating as they go each reach their end.
Learning in a pool (reward rising for every member) is tests/workers/pool/test_driver_learn.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
import torch

from workers.events import StatusEvent
from workers.loop.control import StaticControl
from workers.pool.driver import PoolDriver
from workers.rollout.engine_process import EngineProcessError
from workers.rollout.pool_engine import PoolAdmissionError
from workers.spec import parse_spec
from workers.train import train


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def adapter(out: Path, step: int) -> dict[str, torch.Tensor]:
    from workers.adapters.lora import read_adapter_dir

    return read_adapter_dir(out / "checkpoints" / f"step-{step}" / "adapter")[0]


def statuses(member) -> list[str]:
    return [e.state for e in member.events if isinstance(e, StatusEvent)]


def run_pool(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("engine_process", [False, True], ids=["engine_here", "engine_process"])
def test_a_pool_of_one_is_the_run_alone(make_spec, tmp_path, engine_process):
    spec = make_spec("train.steps=3", "model.dtype=float32")
    train(spec, tmp_path / "solo", progress=False)

    async def pooled():
        pool = PoolDriver(keep_events=True, engine_process=engine_process)
        member = pool.admit("a", spec, tmp_path / "pool")
        await pool.wait()
        await pool.close()
        return member

    member = run_pool(pooled())
    assert member.outcome.state == "succeeded" and member.outcome.step == 3
    assert statuses(member) == ["running", "succeeded"]
    solo, pool = adapter(tmp_path / "solo", 3), adapter(tmp_path / "pool", 3)
    assert solo.keys() == pool.keys()
    assert all(torch.equal(solo[k], pool[k]) for k in solo)  # bit for bit
    same = ("reward/mean", "loss/total", "grad_norm", "tokens/total", "eval/accuracy")
    for a, b in zip(rows(tmp_path / "solo"), rows(tmp_path / "pool"), strict=True):
        assert {k: a.get(k) for k in same} == {k: b.get(k) for k in same}
        assert ("pool/share" in b) == ("loss/total" in b)  # every train step reports it
    assert [r["pool/share"] for r in rows(tmp_path / "pool")[1:]] == [1.0, 1.0, 1.0]
    assert all(r["memory/cpu_gb"] > 0 for r in rows(tmp_path / "pool")[1:])  # the pool page's


@pytest.mark.parametrize("engine_process", [False, True], ids=["engine_here", "engine_process"])
def test_pause_one_abort_another_the_others_go_on(make_spec, tmp_path, engine_process):
    specs = {r: make_spec("train.steps=5", f"seed={s}") for s, r in enumerate("abc", 1)}
    controls = {r: StaticControl() for r in specs}
    steps_while_paused: list[int] = []
    b_steps: list[int] = []

    async def pooled():
        pool = PoolDriver(capacity=3, keep_events=True, engine_process=engine_process)

        def hook(run):
            def on_metrics(step, values):
                if run == "a" and step == 2:
                    controls["a"].set("paused")
                if run == "c" and step == 1:
                    controls["c"].set("aborted")
                if run == "b":
                    b_steps.append(step)
                    if controls["a"].state == "paused":
                        steps_while_paused.append(step)
                        if len(steps_while_paused) == 2:
                            controls["a"].set("running")

            return on_metrics

        members = {
            r: pool.admit(r, specs[r], tmp_path / r, controls[r], on_metrics=hook(r)) for r in specs
        }
        await pool.wait()
        served = pool.engine.served_versions()
        await pool.close()
        return members, served

    members, served = run_pool(pooled())
    assert statuses(members["a"]) == ["running", "paused", "running", "succeeded"]
    assert members["a"].outcome.step == 5
    assert statuses(members["c"]) == ["running", "aborted"]
    assert members["c"].outcome.state == "aborted" and members["c"].outcome.step < 5
    assert statuses(members["b"]) == ["running", "succeeded"]
    assert len(steps_while_paused) >= 2  # b trained while a was paused
    assert served == {}  # every run left its slot
    # a's metric stream is its own: steps 1..5 once each, and its pause a checkpoint
    assert [r["step"] for r in rows(tmp_path / "a") if "loss/total" in r] == [1, 2, 3, 4, 5]
    assert (tmp_path / "a" / "checkpoints" / "step-2").is_dir()


def test_a_nan_fails_its_run_alone(make_spec, tmp_path):
    specs = {r: make_spec("train.steps=4", f"seed={s}") for s, r in enumerate("xy", 1)}

    async def pooled():
        pool = PoolDriver(keep_events=True)

        def poison(step, values):
            if step == 1:  # fault injection: run x's adapter diverges
                with torch.no_grad():
                    pool.adapters["x"].params[0].fill_(float("nan"))

        members = {
            "x": pool.admit("x", specs["x"], tmp_path / "x", on_metrics=poison),
            "y": pool.admit("y", specs["y"], tmp_path / "y"),
        }
        await pool.wait()
        left = set(pool.adapters), set(pool.trainer.adapters)
        await pool.close()
        return members, left

    members, left = run_pool(pooled())
    x, y = members["x"], members["y"]
    assert statuses(x) == ["running", "failed"]
    failed = [e for e in x.events if isinstance(e, StatusEvent) and e.state == "failed"][0]
    assert failed.detail.startswith("FloatingPointError: pooled run x: loss/total=nan")
    assert isinstance(x.error, FloatingPointError)
    assert statuses(y) == ["running", "succeeded"] and y.outcome.step == 4
    assert all(torch.isfinite(t).all() for t in adapter(tmp_path / "y", 4).values())
    assert left == (set(), {"default"})  # only the placeholder is left on the trainer


def test_join_and_leave_while_the_pool_runs(make_spec, tmp_path):
    first = make_spec("train.steps=6", "seed=1")
    late = make_spec("train.steps=3", "seed=2", "lora.r=4", "rollout.temperature=0.7")

    async def pooled():
        pool = PoolDriver(keep_events=True)
        joined: dict = {}

        def on_metrics(step, values):
            if step == 1 and "b" not in joined:  # b joins while a trains
                joined["b"] = pool.admit("b", late, tmp_path / "b")
            if step == 3:
                pool.members["a"].leaving = True  # what pool.leave("a") asks

        a = pool.admit("a", first, tmp_path / "a", on_metrics=on_metrics)
        with pytest.raises(PoolAdmissionError, match="model.dtype is 'bfloat16'"):
            pool.admit("z", {**first, "model": {**first["model"], "dtype": "bfloat16"}}, tmp_path)
        await a.task
        slots_after_leave = set(pool.engine.served_versions())
        ckpt = a.outcome.checkpoint
        # a joins again from its checkpoint under its own id (its next dispatch)
        again = pool.admit("a", first, tmp_path / "a2", resume_from=str(ckpt))
        await pool.wait()
        await pool.close()
        return a, joined["b"], again, slots_after_leave, ckpt

    a, b, again, slots, ckpt = run_pool(pooled())
    assert a.outcome.state == "left" and a.outcome.step == 3 and ckpt.name == "step-3"
    assert statuses(a) == ["running"]  # no final status: the platform decides the state
    assert "a" not in slots
    assert statuses(b) == ["running", "succeeded"] and b.outcome.step == 3
    assert statuses(again) == ["running", "succeeded"]
    assert again.outcome.step == 6
    assert [r["step"] for r in rows(tmp_path / "a2") if "loss/total" in r] == [4, 5, 6]
    assert parse_spec(first).lora.r == 8  # b's rank 4 beside a's rank 8 in one pool


def test_members_that_evaluate_and_end_apart_each_reach_their_end(make_spec, tmp_path):
    """Async members of different lengths evaluating every other step: an evaluation asks
    for a generation turn while the member's producer holds or waits for one, and members
    end while others go on. Each reaches its own last step with its evaluations (a member's
    second ask used to wait forever, freezing the pool at its evaluations)."""
    ends = {"a": 2, "b": 4, "c": 8}
    specs = {
        r: make_spec(f"train.steps={n}", "train.eval_every=2", "async.enabled=true",
                     "async.max_staleness=1", "algorithm.num_generations=8",
                     "train.prompts_per_step=16", "train.micro_batch_size=128",
                     "data.eval_size=180", f"seed={i}")
        for i, (r, n) in enumerate(ends.items(), 1)
    }  # fmt: skip

    async def pooled():
        pool = PoolDriver(capacity=3, keep_events=True)
        members = {r: pool.admit(r, spec, tmp_path / r) for r, spec in specs.items()}
        await asyncio.wait_for(pool.wait(), 300)  # a frozen member fails here
        await pool.close()
        return members

    members = run_pool(pooled())
    for r, n in ends.items():
        assert statuses(members[r]) == ["running", "succeeded"] and members[r].outcome.step == n
        evals = [row["step"] for row in rows(tmp_path / r) if "eval/accuracy" in row]
        assert evals == list(range(0, n + 1, 2))


def test_a_dead_engine_process_fails_each_member_with_its_cause(make_spec, tmp_path):
    specs = {r: make_spec("train.steps=50", f"seed={s}") for s, r in enumerate("xy", 1)}

    async def pooled():
        pool = PoolDriver(keep_events=True, engine_process=True)

        def kill(step, values):
            if step == 1 and pool.engine.pid is not None:
                os.kill(pool.engine.pid, signal.SIGKILL)

        members = {
            "x": pool.admit("x", specs["x"], tmp_path / "x", on_metrics=kill),
            "y": pool.admit("y", specs["y"], tmp_path / "y"),
        }
        await asyncio.wait_for(pool.wait(), 120)
        await pool.close()  # closing a dead engine is not an error
        return members

    members = run_pool(pooled())
    for m in members.values():
        assert statuses(m)[-1] == "failed" and m.outcome is None
        assert isinstance(m.error, EngineProcessError), m.error
        assert "pool engine process (torch) is gone (exit code -9)" in str(m.error)
