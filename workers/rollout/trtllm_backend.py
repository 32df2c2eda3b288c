"""The TensorRT-LLM engine, written against the LLM API of TensorRT-LLM 1.2 (pytorch backend):
one `AsyncLLM` with LoRA, one *lane* per adapter (its gate, requests in flight, version and
handshake). A run alone (`TrtllmBackend`) is the engine with one lane; a pool (`TrtllmPool`,
the protocol of pool_engine.py) the same engine with a lane per run, every run's requests
submitted together and decoded in one batch by the engine's in-flight batching.

It has never run on a real TensorRT-LLM: that needs CUDA and NVIDIA's own wheel index. Its
tests run it against a stand-in engine that reproduces the documented behaviours
(tests/workers/rollout/trtllm_standin.py); docs/backends.md lists what is unverified.

What differs from vLLM, and how the engine copes:
- construction is awaited (`await tensorrt_llm.AsyncLLM(...)`): the engine starts on the
  first call that needs it;
- LoRA only from a path, cached by `lora_int_id` (an LRU over the GPU slots and
  `max_cpu_loras` host entries, at least two per slot, so that a lane's new version evicts
  some lane's previous one, never another lane's current one): each version is a new PEFT
  directory in RAM with a new id, unique across the engine (the cache would serve an old
  id's weights); old ids fall out of the cache (the API has no call to remove one) and
  their directories are deleted;
- one engine request per sample, labelled with the version of the LoRA id it ran under: an
  id names exactly one version, so the labels need nothing from the engine;
- the pytorch backend reports logprobs before temperature: when the temperature is not 1 the
  generation logits are requested and the logprob of the sampled token is recomputed under
  softmax(logits / T);
- the engine's only pause (`pause_generation()`) cancels everything in flight (finish
  reason "cancelled", partial tokens kept), and `generate_async` raises until
  `resume_generation()`. A lane alone uses it; a pool's lane, which must not touch the
  other runs' requests, aborts its own (`RequestOutput.abort()`) and submits nothing new.
  Either way a gate of our own sits in front: `keep` is emulated (the cancelled partials
  are resubmitted under the new adapter on resume, inside the same `generate` call) and
  `wait` too (close the gate, await the requests in flight, then stop).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import shutil
import weakref
from pathlib import Path
from typing import Any

import torch

from ..adapters import files as adapter_files
from ..adapters.update import AdapterProbe, AdapterUpdate, check_probe, probe_tolerance
from ..spec import LoraSpec, RunSpec, TrtllmRolloutSpec
from .base import (
    GroupRequest,
    GroupResult,
    PauseMode,
    Sample,
    pause_mode_check,
)
from .eos import eos_token_ids
from .gate import RequestGate
from .pool_engine import LanePool

_FINISH = {"stop": "stop", "length": "length", "cancelled": "abort"}
TRTLLM_RANKS = tuple(2**i for i in range(11))  # any rank works; round to a power of two


def _import_trtllm() -> Any:
    try:
        import tensorrt_llm
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "rollout.backend 'trtllm' needs the 'tensorrt_llm' package (TensorRT-LLM >= 1.2, "
            "CUDA, Python 3.10 or 3.12, installed from NVIDIA's wheel index; see "
            f"docs/backends.md) ({exc})"
        ) from exc
    return tensorrt_llm


class TrtllmEngine:
    """TensorRT-LLM's async engine for the spec's base model with LoRA: `max_loras` adapters
    in GPU slots of rank up to `max_lora_rank`, adapters supplied per request (`lora_dir`
    stays empty); started by the first call that needs it. Also what its lanes share: the
    tokenizer, the EOS and pad ids, the dtype and the LoRA ids."""

    def __init__(self, spec: RunSpec, model_dir: str | Path, max_loras: int, max_lora_rank: int):
        rollout = spec.rollout
        if not isinstance(rollout, TrtllmRolloutSpec):
            raise ValueError(f"trtllm backend: the spec's rollout.backend is {rollout.backend!r}")
        self.trt = _import_trtllm()
        from tensorrt_llm.executor.request import LoRARequest
        from transformers import AutoTokenizer

        self.LoRARequest = LoRARequest
        self.rollout, self.model_dir = rollout, str(model_dir)
        self.max_loras, self.max_lora_rank = max_loras, max_lora_rank
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        # end_id takes one id; the model's other EOS ids go in stop_token_ids, whose
        # tokens include_stop_str_in_output keeps in the output like the end id's
        self.eos_ids = eos_token_ids(self.model_dir, self.tokenizer.eos_token_id)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.eos_ids[0]
        self.dtype = "float32" if spec.model.dtype == "float32" else "bfloat16"
        self.int_ids = itertools.count(1)  # LoRA ids, never reused
        self.llm: Any = None
        self._starting = asyncio.Lock()

    async def started(self) -> Any:
        """The engine, started on the first call."""
        async with self._starting:
            if self.llm is None:
                from tensorrt_llm.lora_manager import LoraConfig

                lora_config = LoraConfig(
                    lora_dir=[],
                    max_lora_rank=self.max_lora_rank,
                    max_loras=self.max_loras,
                    max_cpu_loras=max(self.rollout.max_cpu_loras, 2 * self.max_loras),
                )
                kv = self.trt.llmapi.KvCacheConfig(
                    free_gpu_memory_fraction=self.rollout.kv_cache_free_gpu_memory_fraction
                )
                self.llm = await self.trt.AsyncLLM(
                    model=self.model_dir,
                    backend="pytorch",
                    dtype=self.dtype,
                    lora_config=lora_config,
                    kv_cache_config=kv,
                )
        return self.llm

    def shutdown(self) -> None:
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None


class TrtllmLane:
    """One adapter of a TensorRT-LLM engine as a rollout backend (base.py's protocol).
    `alone`: the only lane of its engine, which then pauses the engine itself."""

    name = "trtllm"
    needs_probe = True  # the version handshake checks the trainer's probe
    placeable = False  # the engine places itself (its own settings and Ray)

    def __init__(self, engine: TrtllmEngine, lora: LoraSpec, who: str, alone: bool):
        self.engine, self.lora, self.who, self.alone = engine, lora, who, alone
        self.probe_atol = probe_tolerance(engine.dtype)
        self._root = adapter_files.ram_dir("paddock-trtllm-")
        # /dev/shm outlives the process: remove the directory at exit even without close().
        weakref.finalize(self, shutil.rmtree, self._root, True)
        self._lora: Any = None
        self._lora_version = -1  # the version the current LoRA id names
        self._dirs: list[Path] = []
        self._version = -1
        self._gate = RequestGate()
        self._stopped = False  # paused: nothing of this lane's reaches the engine
        self._live = 0  # engine requests in flight
        self._handles: set[Any] = set()  # their RequestOutputs (each can abort itself)
        self._failed: BaseException | None = None
        self.handshakes: list[dict[str, float]] = []

    @property
    def served_version(self) -> int:
        return self._version

    # ---------------------------------------------------------------- protocol

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self._failed is not None:
            raise RuntimeError(f"{self.who} is unusable: {self._failed}") from self._failed
        if self._version < 0:
            raise RuntimeError(f"{self.who}: no adapter acknowledged yet; call load_adapter first")
        await self.engine.started()
        return await self._gate.run(requests, self._group)

    async def load_adapter(self, update: AdapterUpdate) -> int:
        if update.probe is None:
            raise ValueError(
                f"{self.who}: adapter update {update.version} carries no probe; the version "
                "handshake needs the trainer's probe logprobs"
            )
        llm = await self.engine.started()
        path = adapter_files.write_version(
            update, self._root, self.lora, base_model=self.engine.model_dir
        )
        lora = self.engine.LoRARequest(
            f"paddock-v{update.version}", next(self.engine.int_ids), str(path)
        )
        try:
            err = await self._handshake(llm, update.version, update.probe, lora)
        except BaseException as exc:
            self._failed = exc
            raise
        self._lora, self._lora_version = lora, update.version
        self._failed = None
        self._dirs = [*self._dirs[-1:], path]
        adapter_files.remove_versions(self._root, keep=set(self._dirs))
        self._version = update.version
        self.handshakes.append({"version": update.version, "probe_err": err})
        return self._version

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        llm = await self.engine.started()
        await self._gate.close(mode)
        if mode == "wait":  # the engine has no wait: let what is in flight finish first
            await self._gate.idle()
        await self._stop(llm)
        if mode == "abort":
            await self._gate.idle()

    async def resume(self) -> None:
        await self._restart(await self.engine.started())
        await self._gate.reopen()

    async def abort(self) -> list[GroupResult]:
        llm = await self.engine.started()
        await self._gate.change(aborting=True, aborted=[])
        was_stopped = self._stopped
        try:
            await self._stop(llm)
            await self._gate.idle()
        finally:
            if not was_stopped:
                await self._restart(llm)
            await self._gate.change(aborting=False)
        return list(self._gate.aborted)

    async def close(self) -> None:
        """Leave the engine: abort this lane's requests; its ids age out of the cache."""
        if self.engine.llm is not None:
            await self.abort()
        self._lora, self._version = None, -1
        shutil.rmtree(self._root, ignore_errors=True)

    # ---------------------------------------------------------------- internals

    async def _stop(self, llm: Any) -> None:
        """Stop this lane's requests: a lane alone pauses the engine (which cancels
        everything in flight and refuses submissions); a pool's lane aborts its own and
        submits nothing new."""
        if not self._stopped:
            self._stopped = True
            if self.alone:
                await llm.pause_generation()
        if not self.alone:
            for handle in list(self._handles):
                handle.abort()
        # Before TensorRT-LLM #13784 pause returned before the engine drained.
        await self._gate.wait(lambda: self._live == 0)

    async def _restart(self, llm: Any) -> None:
        if self._stopped:
            if self.alone:
                await llm.resume_generation()
            self._stopped = False

    async def _handshake(self, llm: Any, version: int, probe: AdapterProbe, lora: Any) -> float:
        """New id, new path: the engine loads it on first use. Probe logprobs: one request per
        probe position with the generation logits of its single step (temperature 1). A
        paused engine runs for it (none of this lane's requests is in flight)."""
        paused = self._stopped and self.alone
        if paused:
            await llm.resume_generation()
        try:
            params = self.engine.trt.SamplingParams(
                max_tokens=1, temperature=1.0, top_k=0, top_p=1.0, return_generation_logits=True
            )
            outs = await asyncio.gather(
                *(
                    llm.generate_async(
                        probe.prompt_ids + probe.token_ids[:i], params, lora_request=lora
                    )
                    for i in range(len(probe.token_ids))
                )
            )
        finally:
            if paused:
                await llm.pause_generation()
        got = []
        for out, tok in zip(outs, probe.token_ids, strict=True):
            logits = torch.as_tensor(out.outputs[0].generation_logits).float().reshape(-1)
            got.append(float(torch.log_softmax(logits, -1)[tok]))
        return check_probe(self.who, version, probe, got, self.probe_atol)

    def _params(self, req: GroupRequest, max_tokens: int, seed: int) -> Any:
        p, eos_ids = req.params, self.engine.eos_ids
        return self.engine.trt.SamplingParams(
            temperature=p.temperature,
            top_k=1 if p.greedy else 0,  # 0 = off
            top_p=1.0,
            max_tokens=max_tokens,
            logprobs=0,  # the sampled token's logprob (TorchSampler)
            return_generation_logits=p.temperature != 1.0,
            seed=seed,
            end_id=eos_ids[0],
            pad_id=self.engine.pad_id,
            stop=list(p.stop) or None,
            stop_token_ids=list(eos_ids[1:]) or None,
            include_stop_str_in_output=True,
        )

    async def _group(self, req: GroupRequest) -> GroupResult:
        samples = [
            Sample(list(s.token_ids), list(s.logprobs), list(s.versions), s.finish_reason)
            for s in (req.partial or [Sample() for _ in range(req.n)])
        ]
        await asyncio.gather(
            *(self._sample(req, j, s) for j, s in enumerate(samples) if not s.done)
        )
        for s in samples:
            s.text = self.engine.tokenizer.decode(s.token_ids, skip_special_tokens=True)
        return GroupResult(req.request_id, req.prompt_ids, samples)

    async def _sample(self, req: GroupRequest, j: int, s: Sample) -> None:
        """Run one sample to its end; in keep mode a cancellation is resubmitted once the
        gate opens again, under whatever adapter is served then."""
        while True:
            s.finish_reason = None
            left = req.params.max_new_tokens - len(s.token_ids)
            if left <= 0:
                s.finish_reason = "length"
                return
            seed = (req.seed + j + 1_000_003 * len(s.token_ids)) % (1 << 63)
            await self._submit(req, s, left, seed)
            if s.finish_reason != "abort" or self._gate.cut:
                return  # done, or cut short by an abort the caller resubmits
            await self._gate.wait(lambda: self._gate.open or self._gate.aborting)
            if self._gate.aborting:
                return

    async def _submit(self, req: GroupRequest, s: Sample, max_tokens: int, seed: int) -> None:
        llm, lora, version = self.engine.llm, self._lora, self._lora_version
        params = self._params(req, max_tokens, seed)
        self._live += 1
        handle = None
        try:
            if self._stopped:
                s.finish_reason = "abort"  # paused: nothing new reaches the engine
                return
            # a RequestOutput: awaitable, and abortable on its own (`abort()`)
            handle = llm.generate_async(req.prompt_ids + s.token_ids, params, lora_request=lora)
            self._handles.add(handle)
            out = await handle
        except RuntimeError:
            if not self._stopped:
                raise
            s.finish_reason = "abort"  # submitted in the instant the engine paused
            return
        finally:
            self._handles.discard(handle)
            async with self._gate.cond:  # waited on through the gate (_stop)
                self._live -= 1
                self._gate.cond.notify_all()
        c = out.outputs[0]
        if c.finish_reason not in _FINISH:
            raise RuntimeError(f"TensorRT-LLM request ended with {c.finish_reason!r}")
        new = list(c.token_ids)
        lps = _sampled_logprobs(c, new, req.params.temperature)
        s.token_ids += new
        s.logprobs += lps
        s.versions += [version] * len(new)
        s.finish_reason = _FINISH[c.finish_reason]


def _sampled_logprobs(c: Any, tokens: list[int], temperature: float) -> list[float]:
    if not tokens:
        return []
    if temperature != 1.0:  # the engine's logprobs are raw: recompute under the temperature
        logits = torch.as_tensor(c.generation_logits).float().reshape(len(tokens), -1)
        lp = torch.log_softmax(logits / temperature, dim=-1)
        return [float(lp[i, t]) for i, t in enumerate(tokens)]
    out = []
    for entry, tok in zip(c.logprobs or [], tokens, strict=True):
        value = entry[tok].logprob if isinstance(entry, dict) else float(entry)
        if not math.isfinite(value):
            raise RuntimeError(f"TensorRT-LLM returned logprob {value} for token {tok}")
        out.append(value)
    return out


class TrtllmBackend(TrtllmLane):
    """A run alone: its own engine (`rollout.max_loras` slots, as a pool's) with one lane,
    the spec's adapter, which pauses the whole engine."""

    def __init__(self, spec: RunSpec, model_dir: str | Path):
        engine = TrtllmEngine(spec, model_dir, spec.rollout.max_loras,
                              adapter_files.supported_rank(spec.lora.r, TRTLLM_RANKS))  # fmt: skip
        super().__init__(engine, spec.lora, "trtllm backend", alone=True)

    async def close(self) -> None:
        await super().close()
        self.engine.shutdown()


class TrtllmPool(LanePool):
    """A pool's runs on one TensorRT-LLM engine, started when the first run joins: a lane
    per run, each version a LoRA id unique across the pool."""

    name = "trtllm"
    ranks = TRTLLM_RANKS

    def _start(self) -> None:
        self.engine = TrtllmEngine(self.spec, self.model_dir, self.capacity, self.max_lora_rank)

    async def _new_lane(self, run_id: str, lora: LoraSpec, slot: int) -> TrtllmLane:
        await self.engine.started()
        return TrtllmLane(self.engine, lora, f"trtllm pool run {run_id!r}", alone=False)

    async def _shutdown(self) -> None:
        self.engine.shutdown()
