"""The GRPO driver: one loop for sync and async training.

Sync: each step generates its groups inline, trains, and publishes the adapter.
Async: a producer task generates up to `async.max_staleness` steps ahead while the trainer
trains; after each optimizer step the adapter is published as `async.weight_update` says.

Determinism: prompts and sampling seeds are functions of (seed, step, group), and the
producer may start step s only once s − max_staleness steps are published. With
max_staleness 0 nothing is in flight at a publish, so async reproduces sync exactly; with
weight_update "wait" the trainer publishes only after step + max_staleness is fully
generated, so every step's groups come from a fixed adapter version and a resumed run
repeats an uninterrupted one. (abort/keep trade that for fresher samples: when a publish
lands mid-generation depends on timing.)
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..envs.metrics import episode_metrics, episode_turns
from ..rollout.base import RolloutBackend
from ..spec import RunSpec
from .adapter_rank import adapter_effective_rank
from .batching import groups_to_samples
from .buffer import TrajectoryBuffer
from .checkpoint import checkpoint_bytes, save_checkpoint
from .control import ControlSource
from .evaluate import evaluate
from .events import Emitter
from .lengths import length_metrics
from .producer import Producer, StepWatch
from .rollout_context import RolloutContext
from .scoring import accuracy, term_metrics
from .types import RunState, ScoredGroup, TrainerExecutor


@dataclass
class Outcome:
    state: str  # succeeded | paused | aborted | left (a pooled run evicted: no final status)
    step: int
    adapter_version: int
    checkpoint: Path | None = None


class Driver:
    def __init__(
        self,
        spec: RunSpec,
        executor: TrainerExecutor,
        rollout: RolloutContext,
        buffer: TrajectoryBuffer,
        state: RunState,
        emitter: Emitter,
        control: ControlSource,
        checkpoint_dir: Path,
        resumed: bool = False,
        leave: Callable[[], bool] | None = None,
    ):
        self.spec, self.executor, self.rollout = spec, executor, rollout
        self.backend: RolloutBackend = rollout.backend
        self.buffer, self.state, self.emitter, self.control = buffer, state, emitter, control
        self.checkpoint_dir = checkpoint_dir
        self.resumed = resumed
        # a pooled run told to leave its pool (workers/pool/): checkpoint and stop without a
        # final status, the control plane having decided the run's state
        self.leave = leave or (lambda: False)
        self.is_async = spec.async_.enabled
        self.max_staleness = spec.async_.max_staleness if self.is_async else 0
        self.watch = StepWatch(state.step)
        self.producer = Producer(rollout, buffer, self.watch, control, lookahead=self.max_staleness)
        self.last_checkpoint: Path | None = None
        # the last published adapter's effective rank, reported with the step that made it
        self.adapter_metrics: dict[str, float] = {}

    # ---------------------------------------------------------------- the loop

    async def run(self) -> Outcome:
        steps = self.spec.train.steps
        await self._publish()  # the engine serves nothing until it acknowledges a version
        self.emitter.status("running", "resumed" if self.resumed else "started")
        mode = f"async (max_staleness {self.max_staleness})" if self.is_async else "sync"
        self.emitter.log(
            f"{mode} GRPO, rollout backend {self.backend.name}, step {self.state.step} of "
            f"{self.spec.train.steps}, adapter version {self.state.adapter_version}",
            "debug",
        )
        if not self.resumed:
            self.emitter.metric(0, {"eval/accuracy": await evaluate(self.rollout)}, advance=False)
        if self.is_async:
            self.producer.start(self.state.step, steps)
        while self.state.step < steps:
            if self.leave():
                return await self._leave()
            desired = self.control.desired_state()
            if desired == "aborted":
                return await self._abort()
            if desired == "paused":
                outcome = await self._pause()
                if outcome is not None:
                    return outcome
            await self._step()
        if self.producer.task is not None:
            await self.producer.task  # finished its range; surfaces any failure
        ckpt = await self._checkpoint()
        self.emitter.status("succeeded")
        return Outcome("succeeded", self.state.step, self.state.adapter_version, ckpt)

    async def _step(self) -> None:
        spec, step = self.spec, self.state.step
        t_start = time.perf_counter()  # eval and checkpoints of the last step stay out
        cpu_start = time.process_time()  # CPU seconds of this process: robust to other load
        gen_inline = 0.0
        if not self.is_async:
            t0 = time.perf_counter()
            await self.producer.produce(step)
            gen_inline = time.perf_counter() - t0
        t_wait = time.perf_counter()
        groups = await self._take(step)
        wait_s = time.perf_counter() - t_wait
        version_before = self.executor.adapter_version
        fresh, stale = TrajectoryBuffer.filter_stale(groups, version_before, self.max_staleness)
        self.state.dropped_stale_total += len(stale)
        if stale:
            self.emitter.log(
                f"step {step + 1}: dropped {len(stale)} groups older than "
                f"max_staleness={self.max_staleness}",
                "warning",
            )
        samples, advantages, batch_metrics = groups_to_samples(fresh, spec.algorithm)
        t_train = time.perf_counter()
        train_metrics = await self.executor.train_step(samples) if samples else {}
        train_s = time.perf_counter() - t_train

        t_sync = time.perf_counter()
        if self.is_async and spec.async_.weight_update == "wait" and self.max_staleness > 0:
            ahead = min(step + self.max_staleness, spec.train.steps - 1)
            await self.producer.produced(ahead).wait()
        self.adapter_metrics = {}
        if self.executor.adapter_version != self.backend.served_version:
            await self._publish()
        sync_s = time.perf_counter() - t_sync
        self.state.step += 1
        self.state.adapter_version = self.executor.adapter_version
        await self.watch.set(self.state.step)

        now = time.perf_counter()
        step_s = now - t_start
        self.state.elapsed_s += step_s
        values = self._metrics(fresh, version_before, step_s)
        values.update(batch_metrics)
        values.update(train_metrics)
        values.update(self.adapter_metrics)
        values.update(
            {
                "time/step_s": step_s,
                "time/generate_s": gen_inline
                if not self.is_async
                else (fresh or groups)[0].generate_s,
                "time/train_s": train_s,
                "time/weight_sync_s": sync_s,
                "time/wait_s": wait_s,
                "time/cpu_s": time.process_time() - cpu_start,
                "staleness/dropped_groups": float(len(stale)),
            }
        )
        n = self.state.step
        every = spec.train.eval_every
        if n == spec.train.steps or (every and n % every == 0):
            values["eval/accuracy"] = await evaluate(self.rollout)
        self.emitter.metric(n, values)
        self.emitter.samples(n, self._sample_items(fresh, advantages))
        ck = spec.checkpoint.every
        if ck and n % ck == 0 and n < spec.train.steps:
            await self._checkpoint()

    async def _take(self, step: int) -> list[ScoredGroup]:
        """The step's groups; if the producer task fails meanwhile (an engine error, a dead
        rollout actor), its error rather than a wait that never ends."""
        task = self.producer.task
        take = asyncio.ensure_future(self.buffer.take(step))
        if task is not None:
            done, _ = await asyncio.wait({take, task}, return_when=asyncio.FIRST_COMPLETED)
            if take not in done and not task.cancelled() and task.exception() is not None:
                take.cancel()
                task.result()  # raises the producer's error
        return await take

    def _metrics(self, groups: list[ScoredGroup], version: int, step_s: float) -> dict[str, float]:
        rewards = [r for g in groups for r in g.rewards]
        correct = [c for g in groups for c in g.correct]
        # the model's tokens: an episode's environment tokens were not generated
        lengths = [s.model_tokens for g in groups for s in g.result.samples]
        truncated = [s.finish_reason == "length" for g in groups for s in g.result.samples]
        stale = [version - g.min_version for g in groups]
        tokens = sum(lengths)
        self.state.tokens_total += tokens
        out = {
            "adapter_version": float(self.state.adapter_version),
            "tokens/total": float(self.state.tokens_total),
            "throughput/tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
        }
        if rewards:
            out.update(
                {
                    "reward/mean": statistics.fmean(rewards),
                    "reward/std": statistics.pstdev(rewards),
                    "accuracy": accuracy(correct),  # NaN (left out) with no verifier term
                    **length_metrics(lengths, truncated),
                    "staleness/mean": statistics.fmean(stale),
                    "staleness/max": float(max(stale)),
                    **term_metrics(groups),
                    **episode_metrics([e for g in groups for e in g.episodes]),
                }
            )
        return out

    def _sample_items(self, groups: list[ScoredGroup], advantages: list[list[float]]) -> list[dict]:
        items = []
        for g, group in enumerate(groups):
            for s, sample in enumerate(group.result.samples):
                if len(items) >= self.spec.train.log_samples:
                    return items
                items.append(
                    {
                        "prompt": group.prompt,
                        "completion": sample.text,
                        "answer": group.answer,
                        "reward": group.rewards[s],
                        "advantage": advantages[g][s],
                        "adapter_version": min(sample.model_versions, default=-1),
                        # each reward term's score, and what it saw (the inspector's columns)
                        "terms": group.terms[s] if group.terms else {},
                        "details": group.details[s] if group.details else {},
                    }
                )
                if group.episodes:  # the episode turn by turn (model, tool, env)
                    items[-1]["turns"] = episode_turns(group.episodes[s])
        return items

    # ---------------------------------------------------------------- adapter sync

    async def _publish(self) -> None:
        """Hand the trainer's adapter to the engine and check the acknowledgement: a sample
        is labelled with a version only after the engine confirmed it serves it."""
        # the probe costs a trainer forward: only for engines that check it (not torch's,
        # which loads the trainer's tensors as they are)
        update = await self.executor.adapter_update(with_probe=self.backend.needs_probe)
        # before the engine loads it (vLLM folds the scale into B while loading)
        self.adapter_metrics = adapter_effective_rank(update.tensors) if update.tensors else {}
        mode = self.spec.async_.weight_update if self.is_async else "wait"
        await self.backend.pause(mode)
        try:
            ack = await self.backend.load_adapter(update)
        finally:
            await self.backend.resume()
        if ack != update.version:
            raise RuntimeError(
                f"rollout backend {self.backend.name!r} acknowledged adapter version {ack}, "
                f"expected {update.version}: the weight sync did not reach the engine"
            )

    # ---------------------------------------------------------------- control

    async def _checkpoint(self) -> Path:
        path = await save_checkpoint(
            self.checkpoint_dir,
            self.state,
            self.executor,
            self.buffer,
            self.spec.checkpoint.keep_last,
        )
        self.last_checkpoint = path
        self.emitter.checkpoint(
            self.state.step,
            path.resolve().as_uri(),
            self.state.adapter_version,
            checkpoint_bytes(path),
        )
        return path

    async def _pause(self) -> Outcome | None:
        """Abort in-flight generation (partials stay in the buffer), checkpoint, report
        paused; then wait for resume, or exit if `release_on_pause`. None = resumed."""
        await self.producer.stop()
        await self.backend.pause("abort")
        ckpt = await self._checkpoint()
        self.emitter.status("paused", f"checkpoint {ckpt.name}")
        if self.spec.resources.release_on_pause:
            return Outcome("paused", self.state.step, self.state.adapter_version, ckpt)
        while (desired := self.control.desired_state()) == "paused":
            if self.leave():  # checkpointed above
                return Outcome("left", self.state.step, self.state.adapter_version, ckpt)
            await asyncio.sleep(0.05)
        if desired == "aborted":
            return await self._abort()
        await self.backend.resume()
        self.emitter.status("running", "resumed")
        if self.is_async:
            self.producer.start(self.state.step, self.spec.train.steps)
        return None

    async def _leave(self) -> Outcome:
        await self.producer.stop()
        await self.backend.pause("abort")
        ckpt = await self._checkpoint()
        return Outcome("left", self.state.step, self.state.adapter_version, ckpt)

    async def _abort(self) -> Outcome:
        await self.producer.stop()
        await self.backend.abort()
        self.emitter.status("aborted")
        return Outcome("aborted", self.state.step, self.state.adapter_version, self.last_checkpoint)
