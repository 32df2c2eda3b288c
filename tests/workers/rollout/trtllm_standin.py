"""A stand-in for TensorRT-LLM's LLM API (1.2, pytorch backend), installed as the
`tensorrt_llm` package for the tests: TensorRT-LLM itself cannot be installed on these
machines. It reproduces the documented behaviours the backend depends on, and nothing more:

- `await AsyncLLM(...)`: construction must be awaited; an engine not awaited refuses work;
- `generate_async(prompt_token_ids, sampling_params, lora_request=...)` returns at once a
  `RequestOutput` that is awaited for the result and can `abort()` its own request
  (finish reason "cancelled", partial tokens kept), as the LLM API's `GenerationResult`;
  logprobs are raw (before temperature), as the pytorch backend reports them; a request
  stops at `end_id` or any of `stop_token_ids`, the stopping token kept in the output;
  `return_generation_logits` gives the raw logits of each generated step;
- `pause_generation()` cancels everything in flight (finish reason "cancelled", the partial
  tokens and logprobs kept) and `generate_async` raises RuntimeError until
  `resume_generation()`;
- LoRA only from a path that exists, cached by `lora_int_id` in an LRU of `max_cpu_loras`
  entries: a reused id serves the cached (old) weights, as the real cache does; every id
  seen is recorded so a test can check none is reused; so is the largest number of distinct
  ids decoding at once (`max_concurrent_loras`), which shows several adapters in one batch.

Decoding is per request, a full forward per token (no KV cache), yielding to the event loop
between tokens so pauses interleave with generation as they do on a real engine.
"""

from __future__ import annotations

import asyncio
import sys
import types
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_tokens: int = 32
    logprobs: int | None = None
    return_generation_logits: bool = False
    seed: int | None = None
    end_id: int | None = None
    pad_id: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False


@dataclass
class LoraConfig:
    lora_dir: list[str] = field(default_factory=list)
    max_lora_rank: int = 64
    max_loras: int = 1
    max_cpu_loras: int = 1


@dataclass
class KvCacheConfig:
    free_gpu_memory_fraction: float = 0.9


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    generation_logits: torch.Tensor | None = None
    finish_reason: str | None = None


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


class AsyncLLM:
    def __init__(self, model: str, backend: str = "pytorch", lora_config=None, **kwargs: Any):
        if backend != "pytorch":
            raise ValueError("the stand-in implements the pytorch backend only")
        self._model_dir = model
        self._lora_config = lora_config or LoraConfig()
        self._ready = False
        self._paused = False
        self._inflight: set[asyncio.Event] = set()
        self._cache: OrderedDict[int, str] = OrderedDict()  # lora id → adapter name (LRU)
        self.ids_seen: dict[int, str] = {}  # lora id → the path it was first loaded from
        self.loads: list[int] = []
        self.submitted_while_paused = 0
        self._decoding: dict[int, int] = {}  # lora id → requests decoding under it now
        self.max_concurrent_loras = 0
        self.tokens_out: dict[int, int] = {}  # lora id → tokens generated under it
        # awaited by each request before its next token, with its cancel event (a test
        # holds the requests there while it lands a pause: tests/workers/helpers.py)
        self.on_token: Callable[[asyncio.Event], Awaitable[None]] | None = None

    def __await__(self):
        return self._start().__await__()

    async def _start(self) -> AsyncLLM:
        base = AutoModelForCausalLM.from_pretrained(self._model_dir, dtype=torch.float32)
        self._base = base.eval()
        self._peft: PeftModel | None = None
        self.tokenizer = AutoTokenizer.from_pretrained(self._model_dir)
        self._ready = True
        return self

    # ------------------------------------------------------------ control

    async def pause_generation(self) -> None:
        self._paused = True
        for cancel in list(self._inflight):
            cancel.set()
        await asyncio.sleep(0)  # like the real one before #13784: returns before draining

    async def resume_generation(self) -> None:
        self._paused = False

    def shutdown(self) -> None:
        self._ready = False

    # ------------------------------------------------------------ LoRA

    def _adapter(self, lora: LoRARequest | None) -> str | None:
        if lora is None:
            return None
        lid = lora.lora_int_id
        if lid in self._cache:  # cached by id: a reused id serves the old weights
            self._cache.move_to_end(lid)
            return self._cache[lid]
        if not Path(lora.lora_path, "adapter_config.json").is_file():
            raise ValueError(f"LoRA {lora.lora_name}: no adapter at {lora.lora_path}")
        name = f"lora{lid}"
        if self._peft is None:
            self._peft = PeftModel.from_pretrained(self._base, lora.lora_path, adapter_name=name)
            self._peft.eval()
        else:
            self._peft.load_adapter(lora.lora_path, adapter_name=name)
        self.ids_seen.setdefault(lid, lora.lora_path)
        self.loads.append(lid)
        self._cache[lid] = name
        while len(self._cache) > self._lora_config.max_cpu_loras:
            _, old = self._cache.popitem(last=False)
            self._peft.delete_adapter(old)
        return name

    @torch.no_grad()
    def _logits(self, ids: list[int], adapter: str | None) -> torch.Tensor:
        x = torch.tensor([ids])
        if adapter is None:
            if self._peft is not None:
                with self._peft.disable_adapter():
                    return self._peft(input_ids=x).logits[0, -1].float()
            return self._base(input_ids=x).logits[0, -1].float()
        self._peft.set_adapter(adapter)
        return self._peft(input_ids=x).logits[0, -1].float()

    # ------------------------------------------------------------ generation

    def generate_async(
        self,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams | None = None,
        lora_request: LoRARequest | None = None,
    ) -> PendingOutput:
        if not self._ready:
            raise RuntimeError("AsyncLLM was not awaited (or was shut down)")
        if self._paused:
            self.submitted_while_paused += 1
            raise RuntimeError("generation is paused; call resume_generation() first")
        cancel = asyncio.Event()
        task = asyncio.ensure_future(
            self._generate(list(prompt_token_ids), sampling_params, lora_request, cancel)
        )
        return PendingOutput(task, cancel)

    async def _generate(
        self,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams | None,
        lora_request: LoRARequest | None,
        cancel: asyncio.Event,
    ) -> RequestOutput:
        p = sampling_params or SamplingParams()
        adapter = self._adapter(lora_request)
        lid = lora_request.lora_int_id if lora_request else 0
        gen = torch.Generator().manual_seed(p.seed if p.seed is not None else 0)
        out = CompletionOutput(0)
        logits_rows = []
        self._inflight.add(cancel)
        self._decoding[lid] = self._decoding.get(lid, 0) + 1
        try:
            ids = list(prompt_token_ids)
            while out.finish_reason is None:
                await asyncio.sleep(0)
                if self.on_token is not None:
                    await self.on_token(cancel)
                if cancel.is_set():
                    out.finish_reason = "cancelled"
                    break
                decoding = sum(1 for k, n in self._decoding.items() if n and k)
                self.max_concurrent_loras = max(self.max_concurrent_loras, decoding)
                logits = self._logits(ids, adapter)  # [V] raw
                if p.top_k == 1:
                    tok = int(logits.argmax())
                else:
                    probs = torch.softmax(logits / p.temperature, -1)
                    tok = int(torch.multinomial(probs, 1, generator=gen))
                ids.append(tok)
                self.tokens_out[lid] = self.tokens_out.get(lid, 0) + 1
                out.token_ids.append(tok)
                out.logprobs.append(float(torch.log_softmax(logits, -1)[tok]))  # raw
                logits_rows.append(logits)
                text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
                stop_token = tok == p.end_id or tok in (p.stop_token_ids or ())
                if stop_token or any(text.endswith(s) for s in p.stop or ()):
                    out.finish_reason = "stop"
                elif len(out.token_ids) >= p.max_tokens:
                    out.finish_reason = "length"
        finally:
            self._inflight.discard(cancel)
            self._decoding[lid] -= 1
        out.text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        if p.return_generation_logits and logits_rows:
            out.generation_logits = torch.stack(logits_rows)  # [T, V]
        return RequestOutput(list(prompt_token_ids), [out])


class PendingOutput:
    """What generate_async returns: awaitable for the RequestOutput; abort() cancels only
    this request."""

    def __init__(self, task: asyncio.Future, cancel: asyncio.Event):
        self._task, self._cancel = task, cancel

    def abort(self) -> None:
        self._cancel.set()

    def __await__(self):
        return self._task.__await__()


def install() -> types.ModuleType:
    """Register the stand-in as `tensorrt_llm` (and the submodules the backend imports)."""
    root = types.ModuleType("tensorrt_llm")
    root.__stand_in__ = True
    llmapi = types.ModuleType("tensorrt_llm.llmapi")
    executor = types.ModuleType("tensorrt_llm.executor")
    request = types.ModuleType("tensorrt_llm.executor.request")
    lora_manager = types.ModuleType("tensorrt_llm.lora_manager")
    root.AsyncLLM = llmapi.AsyncLLM = AsyncLLM
    root.SamplingParams = llmapi.SamplingParams = SamplingParams
    llmapi.KvCacheConfig = KvCacheConfig
    request.LoRARequest = LoRARequest
    lora_manager.LoraConfig = LoraConfig
    root.llmapi, root.executor, root.lora_manager = llmapi, executor, lora_manager
    executor.request = request
    for mod in (root, llmapi, executor, request, lora_manager):
        sys.modules[mod.__name__] = mod
    return root


def uninstall() -> None:
    for name in [n for n in sys.modules if n == "tensorrt_llm" or n.startswith("tensorrt_llm.")]:
        del sys.modules[name]
