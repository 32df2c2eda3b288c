"""The TensorRT-LLM rollout backend, written against the LLM API of TensorRT-LLM 1.2 (pytorch
backend). It has never run on a real TensorRT-LLM: that needs CUDA and NVIDIA's own wheel
index. Its tests run it against a stand-in engine that reproduces the documented behaviours
(tests/workers/rollout/trtllm_standin.py); docs/backends.md lists what is unverified.

What differs from vLLM, and how this backend copes:
- construction is awaited (`await tensorrt_llm.AsyncLLM(...)`): the engine starts on the
  first call that needs it;
- LoRA only from a path, cached by `lora_int_id`: each version is a new PEFT directory in RAM
  with a new id (ids are never reused: the cache would serve the old weights); old ones fall
  out of the engine's LRU cache and their directories are deleted;
- one engine request per sample, labelled with the version of the LoRA id it ran under: an
  id names exactly one version, so the labels need nothing from the engine;
- the pytorch backend reports logprobs before temperature: when the temperature is not 1 the
  generation logits are requested and the logprob of the sampled token is recomputed under
  softmax(logits / T);
- only one pause exists, and it aborts: `pause_generation()` cancels everything in flight
  (finish reason "cancelled", partial tokens kept) and `generate_async` raises until
  `resume_generation()`. Our own gate sits in front of it; `keep` is emulated (the cancelled
  partials are resubmitted under the new adapter on resume, inside the same `generate` call)
  and `wait` too (close the gate, await the requests in flight, then pause the engine).
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
from ..spec import RunSpec
from .base import GroupRequest, GroupResult, PauseMode, Sample, pause_mode_check
from .eos import eos_token_ids
from .gate import RequestGate

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


async def start_engine(
    trt: Any,
    spec: RunSpec,
    model_dir: str,
    dtype: str,
    max_lora_rank: int,
    max_loras: int,
    max_cpu_loras: int,
) -> Any:
    """TensorRT-LLM's async engine with LoRA: `max_loras` adapters in GPU slots, an LRU of
    `max_cpu_loras` on the host; adapters come per request (`lora_dir` stays empty)."""
    from tensorrt_llm.lora_manager import LoraConfig

    lora_config = LoraConfig(
        lora_dir=[],
        max_lora_rank=max_lora_rank,
        max_loras=max_loras,
        max_cpu_loras=max_cpu_loras,
    )
    kv = trt.llmapi.KvCacheConfig(
        free_gpu_memory_fraction=getattr(spec.rollout, "kv_cache_free_gpu_memory_fraction", 0.5)
    )
    return await trt.AsyncLLM(
        model=model_dir,
        backend="pytorch",
        dtype=dtype,
        lora_config=lora_config,
        kv_cache_config=kv,
    )


class TrtllmBackend:
    needs_probe = True  # the version handshake checks the trainer's probe
    name = "trtllm"
    placeable = False  # the engine places itself (its own settings and Ray)
    # A lane of a pool engine (TrtllmLane) pauses its own requests, never the engine.
    _pauses_engine = True

    def __init__(self, spec: RunSpec, model_dir: str | Path):
        self.spec = spec
        self.model_dir = str(model_dir)
        self._trt = _import_trtllm()
        from tensorrt_llm.executor.request import LoRARequest
        from transformers import AutoTokenizer

        self._LoRARequest = LoRARequest
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        # end_id takes one id; the model's other EOS ids go in stop_token_ids, whose
        # tokens include_stop_str_in_output keeps in the output like the end id's
        self.eos_ids = eos_token_ids(self.model_dir, self.tokenizer.eos_token_id)
        self.eos_id = self.eos_ids[0]
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.eos_id
        self.dtype = "float32" if spec.model.dtype == "float32" else "bfloat16"
        self.probe_atol = probe_tolerance(self.dtype)
        self._llm: Any = None
        self._root = adapter_files.ram_dir("paddock-trtllm-")
        # /dev/shm outlives the process: remove the directory at exit even without close().
        weakref.finalize(self, shutil.rmtree, self._root, True)
        self._lora: Any = None
        self._lora_version = -1  # the version the current LoRA id names
        self._int_ids = itertools.count(1)  # never reused
        self._dirs: list[Path] = []
        self._version = -1
        self._gate = RequestGate()
        self._engine_paused = False
        self._live = 0  # engine requests in flight
        self._handles: set[Any] = set()  # their RequestOutputs (each can abort itself)
        self._failed: BaseException | None = None
        self.handshakes: list[dict[str, float]] = []

    @property
    def served_version(self) -> int:
        return self._version

    async def _engine(self) -> Any:
        if self._llm is None:
            r = self.spec.rollout
            self._llm = await start_engine(
                self._trt,
                self.spec,
                self.model_dir,
                self.dtype,
                max_lora_rank=adapter_files.supported_rank(self.spec.lora.r, TRTLLM_RANKS),
                max_loras=r.max_loras,
                max_cpu_loras=r.max_cpu_loras,
            )
        return self._llm

    # ---------------------------------------------------------------- protocol

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self._failed is not None:
            raise RuntimeError(f"trtllm backend is unusable: {self._failed}") from self._failed
        if self._version < 0:
            raise RuntimeError(
                "trtllm backend: no adapter acknowledged yet; call load_adapter first"
            )
        await self._engine()
        return await self._gate.run(requests, self._group)

    async def load_adapter(self, update: AdapterUpdate) -> int:
        if update.probe is None:
            raise ValueError(
                f"trtllm backend: adapter update {update.version} carries no probe; the "
                "version handshake needs the trainer's probe logprobs"
            )
        llm = await self._engine()
        path = adapter_files.write_version(
            update, self._root, self.spec.lora, base_model=self.model_dir
        )
        lora = self._LoRARequest(f"paddock-v{update.version}", next(self._int_ids), str(path))
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
        llm = await self._engine()
        await self._gate.close(mode)
        if mode == "wait":  # the engine has no wait: let what is in flight finish first
            await self._gate.idle()
        await self._pause_engine(llm)
        if mode == "abort":
            await self._gate.idle()

    async def resume(self) -> None:
        await self._resume_engine(await self._engine())
        await self._gate.reopen()

    async def abort(self) -> list[GroupResult]:
        llm = await self._engine()
        await self._gate.change(aborting=True, aborted=[])
        was_paused = self._engine_paused
        try:
            await self._pause_engine(llm)
            await self._gate.idle()
        finally:
            if not was_paused:
                await self._resume_engine(llm)
            await self._gate.change(aborting=False)
        return list(self._gate.aborted)

    async def close(self) -> None:
        if self._llm is not None:
            await self.abort()
            self._llm.shutdown()
            self._llm = None
        shutil.rmtree(self._root, ignore_errors=True)

    # ---------------------------------------------------------------- internals

    async def _pause_engine(self, llm: Any) -> None:
        if not self._engine_paused:
            await llm.pause_generation()
            self._engine_paused = True
        # Before TensorRT-LLM #13784 pause returned before the engine drained.
        await self._gate.wait(lambda: self._live == 0)

    async def _resume_engine(self, llm: Any) -> None:
        if self._engine_paused:
            await llm.resume_generation()
            self._engine_paused = False

    async def _handshake(self, llm: Any, version: int, probe: AdapterProbe, lora: Any) -> float:
        """New id, new path: the engine loads it on first use. Probe logprobs: one request per
        probe position with the generation logits of its single step (temperature 1)."""
        paused = self._engine_paused and self._pauses_engine
        if paused:
            await llm.resume_generation()
        try:
            params = self._trt.SamplingParams(
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
        return check_probe("trtllm", version, probe, got, self.probe_atol)

    def _params(self, req: GroupRequest, max_tokens: int, seed: int) -> Any:
        p = req.params
        temperature = p.temperature
        return self._trt.SamplingParams(
            temperature=temperature,
            top_k=1 if p.greedy else 0,  # 0 = off
            top_p=1.0,
            max_tokens=max_tokens,
            logprobs=0,  # the sampled token's logprob (TorchSampler)
            return_generation_logits=temperature != 1.0,
            seed=seed,
            end_id=self.eos_id,
            pad_id=self.pad_id,
            stop=list(p.stop) or None,
            stop_token_ids=list(self.eos_ids[1:]) or None,
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
            s.text = self.tokenizer.decode(s.token_ids, skip_special_tokens=True)
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
        llm, lora, version = self._llm, self._lora, self._lora_version
        params = self._params(req, max_tokens, seed)
        self._live += 1
        handle = None
        try:
            if self._engine_paused and not self._pauses_engine:
                s.finish_reason = "abort"  # the lane is paused: nothing new reaches the engine
                return
            # a RequestOutput: awaitable, and abortable on its own (`abort()`)
            handle = llm.generate_async(req.prompt_ids + s.token_ids, params, lora_request=lora)
            self._handles.add(handle)
            out = await handle
        except RuntimeError:
            if not self._engine_paused:
                raise
            s.finish_reason = "abort"  # submitted in the instant the engine paused
            return
        finally:
            self._handles.discard(handle)
            async with self._gate.cond:  # waited on through the gate (_pause_engine)
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
