"""The drivers: async ≡ sync at staleness 0, resume reproduces, staleness bound and the
version handshake, pause / resume / abort, learning."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import shutil
import sys
import threading
from pathlib import Path

import pytest
import torch

from workers.adapters.lora import adapter_tensors, read_adapter_dir
from workers.events import Event
from workers.loop import StaticControl
from workers.loop.executor import LocalExecutor
from workers.loop.setup import run_training
from workers.policy import LoraPolicy
from workers.pool.driver import PoolDriver
from workers.rollout import make_backend
from workers.spec import apply_overrides, parse_spec
from workers.train import train

from .helpers import POOL_OTHERS, SlowModel

DESIGN_METRICS = [
    "reward/mean", "reward/std", "accuracy", "loss/policy", "entropy", "clip_frac",
    "token_mult_prob_error", "is_weight/mean", "staleness/mean", "staleness/max",
    "throughput/tokens_per_s", "tokens/total", "time/step_s", "time/generate_s",
    "time/train_s", "time/weight_sync_s", "response_length/mean", "adapter_version",
]  # fmt: skip


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def final_adapter(out: Path) -> dict[str, torch.Tensor]:
    last = max((out / "checkpoints").glob("step-*"), key=lambda p: int(p.name[5:]))
    return read_adapter_dir(last / "adapter")[0]


def assert_same_adapter(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_sync_run_writes_outputs_and_metrics(make_spec, tmp_path):
    events: list[Event] = []
    out = tmp_path / "run"
    before = sys.getswitchinterval()
    outcome = train(make_spec("train.steps=2"), out, progress=False, on_event=events.append)
    assert outcome.state == "succeeded" and outcome.adapter_version == 2
    assert sys.getswitchinterval() == before  # the run's short interval is given back
    assert (out / "spec.yaml").is_file() and (out / "checkpoints" / "step-2" / "adapter").is_dir()
    metrics = rows(out)
    assert [m["step"] for m in metrics] == [0, 1, 2]  # step 0: eval of the base
    for name in [*DESIGN_METRICS, "eval/accuracy"]:
        assert name in metrics[-1], name
    assert metrics[-1]["token_mult_prob_error"] == pytest.approx(1.0, abs=1e-4)
    kinds = {e.type for e in events}
    assert kinds == {"status", "metric", "samples", "checkpoint", "log"}
    assert [e.state for e in events if e.type == "status"] == ["running", "succeeded"]
    # each checkpoint event carries the bytes the job wrote (what its list shows)
    for event in (e for e in events if e.type == "checkpoint"):
        files = [p for p in Path(event.uri.removeprefix("file://")).rglob("*") if p.is_file()]
        assert event.size == sum(p.stat().st_size for p in files) > 0


def test_async_with_zero_staleness_equals_sync(make_spec, tmp_path):
    sync = tmp_path / "sync"
    train(make_spec("train.steps=3"), sync, progress=False)
    asyn = tmp_path / "async"
    train(make_spec("train.steps=3", "async.enabled=true", "async.max_staleness=0"), asyn,
          progress=False)  # fmt: skip
    assert_same_adapter(final_adapter(sync), final_adapter(asyn))
    assert [m.get("reward/mean") for m in rows(sync)] == [m.get("reward/mean") for m in rows(asyn)]


def run_where(where: str, make_spec, spec: dict, out: Path):
    """`spec`'s run alone (`train`), in a pool of one, or in a pool of three beside two runs
    of other ranks, algorithms and learning rates (helpers.POOL_OTHERS, as many steps), whose
    trainer turns step the runs waiting together (one forward and backward)."""
    if where == "solo":
        return train(spec, out, progress=False)
    specs = {"run": spec}
    if where == "pool3":
        steps = f"train.steps={spec['train']['steps']}"
        specs |= {f"other{i}": make_spec(*o, steps) for i, o in enumerate(POOL_OTHERS)}

    async def pooled():
        pool = PoolDriver(capacity=len(specs))
        members = {r: pool.admit(r, s, out.parent / f"{out.name}-{r}") for r, s in specs.items()}
        await pool.wait()
        await pool.close()
        return members

    members = asyncio.run(pooled())
    assert all(m.outcome is not None for m in members.values()), {
        r: m.error for r, m in members.items()
    }
    shutil.move(out.parent / f"{out.name}-run", out)
    return members["run"].outcome


@pytest.mark.parametrize("where", ["solo", "pool1", "pool3"])
@pytest.mark.parametrize(
    "mode", [["async.enabled=false"], ["async.enabled=true", "async.max_staleness=1",
                                       "async.weight_update=wait"]],
    ids=["sync", "async-staleness-1"],
)  # fmt: skip
def test_resume_reproduces_the_uninterrupted_run(make_spec, tmp_path, mode, where):
    """A run resumed from its step-2 checkpoint reproduces its uninterrupted run; alone, in
    a pool of one (both bit for bit the run alone's) and in a pool of three, where its steps
    may share forwards and backwards with the others' (its metrics the run alone's to fp32
    rounding, its adapter to Adam's amplification of that rounding)."""
    solo = tmp_path / "solo"
    train(make_spec("train.steps=4", "checkpoint.every=2", *mode), solo, progress=False)
    full = tmp_path / "full"
    run_where(where, make_spec, make_spec("train.steps=4", "checkpoint.every=2", *mode), full)
    resumed = tmp_path / "resumed"
    ckpt = full / "checkpoints" / "step-2"
    spec = make_spec("train.steps=4", f"checkpoint.resume_from={ckpt}", *mode)
    outcome = run_where(where, make_spec, spec, resumed)
    assert outcome.step == 4
    keys = ["reward/mean", "adapter_version", "staleness/max", "loss/policy", "entropy"]
    exact = where != "pool3"
    for run in (full, resumed):
        want = [{k: m.get(k) for k in keys} for m in rows(solo) if m["step"] > 2]
        got = [{k: m.get(k) for k in keys} for m in rows(run) if m["step"] > 2]
        assert len(got) == len(want) == 2
        for g, w in zip(got, want, strict=True):
            assert g == (w if exact else pytest.approx(w, rel=1e-4, abs=1e-6))
        a, b = final_adapter(solo), final_adapter(run)
        if exact:
            assert_same_adapter(a, b)
        else:  # Adam's steps turn rounding in near-zero gradients into ±lr: by the norm
            diff = torch.cat([(b[k] - a[k]).flatten() for k in a]).norm()
            assert diff <= 1e-2 * torch.cat([a[k].flatten() for k in a]).norm()


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(tensors):
        h.update(k.encode())
        h.update(tensors[k].numpy().tobytes())
    return h.hexdigest()


class RecordingExecutor(LocalExecutor):
    """Records, per train step, the trainer's version and every token's version, and the
    digest of each adapter version it publishes."""

    def __init__(self, policy):
        super().__init__(policy)
        self.trained: list[tuple[int, list[list[int]]]] = []
        self.published: dict[int, str] = {}

    async def train_step(self, samples):
        self.trained.append((self.adapter_version, [list(s.versions) for s in samples]))
        return await super().train_step(samples)

    async def adapter_update(self, with_probe=True):
        update = await super().adapter_update(with_probe)
        self.published[update.version] = _digest(update.tensors)
        return update


@pytest.mark.parametrize("weight_update", ["abort", "keep"])
def test_staleness_bound_and_served_versions(make_spec, tmp_path, weight_update):
    spec = parse_spec(make_spec("train.steps=4", "async.enabled=true", "async.max_staleness=1",
                                f"async.weight_update={weight_update}",
                                # hot sampling: answers run to max_new_tokens instead of
                                # stopping after 2 tokens, so publishes land mid-sample
                                "rollout.temperature=3.0", "rollout.max_new_tokens=8"))  # fmt: skip
    tiny = spec.model.path
    executor = RecordingExecutor(LoraPolicy(spec, tiny))
    backend = make_backend(spec, tiny)
    served: dict[int, str] = {}
    load = backend._load

    def spy(update):  # the digest of what the engine's model holds after each load
        err = load(update)
        served[update.version] = _digest(adapter_tensors(backend.model))
        return err

    backend._load = spy
    # Slow decoding down so that publishes land while requests are in flight.
    backend.source.model = SlowModel(backend.source.model, delay_s=0.1)

    outcome = asyncio.run(run_training(spec, tmp_path, progress=False, executor=executor,
                                       backend=backend))  # fmt: skip
    assert outcome.state == "succeeded"
    assert len(executor.trained) == 4
    mixed = 0
    for trainer_version, per_sample in executor.trained:
        versions = [v for vs in per_sample for v in vs]
        assert versions and all(0 <= trainer_version - v <= 1 for v in versions)
        # Every label is a version the engine acknowledged, holding the trainer's bits.
        for v in set(versions):
            assert served[v] == executor.published[v]
        mixed += sum(len(set(vs)) > 1 for vs in per_sample)
    assert backend.served_log == sorted(backend.served_log)
    # Samples continued across a weight update keep each token's own version.
    assert mixed > 0


def test_async_reports_token_mult_prob_error_on_stale_tokens(make_spec, tmp_path):
    # weight_update "wait": step 1 trains on groups of version 0 under version 0, every later
    # step on groups exactly one version old, so from step 2 on no token is of the trainer's
    # current version and the metric can only come from the stale-version forward.
    spec = make_spec("train.steps=4", "async.enabled=true", "async.max_staleness=1",
                     "async.weight_update=wait")  # fmt: skip

    def run(name: str, *overrides: str, perturb: float = 0.0) -> list[dict]:
        parsed = parse_spec(apply_overrides(spec, list(overrides)))
        backend = make_backend(parsed, parsed.model.path)
        load = backend._load

        def perturbed(update):  # the engine serves a slightly different adapter
            gen = torch.Generator().manual_seed(update.version)
            tensors = {
                k: v + perturb * torch.randn(v.shape, generator=gen) if "lora_B" in k else v
                for k, v in update.tensors.items()
            }
            return load(dataclasses.replace(update, tensors=tensors))

        backend._load = perturbed
        asyncio.run(run_training(parsed, tmp_path / name, progress=False, backend=backend))
        return [r for r in rows(tmp_path / name) if r["step"] > 0]

    agree = run("agree")
    assert [r["staleness/max"] for r in agree] == [0.0, 1.0, 1.0, 1.0]
    for r in agree:  # engine and trainer agree to float32 rounding, stale tokens included
        assert r["token_mult_prob_error"] == pytest.approx(1.0, abs=1e-4), r["step"]
        assert abs(r["gen_kl_error"]) < 1e-6
    disagree = run("disagree", perturb=0.3)
    assert all(r["token_mult_prob_error"] > 1.01 for r in disagree), disagree
    # Switched off, only tokens of the current version count: the stale steps report nothing.
    off = run("off", "train.mult_prob_error_samples=0")
    assert ["token_mult_prob_error" in r for r in off] == [True, False, False, False]


def test_a_sync_that_never_reaches_the_engine_fails(make_spec, tmp_path):
    spec = parse_spec(make_spec("train.steps=2"))
    backend = make_backend(spec, spec.model.path)
    real = backend._load  # later versions never copied: the engine stays at 0
    backend._load = lambda update: real(update) if update.version == 0 else None
    with pytest.raises(RuntimeError, match="did not reach the engine"):
        asyncio.run(run_training(spec, tmp_path, progress=False, backend=backend))


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_pause_release_then_resume_and_abort(make_spec, tmp_path, is_async):
    mode = ["async.enabled=true", "async.max_staleness=1"] if is_async else []
    control = StaticControl()
    statuses: list[str] = []

    def on_metrics(step, values):
        if step == 2:
            control.set("paused")

    def on_event(e):
        if e.type == "status":
            statuses.append(e.state)

    out = tmp_path / "run"
    spec = make_spec("train.steps=4", "resources.release_on_pause=true", *mode)
    outcome = train(spec, out, progress=False, control=control, on_metrics=on_metrics,
                    on_event=on_event)  # fmt: skip
    assert outcome.state == "paused" and outcome.step == 2
    assert statuses == ["running", "paused"]
    assert outcome.checkpoint == out / "checkpoints" / "step-2"
    outcome = train(make_spec("train.steps=4", "checkpoint.resume_from=latest", *mode), out,
                    progress=False)  # fmt: skip
    assert outcome.state == "succeeded" and outcome.step == 4

    aborted = train(spec, tmp_path / "ab", progress=False, control=StaticControl("aborted"))
    assert aborted.state == "aborted" and aborted.step == 0


def test_pause_in_place_then_resume(make_spec, tmp_path):
    control = StaticControl()

    def on_metrics(step, values):
        if step == 1:
            control.set("paused")
            threading.Timer(0.3, control.set, args=("running",)).start()

    statuses: list[str] = []

    def on_event(e):
        if e.type == "status":
            statuses.append(e.state)

    outcome = train(make_spec("train.steps=3", "async.enabled=true"), tmp_path, progress=False,
                    control=control, on_metrics=on_metrics, on_event=on_event)  # fmt: skip
    assert outcome.state == "succeeded" and outcome.step == 3
    assert statuses == ["running", "paused", "running", "succeeded"]


@pytest.mark.slow
def test_async_training_raises_accuracy(make_spec, tmp_path):
    """The small, fast version of the acceptance run (examples/tiny-async.yaml)."""
    spec = make_spec("train.steps=30", "train.prompts_per_step=16", "algorithm.num_generations=8",
                     "train.eval_every=30", "train.micro_batch_size=128", "async.enabled=true",
                     "async.max_staleness=1", "data.eval_size=180")  # fmt: skip
    train(spec, tmp_path, progress=False)
    metrics = rows(tmp_path)
    base, final = metrics[0]["eval/accuracy"], metrics[-1]["eval/accuracy"]
    assert final - base >= 0.3, (base, final)
    first = [m["reward/mean"] for m in metrics[1:6]]
    last = [m["reward/mean"] for m in metrics[-5:]]
    assert sum(last) / 5 > sum(first) / 5 + 0.1
