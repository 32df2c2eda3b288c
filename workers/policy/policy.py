"""The trainer: a causal LM with LoRA adapters, and the GRPO step of one adapter or several.

`LoraPolicy` holds the base model and how the step runs (device, bf16, activation
checkpointing, compilation, the `Parallelism` strategy); each run's own state is an
`Adapter` (adapter.py) passed to the step. A run alone is a policy of one adapter (the one
it is built with, `policy.adapter`); a pool's runs are adapters added to one policy. One
run's step is the solo step with its adapter active; several runs' steps in one forward and
backward (`train_steps`) are the same step over several adapters, each row under its own
run's adapter (forward.py, adapters/rows_lora.py), each run with its own loss, optimizer and
random stream, so that on the CPU each one's update is its solo step's to fp32 rounding
(docs/pools.md says what differs on a GPU and where runs step one at a time instead).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..adapters import lora as lora_io
from ..adapters.rows_lora import splits_rows
from ..grpo import ADDITIVE_METRICS, AggNorm, LossInputs, grpo_loss
from ..spec import RunSpec
from .adapter import Adapter, RngStream
from .batch import TrainBatch, TrainSample, collate
from .checkpointing import checkpoint_layers
from .forward import Rows, response_hidden
from .fused_logprobs import token_logprobs as token_logprobs_fn
from .mixed_precision import bf16_autocast, tuner_layers, uncast_inputs
from .optimizer_graph import OptimizerGraph
from .parallel import OneProcess, Parallelism
from .stacked_lora import stack_layers
from .version_check import METRICS, AdapterHistory, TokenSums, merge, of_version, stale_pick

log = logging.getLogger(__name__)


def pick_device(spec: RunSpec) -> torch.device:
    return torch.device(
        "cuda" if spec.resources.trainer_gpus > 0 and torch.cuda.is_available() else "cpu"
    )


class LoraPolicy:
    """The base model with its adapters, and the step. `parallel` is how the step spreads
    over processes (parallel.py; fsdp.py for FSDP2)."""

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        device: torch.device | None = None,
        parallel: Parallelism | None = None,
        stack_lora: bool | None = None,
        optimizer_graph: bool | None = None,
    ):
        """`spec` fixes the base model and the step's setup, and is the first adapter's
        (`self.adapter`). `stack_lora`: run the LoRA linears stacked (stacked_lora.py) with
        the fused AdamW; by default on a GPU in one process. False: PEFT's own layers and
        the foreach AdamW, the step as it was before both (the benchmarks' baseline).
        `optimizer_graph`: clip the gradients and step AdamW as one CUDA graph replay
        (optimizer_graph.py); by default wherever AdamW is the fused one (a GPU, one
        process, stacked LoRA)."""
        self.spec = spec
        self.parallel = parallel or OneProcess()
        self.device = device or pick_device(spec)
        self.tokenizer = lora_io.load_tokenizer(model_dir)
        self.model = lora_io.load_spec_model(model_dir, spec, self.device, rows=True)
        # One process on a GPU: the LoRA linears that read one input run as one matmul
        # (stacked_lora.py: 24 matmuls a layer instead of PEFT's 56) and AdamW is one fused
        # kernel over all adapter tensors instead of a foreach chain. FSDP2 shards the base
        # weights and the parameters (DTensors), so it keeps PEFT's layers and foreach.
        alone = self.device.type == "cuda" and isinstance(self.parallel, OneProcess)
        stack = alone if stack_lora is None else stack_lora
        self.stacked = stack and stack_layers(self._layers())
        self._fused = alone and stack_lora is not False
        self._graphed = alone and (self._fused if optimizer_graph is None else optimizer_graph)
        use_bf16 = self.device.type == "cuda" and spec.model.dtype in ("auto", "bfloat16")
        # the PEFT layers whose input cast the bf16 contexts switch off, listed once (PEFT's
        # own switch walks every module on entry and exit: mixed_precision.py)
        self._tuner_layers = tuner_layers(self.model)
        self._autocast = (
            (lambda: bf16_autocast(self.model, self._tuner_layers))
            if use_bf16
            else contextlib.nullcontext
        )
        self._checkpointed = spec.train.activation_checkpointing
        # A checkpointed layer's recompute runs in backward, outside the forward's context:
        # LoRA inputs must stay uncast there too, or the recomputed tensors' dtypes differ
        # from the saved ones (checkpoint refuses that). Autocast the checkpoint restores.
        uncast = use_bf16 and self._checkpointed
        self._backward_context = (
            (lambda: uncast_inputs(self._tuner_layers)) if uncast else contextlib.nullcontext
        )
        if self._checkpointed:
            checkpoint_layers(self._layers())
        self._compiled = spec.train.compile and self.device.type == "cuda"
        if self._compiled:
            self.compile_layers()
        self.parallel.prepare(self.model)
        self.adapters: dict[str, Adapter] = {}
        self._added = 0
        # built after the strategy, which may have swapped parameters (FSDP2: DTensors)
        self.adapter = self._register(lora_io.ADAPTER_NAME, spec)
        self.together: Counter[int] = Counter()  # steps by how many adapters each took
        # one mode for the whole tree: from_pretrained leaves the base model's modules in
        # eval mode while PEFT's new ones (and the root) start in training mode, so the
        # step's check of the root's flag alone would keep the base layers in eval mode
        # (no activation checkpointing, no dropout of theirs)
        self.model.train()

    def _layers(self) -> torch.nn.ModuleList:
        return self.model.get_base_model().model.layers  # LoRA layers are injected in place

    def compile_layers(self, backend: str = "inductor") -> None:
        """Regional compilation: the layers share one forward, so one compiled graph serves
        all of them (parameters are its inputs); the logprob head compiles its per-chunk
        maths (fused_logprobs.py) and keeps its own matmuls. Dynamic: every step's batch
        has other lengths (automatic dynamic shapes would compile each graph twice to find
        that out). The layers' one code object then has up to _LAYER_GRAPHS graphs, more
        than dynamo's default limit of 8, past which it runs the rest eager."""
        config = torch._dynamo.config
        config.recompile_limit = max(config.recompile_limit, _LAYER_GRAPHS)
        for layer in self._layers():
            layer.compile(backend=backend, dynamic=True)
        self._compiled = True

    # ---------------------------------------------------------------- adapters

    def _register(self, name: str, spec: RunSpec) -> Adapter:
        params = [p for n, p in self.model.named_parameters() if f".{name}." in n]
        t = spec.train
        optimizer = torch.optim.AdamW(
            params,
            lr=t.lr,
            weight_decay=t.weight_decay,
            betas=t.betas,
            fused=self._fused or None,
            capturable=self._graphed,  # its step counter on the device, for the capture
        )
        graph = OptimizerGraph(params, optimizer, t.grad_clip) if self._graphed else None
        keep = spec.async_.max_staleness if spec.async_.enabled else 0
        adapter = Adapter(
            name,
            spec,
            params,
            lora_io.peft_index(self.model, name),
            optimizer,
            graph,
            RngStream.seeded(spec.seed, self.device),
            AdapterHistory(keep),
        )
        self.adapters[name] = adapter
        return adapter

    def add_adapter(self, spec: RunSpec) -> Adapter:
        """A fresh adapter of `spec` (initialised as a run alone initialises its own: the
        seed draws the A matrices, B starts at zero) beside the others, on the same base
        model; one process only. What must match the policy's spec is the caller's to check
        (the pool's key, workers/pool_key.py)."""
        if not isinstance(self.parallel, OneProcess):
            raise ValueError("adapters beyond the first need a policy of one process")
        name = f"run{self._added}"  # PEFT module keys: no dots, nothing like "lora_"
        self._added += 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            self.model.add_adapter(name, lora_io.lora_config(spec.lora))
        self._tuner_layers = tuner_layers(self.model)  # new target modules are new layers
        adapter = self._register(name, spec)
        for p in adapter.params:
            p.requires_grad_(False)  # trainable while it is active or in a step
        return adapter

    def remove_adapter(self, adapter: Adapter) -> None:
        self.model.delete_adapter(adapter.name)
        del self.adapters[adapter.name]

    def activate(self, adapter: Adapter) -> torch.nn.Module:
        """The model, computing with `adapter` (PEFT's active adapter, its parameters the
        trainable ones); set only when another was."""
        if self.model.active_adapter != adapter.name:
            self.model.set_adapter(adapter.name)
        return self.model

    # ---------------------------------------------------------------- forward passes

    def _logprobs(self, rows: list[Rows], specs: list[RunSpec], together: bool) -> list[tuple]:
        """Each batch's (logprobs, entropy) under its own adapter (`hidden_logprobs`)."""
        pad, uniform = self.tokenizer.pad_token_id, self.parallel.uniform_forward
        with self._autocast():
            hidden = response_hidden(self.model, pad, rows, together, uniform)
        return [
            self.hidden_logprobs(h, r.batch, spec)
            for h, r, spec in zip(hidden, rows, specs, strict=True)
        ]

    def hidden_logprobs(
        self, hidden: torch.Tensor, batch: TrainBatch, spec: RunSpec
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logprobs `[B, T]` (after `spec`'s rollout temperature) and entropy `[B, T]` of
        the response tokens from their final hidden states `[B, T, H]`."""
        head = self.model.get_base_model().lm_head.weight
        rows, cols = batch.mask.nonzero(as_tuple=True)  # only response tokens: N of them
        lp_flat, ent_flat = token_logprobs_fn(
            hidden[rows, cols],  # [N, H]
            batch.resp_tokens[rows, cols],
            head,
            temperature=spec.rollout.temperature,
            chunk_size=spec.train.logprob_chunk_size,
            compiled=self._compiled,
        )
        lp = torch.zeros(batch.mask.shape, dtype=lp_flat.dtype, device=lp_flat.device)
        ent = torch.zeros(batch.mask.shape, dtype=ent_flat.dtype, device=ent_flat.device)
        return lp.index_put((rows, cols), lp_flat), ent.index_put((rows, cols), ent_flat)

    def token_logprobs(
        self, batch: TrainBatch, share_prompts: bool | None = None, spec: RunSpec | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`hidden_logprobs` of `batch` under the adapter PEFT has active (the base model
        inside `model.disable_adapter()`), at `spec`'s temperature (that adapter's by
        default); differentiable when grad is enabled. `share_prompts` picks the forward
        (by default `shares_prompts(batch)`)."""
        name = self.model.active_adapter
        share = self.shares_prompts(batch) if share_prompts is None else share_prompts
        rows = [Rows(name, batch.to(self.device), share)]
        return self._logprobs(rows, [spec or self.adapters[name].spec], together=False)[0]

    def shares_prompts(self, batch: TrainBatch) -> bool:
        """Whether the prompt-sharing forward (forward.py) pays for `batch`. On the CPU it
        does whenever prompts repeat (bench/cpu_step.py: 27 % of the tokens saved, 12 % of
        the train time). On a GPU the second pass attends through an explicit mask over the
        reordered cache, which costs more than a plain causal forward saves unless the
        shared prompts are at least half of the tokens (bench/gpu/multi.py, 128-token
        prompts of 1024: 0.59 s a step shared against 0.40 s plain). Never with activation
        checkpointing: the shared forward writes a KV cache that a recompute would write
        again."""
        if self._checkpointed:
            return False
        if self._compiled:
            # The shared forward threads a KV cache through the layers, and each compiled
            # layer reads its own slot of it (`past_key_values.layers[layer_idx]`, guarded on
            # `is_initialized`): a recompile per layer, past dynamo's limit, and the rest of
            # the layers eager. The plain forward (use_cache=False) is one graph for all.
            return False
        lens = batch.prompt_len.tolist()
        distinct = {tuple(batch.input_ids[i, :n].tolist()) for i, n in enumerate(lens)}
        saved = sum(lens) - sum(len(p) for p in distinct)
        if saved == 0:
            return False
        if self.device.type == "cpu":
            return True
        return saved >= 0.5 * float(batch.attention_mask.sum())

    # ---------------------------------------------------------------- the step

    def train_step(self, adapter: Adapter, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step of `adapter` over `batch`, in micro-batches whose gradients
        accumulate. Loss denominators are those of the whole batch, so the result does not
        depend on the micro-batch size."""
        (out,) = self._step([(adapter, batch)], together=False)
        if isinstance(out, Exception):
            raise out
        self.together[1] += 1
        return out

    def train_steps(
        self, steps: list[tuple[Adapter, TrainBatch]]
    ) -> list[dict[str, float] | Exception]:
        """One optimizer step of each adapter on its own batch: with several that
        `can_batch`, one forward and backward over all their rows; else, or if that fails,
        one adapter's step at a time, so a batch that fails fails alone. Each one's metrics,
        or the exception of its step."""
        if len(steps) > 1 and self.can_batch([a for a, _ in steps]):
            try:
                out = self._step(steps, together=True)
                self.together[len(steps)] += 1
                return out
            except Exception as exc:  # e.g. one run's batch: find it by stepping each alone
                name = type(exc).__name__
                log.warning("batched train step failed (%s: %s); each adapter alone", name, exc)
        out = []
        for adapter, batch in steps:
            try:
                out.append(self.train_step(adapter, batch))
            except Exception as exc:
                out.append(exc)
        return out

    def can_batch(self, adapters: list[Adapter]) -> bool:
        """Whether these adapters' steps can go in one forward as the solo step's function:
        one process, PEFT's LoRA linears (no DoRA or other variants), and no stacked
        layers, activation checkpointing or compiled layers."""
        if self.stacked or self._checkpointed or self._compiled:
            return False
        one = isinstance(self.parallel, OneProcess)
        return one and splits_rows(self.model, {a.name for a in adapters})

    def _step(self, steps, together: bool) -> list[dict[str, float] | Exception]:
        if not together:
            self.activate(steps[0][0])
        limits = [a.spec.train.mult_prob_error_samples for a, _ in steps]
        stale = self._stale_sums(steps, together, limits)  # before: the adapters as published
        parts = [self._part(adapter, batch, together) for adapter, batch in steps]
        if not self.model.training:  # .train() walks every module (thousands with LoRA):
            self.model.train()  # milliseconds of host time at each step's start
        with self._trainable(parts, together):
            for part in parts:
                part.adapter.zero_grads()
            with self._backward_context():
                for i in range(max(part.n_micro for part in parts)):
                    self._micro([p for p in parts if i < p.n_micro], i, together)
        out: list[dict[str, float] | Exception] = []
        for part, sums in zip(parts, stale, strict=True):  # each one's own optimizer
            try:
                out.append(self._apply(part, sums, together))
            except Exception as exc:
                if not together:
                    raise
                out.append(exc)
        return out

    def _part(self, adapter: Adapter, batch: TrainBatch, together: bool) -> _Part:
        spec = adapter.spec
        # one choice for the whole batch, so every rank of a sharded policy runs the same
        # forwards
        share = self.shares_prompts(batch)
        batch = batch.to(self.device)
        local, n_micro = self.parallel.part(batch, spec.train.micro_batch_size)
        return _Part(
            adapter,
            batch,
            local,
            n_micro,
            share,
            AggNorm.of(batch.mask, max_len=spec.response_tokens_max()),
            adapter.version,
            # With one optimizer step per batch, the training forward runs at exactly
            # π_old's parameters, so π_old is that forward, detached, unless dropout makes
            # it differ.
            separate_old=not spec.algorithm.bypass_mode and spec.lora.dropout > 0,
            gen=adapter.rng.generator() if together else None,
        )

    @contextlib.contextmanager
    def _trainable(self, parts: list[_Part], together: bool):
        """The step's adapters trainable, each drawing from its own random stream: alone,
        the active adapter with the global streams set to its own (PEFT's dropout draws from
        them); together, every one of them (their row blocks draw from their generators)."""
        if not together:
            with parts[0].adapter.rng.installed():
                yield
            return
        for part in parts:
            for p in part.adapter.params:
                p.requires_grad_(True)
        try:
            yield
        finally:
            active = self.model.active_adapter
            for part in parts:
                for p in part.adapter.params:
                    p.requires_grad_(part.adapter.name == active)

    def _micro(self, parts: list[_Part], i: int, together: bool) -> None:
        """Micro-batch i of each part: one forward with grad, the no-grad forwards some
        need (π_old in eval mode with dropout and not bypass; the base model for the KL
        term), each one's own loss; one backward of their sum; each one's metrics."""
        items = []
        for part in parts:
            mb, counted = _micro_batch(part.local, part.batch, i, part.adapter.spec)
            # a rank whose share ran out repeats a micro-batch at weight 0 (counted false):
            # every rank must run the same forwards, as each one gathers the sharded layers
            items.append((part, mb, self.parallel.loss_scale if counted else 0.0))
        specs = [p.adapter.spec for p, _, _ in items]
        lps = self._logprobs([Rows(p.adapter.name, mb, p.share, p.gen) for p, mb, _ in items],
                             specs, together)  # fmt: skip
        old = [k for k, (p, _, _) in enumerate(items) if p.separate_old]
        ref = [k for k, spec in enumerate(specs) if spec.algorithm.kl_coef > 0]
        lp_old, lp_ref = {}, {}
        with torch.no_grad():
            if old:
                self.model.eval()  # π_old without dropout
                try:
                    lp_old = self._no_grad_logprobs(items, old, together, adapter=True)
                finally:
                    self.model.train()
            if ref:  # the base model: the same weights with the adapters off, no second copy
                lp_ref = self._no_grad_logprobs(items, ref, together, adapter=False)
        total = None
        for k, ((part, mb, scale), (lp, ent)) in enumerate(zip(items, lps, strict=True)):
            algo = specs[k].algorithm
            lp_o = None if algo.bypass_mode else lp_old.get(k, lp.detach())
            same = (mb.versions == part.version).to(mb.mask.dtype)
            loss, metrics = grpo_loss(
                LossInputs(lp, mb.lp_roll, mb.advantages, mb.mask, lp_o, lp_ref.get(k), ent, same),
                algo,
                part.norm,
            )
            loss = loss if scale == 1.0 else loss * scale
            total = loss if total is None else total + loss
            if scale != 0.0:
                add_metrics(part.sums, part.weights, metrics, mb.mask, same)
        total.backward()

    def _no_grad_logprobs(self, items, which: list[int], together: bool, adapter: bool):
        sub = [items[k] for k in which]
        rows = [Rows(p.adapter.name if adapter else None, mb, p.share) for p, mb, _ in sub]
        lps = self._logprobs(rows, [p.adapter.spec for p, _, _ in sub], together)
        return {k: lp for k, (lp, _) in zip(which, lps, strict=True)}

    def _apply(self, part: _Part, stale: TokenSums | None, together: bool) -> dict[str, float]:
        sums, weights = self.parallel.reduce_metrics(part.sums, part.weights)
        adapter = part.adapter
        self.parallel.sync_grads(adapter.params)
        grad_norm = adapter.optimizer_step()
        adapter.version += 1
        if together:
            adapter.rng.advance(part.gen)
        out = {k: sums[k] / weights[k] for k in sums if weights[k] > 0}
        out["grad_norm"] = float(grad_norm)
        if stale is None:
            return out
        # the stale tokens' check folded in: over the tokens of the version the step began at
        current = (part.batch.versions == part.version).to(part.batch.mask.dtype)
        return merge(out, (part.batch.mask * current).sum().item(), stale)

    # ---------------------------------------------------------------- stale tokens

    def stale_sums(self, adapter: Adapter, batch: TrainBatch, limit: int) -> TokenSums:
        """The stale-token check alone (version_check.py): the metrics' sums over the tokens
        of `batch` of a version other than the adapter's current one but in its history,
        each under a forward of its own version's adapter, over at most `limit` samples
        spread evenly over the batch; every adapter then as it was, bit for bit."""
        self.activate(adapter)
        (out,) = self._stale_sums([(adapter, batch)], False, [limit])
        return out or TokenSums.empty()

    @torch.no_grad()
    def _stale_sums(self, steps, together: bool, limits: list[int]) -> list[TokenSums | None]:
        """Each adapter's stale-token sums (None where its limit is 0): per round k, each
        adapter holding its k-th older version, each one's micro-batches (as its batch
        alone splits them; under a sharded policy this rank's share of them) in forwards
        together. The cost of a check is a forward of a few samples: its ops, not its rows."""
        out: list[TokenSums | None] = []
        picks = {}
        for k, ((adapter, batch), limit) in enumerate(zip(steps, limits, strict=True)):
            out.append(TokenSums.empty() if limit > 0 else None)
            pick = stale_pick(batch, adapter.history, adapter.version, limit) if limit else None
            if pick is not None:
                part, versions = pick
                # one choice for every rank and micro-batch
                picks[k] = (adapter, part, versions, self.shares_prompts(part))
        if not picks:
            return out
        # a CPU copy of each current adapter (under FSDP a collective)
        restore = {k: self.adapter_tensors(a) for k, (a, *_) in picks.items()}
        was_training = self.model.training
        self.model.eval()  # no dropout: the engine samples without it
        try:
            for r in range(max(len(versions) for _, _, versions, _ in picks.values())):
                jobs = []
                for k, (adapter, part, versions, share) in picks.items():
                    if r < len(versions):
                        v = versions[r]
                        self.parallel.load_adapter_tensors(adapter, adapter.history.get(v))
                        own = of_version(part, v)
                        mine, n = self.parallel.part(own, adapter.spec.train.micro_batch_size)
                        jobs.append((k, adapter, v, own, mine, n, share))
                for i in range(max(job[5] for job in jobs)):
                    self._stale_micro([job for job in jobs if i < job[5]], i, together, out)
        finally:
            for k, (adapter, *_) in picks.items():
                self.parallel.load_adapter_tensors(adapter, restore[k])
            self.model.train(was_training)
        for k in picks:  # a sharded policy's ranks each checked a share: the sums added up
            sums, tokens = self.parallel.reduce_metrics(
                out[k].sums, dict.fromkeys(METRICS, out[k].tokens)
            )
            out[k] = TokenSums(dict(sums), tokens[METRICS[0]])
        return out

    def _stale_micro(self, jobs, i: int, together: bool, out: list) -> None:
        items = []
        for k, adapter, v, own, mine, _, share in jobs:
            mb, counted = _micro_batch(mine, own, i, adapter.spec)  # a repeat: not counted
            items.append((k, adapter, v, mb.to(self.device), share, counted))
        rows = [Rows(a.name, mb, share) for _, a, _, mb, share, _ in items]
        lps = self._logprobs(rows, [a.spec for _, a, *_ in items], together)
        for (k, _, v, mb, _, counted), (lp, _) in zip(items, lps, strict=True):
            if counted:
                out[k].add(mb.lp_roll, lp, mb.mask * (mb.versions == v).to(mb.mask.dtype))

    # ---------------------------------------------------------------- compile warm-up

    def warm_compiled(self) -> bool:
        """With train.compile: compile now every graph a train step will use, so that no
        compile happens once the async driver runs this policy's step in one thread and the
        engine decodes in another (torch.compile is not thread-safe: while one thread traces,
        FX's tracing flag and its patch of `nn.Module.__call__` are process-wide, and the
        other thread's compiled call fails with "Detected that you are using FX to
        symbolically trace a dynamo-optimized function"). The forward with grad and its
        backward; the no-grad forwards a step may run, each its own guards: in eval mode
        (π_old with dropout, the stale tokens' check of token_mult_prob_error) and with the
        adapter off (the KL reference). Each at the shapes that get graphs of their own:
        one row (dynamo specialises size 1), one response token (a logprob chunk of one
        row), and more rows with and without padding (no padding: no attention mask). No
        optimizer step, and the random state is put back: the run is the one it would be.
        False (and nothing done) without train.compile."""
        if not self._compiled:
            return False
        spec = self.adapter.spec
        algo, t = spec.algorithm, spec.train
        dropout_old = spec.lora.dropout > 0 and not algo.bypass_mode
        evaluates = t.mult_prob_error_samples > 0 or dropout_old
        self.activate(self.adapter)
        cpu_rng = torch.random.get_rng_state()
        cuda = self.device.type == "cuda"
        gpu_rng = torch.cuda.get_rng_state(self.device) if cuda else None
        try:
            for shape in ((1, 5, 4, False), (1, 6, 1, False), (2, 7, 6, True), (2, 6, 6, False)):
                batch = _warm_batch(*shape, self.tokenizer.pad_token_id)
                self.model.train()
                with self._backward_context():
                    lp, _ = self.token_logprobs(batch, share_prompts=False)
                    lp.sum().backward()
                with torch.no_grad():
                    if algo.kl_coef > 0:
                        with self.model.disable_adapter():
                            self.token_logprobs(batch, share_prompts=False)
                    if evaluates:
                        self.model.eval()
                        self.token_logprobs(batch, share_prompts=False)
        finally:
            self.adapter.optimizer.zero_grad(set_to_none=True)
            self.model.train()
            torch.random.set_rng_state(cpu_rng)
            if gpu_rng is not None:
                torch.cuda.set_rng_state(gpu_rng, self.device)
        return True

    # ---------------------------------------------------------------- adapter I/O
    # (`adapter`: the policy's own by default, a run alone's)

    def adapter_tensors(self, adapter: Adapter | None = None) -> dict[str, torch.Tensor]:
        """The adapter's tensors on the CPU (under FSDP2 a collective: every rank calls it)."""
        return self.parallel.adapter_tensors(adapter or self.adapter)

    def adapter_snapshot(self, adapter: Adapter | None = None) -> dict[str, torch.Tensor]:
        """A copy of the adapter for an engine to load, on the trainer's device."""
        return self.parallel.adapter_snapshot(adapter or self.adapter, self.device)

    def load_adapter_tensors(
        self, tensors: dict[str, torch.Tensor], version: int, adapter: Adapter | None = None
    ) -> None:
        adapter = adapter or self.adapter
        self.parallel.load_adapter_tensors(adapter, tensors)
        adapter.version = version

    def optimizer_state(self, adapter: Adapter | None = None) -> dict:
        return self.parallel.optimizer_state((adapter or self.adapter).optimizer)

    def load_optimizer_state(self, state: dict, adapter: Adapter | None = None) -> None:
        adapter = adapter or self.adapter
        self.parallel.load_optimizer_state(adapter.optimizer, state)
        if adapter.graph is not None:  # the moments are new tensors: capture again
            adapter.graph.reset()


@dataclass
class _Part:
    """One adapter's share of a step."""

    adapter: Adapter
    batch: TrainBatch  # on the device, all of it
    local: TrainBatch  # this process's share
    n_micro: int
    share: bool  # its batch takes the prompt-sharing forward (shares_prompts)
    norm: AggNorm
    version: int  # the adapter's at the step's start
    separate_old: bool  # π_old is a forward of its own (dropout, not bypass)
    gen: torch.Generator | None  # its dropout stream, together with other adapters
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    weights: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def _micro_batch(
    mine: TrainBatch, whole: TrainBatch, i: int, spec: RunSpec
) -> tuple[TrainBatch, bool]:
    """Micro-batch i of this process's share `mine` of `whole`, and whether it counts: past
    the end of its share (a rank of a sharded policy with less to do) the first of `whole`
    again, only so that every rank runs the same forwards."""
    size = spec.train.micro_batch_size
    mb = mine.slice(i * size, (i + 1) * size)
    return (mb, True) if len(mb) else (whole.slice(0, size), False)


def add_metrics(sums, weights, metrics, mask: torch.Tensor, same: torch.Tensor) -> None:
    """A micro-batch's metrics into the step's sums and weights: the additive ones (losses,
    already over full-batch denominators) added, the others token-weighted (the stale-token
    check's over the current version's tokens `same`)."""
    n_tok = mask.sum().item()
    n_same = (mask * same).sum().item()
    for k, v in metrics.items():
        if k in ADDITIVE_METRICS:
            sums[k] += v
            weights[k] = 1.0
        else:  # token-weighted mean across micro-batches
            w = n_same if k in ("token_mult_prob_error", "gen_kl_error") else n_tok
            sums[k] += v * w
            weights[k] += w


# The compiled layer's graphs, each its own guards (seen on an H200 with TORCH_LOGS=
# recompiles): one row (size 1 is specialised), rows with padding, rows without (no
# attention mask); with grad, each twice (the first layer's input needs no grad, the
# others' do), and without grad in eval mode and with the adapter off: 3 · (2 + 1 + 1).
# 12 in all, and room for a few more.
_LAYER_GRAPHS = 16


def _warm_batch(rows: int, prompt: int, response: int, ragged: bool, pad_id: int) -> TrainBatch:
    """`rows` samples of distinct prompts (token ids 3..), every other response a token
    shorter where `ragged` (padding): warm-up input only."""
    lengths = [response - (ragged and r % 2) for r in range(rows)]
    samples = [
        TrainSample(
            [3 + (r + i) % 20 for i in range(prompt)],
            [4 + (r * i) % 20 for i in range(n)],
            [-1.0] * n,
            [0] * n,
            1.0 - r,
        )
        for r, n in enumerate(lengths)
    ]
    return collate(samples, pad_id)
