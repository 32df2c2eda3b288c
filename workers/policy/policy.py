"""The trainer's policy: a causal LM with a LoRA adapter, its optimizer, and one GRPO step."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from pathlib import Path

import torch

from ..grpo import ADDITIVE_METRICS, AggNorm, LossInputs, grpo_loss
from ..spec import RunSpec
from . import lora as lora_io
from .batch import TrainBatch, TrainSample, collate
from .checkpointing import checkpoint_layers
from .fused_logprobs import token_logprobs as token_logprobs_fn
from .layer_graphs import LayerGraphs
from .mixed_precision import bf16_autocast, tuner_layers, uncast_inputs
from .optimizer_graph import OptimizerGraph
from .parallel import OneProcess, Parallelism
from .stacked_lora import stack_layers


def pick_device(spec: RunSpec) -> torch.device:
    return torch.device(
        "cuda" if spec.resources.trainer_gpus > 0 and torch.cuda.is_available() else "cpu"
    )


class LoraPolicy:
    """Holds the model, the optimizer and `adapter_version`, which increases by one with every
    optimizer step and names the adapter the engine must acknowledge before serving it.
    `parallel` is how the step spreads over processes (parallel.py; fsdp.py for FSDP2)."""

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        device: torch.device | None = None,
        parallel: Parallelism | None = None,
        stack_lora: bool | None = None,
        layer_graphs: bool = False,
        optimizer_graph: bool | None = None,
    ):
        """`stack_lora`: run the LoRA linears stacked (stacked_lora.py) with the fused AdamW;
        by default on a GPU in one process. False: PEFT's own layers and the foreach AdamW,
        the step as it was before both (the benchmarks' baseline). `layer_graphs`: with
        train.compile, replay the compiled layers' training forward and backward as CUDA
        graphs (layer_graphs.py), on a GPU in one process without activation checkpointing;
        off by default: measured beside the compiled layers alone after the step's host
        fixes, they did not pay (docs/performance.md). `optimizer_graph`: clip the
        gradients and step AdamW as one CUDA graph replay (optimizer_graph.py); by default
        wherever AdamW is the fused one (a GPU, one process, stacked LoRA), unless layer
        graphs are asked for."""
        self.spec = spec
        self.parallel = parallel or OneProcess()
        self.device = device or pick_device(spec)
        self.tokenizer = lora_io.load_tokenizer(model_dir)
        self.model = lora_io.load_spec_model(model_dir, spec, self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        t = spec.train
        # One process on a GPU: the LoRA linears that read one input run as one matmul
        # (stacked_lora.py: 24 matmuls a layer instead of PEFT's 56) and AdamW is one fused
        # kernel over all adapter tensors instead of a foreach chain. FSDP2 shards the base
        # weights and the parameters (DTensors), so it keeps PEFT's layers and foreach.
        alone = self.device.type == "cuda" and isinstance(self.parallel, OneProcess)
        stack = alone if stack_lora is None else stack_lora
        self.stacked = stack and stack_layers(self._lm_parts()[0].layers)
        fused = alone and stack_lora is not False
        # not beside layer graphs by default: their GPU test (accumulation over micro-batches
        # of two shapes, then a whole step) failed in the one H200 call that ran both, the
        # cause not found (docs/performance.md)
        if optimizer_graph is None:
            optimizer_graph = fused and not (layer_graphs and t.compile)
        graphed_step = optimizer_graph and alone
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=t.lr,
            weight_decay=t.weight_decay,
            betas=t.betas,
            fused=fused or None,
            capturable=graphed_step,  # its step counter on the device, for the capture
        )
        self.adapter_version = 0
        use_bf16 = self.device.type == "cuda" and spec.model.dtype in ("auto", "bfloat16")
        # the PEFT layers whose input cast the bf16 contexts switch off, listed once (PEFT's
        # own switch walks every module on entry and exit: mixed_precision.py)
        self._tuner_layers = tuner_layers(self.model)
        self._autocast = (
            (lambda: bf16_autocast(self.model, self._tuner_layers))
            if use_bf16
            else contextlib.nullcontext
        )
        self._checkpointed = t.activation_checkpointing
        # A checkpointed layer's recompute runs in backward, outside the forward's context:
        # LoRA inputs must stay uncast there too, or the recomputed tensors' dtypes differ
        # from the saved ones (checkpoint refuses that). Autocast the checkpoint restores.
        uncast = use_bf16 and self._checkpointed
        self._backward_context = (
            (lambda: uncast_inputs(self._tuner_layers)) if uncast else contextlib.nullcontext
        )
        if self._checkpointed:
            checkpoint_layers(self._lm_parts()[0].layers)
        self._compiled = t.compile and self.device.type == "cuda"
        self.layer_graphs: LayerGraphs | None = None
        if self._compiled:
            self.compile_layers()
            if layer_graphs and alone and not self._checkpointed:
                self.layer_graphs = LayerGraphs(self._lm_parts()[0].layers, self._graph_ready)
        self.parallel.prepare(self.model)
        # the strategy may have swapped parameters (FSDP2: for DTensors); the optimizer has
        # no state yet and must hold the new ones
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        (group,) = self.optimizer.param_groups
        group["params"] = self.params
        self.optimizer_graph: OptimizerGraph | None = None
        if graphed_step:
            self.optimizer_graph = OptimizerGraph(self.params, self.optimizer, t.grad_clip)
        # one mode for the whole tree: from_pretrained leaves the base model's modules in
        # eval mode while PEFT's new ones (and the root) start in training mode, so the
        # step's check of the root's flag alone would keep the base layers in eval mode
        # (no activation checkpointing, no dropout of theirs)
        self.model.train()

    def compile_layers(self, backend: str = "inductor") -> None:
        """Regional compilation: the layers share one forward, so one compiled graph serves
        all of them (parameters are its inputs); the logprob head compiles its per-chunk
        maths (fused_logprobs.py) and keeps its own matmuls. Dynamic: every step's batch
        has other lengths (automatic dynamic shapes would compile each graph twice to find
        that out). The layers' one code object then has up to _LAYER_GRAPHS graphs, more
        than dynamo's default limit of 8, past which it runs the rest eager."""
        config = torch._dynamo.config
        config.recompile_limit = max(config.recompile_limit, _LAYER_GRAPHS)
        for layer in self._lm_parts()[0].layers:
            layer.compile(backend=backend, dynamic=True)
        self._compiled = True

    def _graph_ready(self) -> bool:
        """Whether the layers compute what their graphs captured: the run's one adapter on
        (not the KL reference's adapter-off forward, nor a pool's other adapters)."""
        m = self._lm_parts()[0].layers[0].self_attn.q_proj
        names = list(getattr(m, "active_adapters", ()))
        return not m.disable_adapters and not m.merged and names == [lora_io.ADAPTER_NAME]

    # ---------------------------------------------------------------- forward passes

    def _lm_parts(self) -> tuple[torch.nn.Module, torch.Tensor]:
        causal_lm = self.model.get_base_model()  # LoRA layers are injected in place
        return causal_lm.model, causal_lm.lm_head.weight

    def token_logprobs(
        self, batch: TrainBatch, share_prompts: bool | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logprobs `[B, T]` (after the rollout temperature) and entropy `[B, T]` of the
        response tokens; differentiable when grad is enabled. `share_prompts` picks the
        forward (see `shares_prompts`; by default decided on `batch` itself)."""
        if share_prompts is None:
            share_prompts = self.shares_prompts(batch)
        with self._autocast():
            hidden = self._response_hidden(batch, share_prompts)  # [B, T, H]
        return self.hidden_logprobs(hidden, batch)

    def hidden_logprobs(
        self, hidden: torch.Tensor, batch: TrainBatch, spec: RunSpec | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`token_logprobs` from the final hidden states `[B, T, H]` of `_response_hidden`,
        at `spec`'s temperature and chunk size (the policy's own by default; a pool's
        batched step passes each run's: workers/policy/multi.py)."""
        spec = spec or self.spec
        _, head = self._lm_parts()
        rows, cols = batch.mask.nonzero(as_tuple=True)  # only response tokens: N of them
        sel = hidden[rows, cols]  # [N, H]
        lp_flat, ent_flat = token_logprobs_fn(
            sel,
            batch.resp_tokens[rows, cols],
            head,
            temperature=spec.rollout.temperature,
            chunk_size=spec.train.logprob_chunk_size,
            compiled=self._compiled,
        )
        lp = torch.zeros(batch.mask.shape, dtype=lp_flat.dtype, device=lp_flat.device)
        ent = torch.zeros(batch.mask.shape, dtype=ent_flat.dtype, device=ent_flat.device)
        lp = lp.index_put((rows, cols), lp_flat)
        ent = ent.index_put((rows, cols), ent_flat)
        return lp, ent

    def shares_prompts(self, batch: TrainBatch) -> bool:
        """Whether the prompt-sharing forward (below) pays for `batch`. On the CPU it does
        whenever prompts repeat (bench/cpu_step.py: 27 % of the tokens saved, 12 % of the
        train time). On a GPU the second pass attends through an explicit mask over the
        reordered cache, which costs more than a plain causal forward saves unless the
        shared prompts are at least half of the tokens (bench/gpu/multi.py, 128-token prompts
        of 1024: 0.59 s a step shared against 0.40 s plain). Never with activation
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

    def _response_hidden(self, batch: TrainBatch, share_prompts: bool = True) -> torch.Tensor:
        """Final hidden states `[B, T, H]` at the positions that predict each response token.

        The G samples of a group share their prompt, so each distinct prompt goes through the
        model once and its KV cache is shared by its samples (the gradient of every sample
        flows back into it). With 6-token prompts and 16-token answers that is a quarter of
        the training FLOPs; with long prompts, most of them."""
        body, _ = self._lm_parts()
        device = batch.input_ids.device
        keys: dict[tuple[int, ...], int] = {}
        owner = []  # [B] → index of the sample's prompt among the distinct ones
        # (read from the batch only when the shared forward may run: on a GPU each row's
        # read is two host syncs, 32 at 16 rows, while the GPU waits at the step's start)
        ids, lens = (
            (batch.input_ids.tolist(), batch.prompt_len.tolist()) if share_prompts else ((), ())
        )
        for row, n in zip(ids, lens, strict=True):
            owner.append(keys.setdefault(tuple(row[:n]), len(keys)))
        uniform = self.parallel.uniform_forward
        if not share_prompts or (len(keys) == len(batch) and not uniform):
            # use_cache=False: no KV cache to build in training; with one, each layer's
            # cache slot was a guard that made train.compile recompile per layer
            hidden = body(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
            ).last_hidden_state  # [B, L, H]
            return hidden.gather(1, batch.resp_pos.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        prompts = list(keys)
        width = max(len(p) for p in prompts)
        p_ids = torch.full((len(prompts), width), self.tokenizer.pad_token_id, dtype=torch.long)
        p_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for u, p in enumerate(prompts):  # left-padded: every prompt ends at column width − 1
            p_ids[u, width - len(p) :] = torch.tensor(p)
            p_mask[u, width - len(p) :] = 1
        p_ids, p_mask = p_ids.to(device), p_mask.to(device)
        own = torch.tensor(owner, device=device)
        out = body(
            input_ids=p_ids,
            attention_mask=p_mask,
            position_ids=(p_mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
        )
        first = out.last_hidden_state[own, -1]  # [B, H]: predicts response token 0
        t = batch.resp_tokens.shape[1]
        if t == 1:
            return first.unsqueeze(1)
        cache = out.past_key_values
        cache.reorder_cache(own)  # [U, …] → [B, …], differentiable (index_select)
        resp_in = batch.resp_tokens[:, : t - 1]  # token j predicts token j + 1
        resp_mask = batch.resp_attn[:, : t - 1].to(p_mask.dtype)
        positions = p_mask.sum(-1)[own].unsqueeze(1) + torch.arange(t - 1, device=device)
        rest = body(
            input_ids=resp_in,
            attention_mask=torch.cat([p_mask[own], resp_mask], dim=1),
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state  # [B, T − 1, H]
        return torch.cat([first.unsqueeze(1), rest], dim=1)

    @torch.no_grad()
    def _reference_logprobs(self, batch: TrainBatch, share: bool) -> torch.Tensor:
        # The base model is the same weights with the adapter switched off: no second copy.
        with self.model.disable_adapter():
            return self.token_logprobs(batch, share)[0]

    @torch.no_grad()
    def _old_logprobs(self, batch: TrainBatch, share: bool) -> torch.Tensor:
        self.model.eval()  # π_old without dropout
        try:
            return self.token_logprobs(batch, share)[0]
        finally:
            self.model.train()

    # ---------------------------------------------------------------- the step

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step over `batch`, in micro-batches whose gradients accumulate.
        Loss denominators are those of the whole batch, so the result does not depend on
        the micro-batch size."""
        algo, t = self.spec.algorithm, self.spec.train
        share = self.shares_prompts(batch)  # one choice for the whole batch, so every rank
        batch = batch.to(self.device)  # of a sharded policy runs the same forwards
        norm = AggNorm.of(batch.mask, max_len=self.spec.rollout.max_new_tokens)
        # With one optimizer step per batch, the training forward runs at exactly π_old's
        # parameters, so π_old is that forward, detached — unless dropout makes it differ.
        separate_old = not algo.bypass_mode and self.spec.lora.dropout > 0
        if not self.model.training:  # .train() walks every module (thousands with LoRA):
            self.model.train()  # milliseconds of host time at each step's start
        # with layer graphs or the optimizer's graph the gradients stay (views of one
        # buffer: layer_graphs.py, optimizer_graph.py) and are zeroed in place
        if self.optimizer_graph is not None:
            self.optimizer_graph.zero_grads()
        else:
            self.optimizer.zero_grad(set_to_none=self.layer_graphs is None)
        sums: dict[str, float] = defaultdict(float)
        weights: dict[str, float] = defaultdict(float)
        part, n_micro = self.parallel.part(batch, t.micro_batch_size)
        with self._backward_context():
            self._accumulate(batch, part, n_micro, share, norm, separate_old, sums, weights)
        sums, weights = self.parallel.reduce_metrics(sums, weights)
        self.parallel.sync_grads(self.params)
        if self.optimizer_graph is not None:
            grad_norm = self.optimizer_graph.step()
        else:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, t.grad_clip)
            self.optimizer.step()
        self.adapter_version += 1
        out = {k: sums[k] / weights[k] for k in sums if weights[k] > 0}
        out["grad_norm"] = float(grad_norm)
        return out

    def _accumulate(self, batch, part, n_micro, share, norm, separate_old, sums, weights) -> None:
        """The micro-batches' forwards and backwards: gradients accumulate in the adapter,
        metrics in `sums` and `weights`."""
        algo, t = self.spec.algorithm, self.spec.train
        for i in range(n_micro):
            start = i * t.micro_batch_size
            mb = part.slice(start, start + t.micro_batch_size)
            # a rank whose share ran out repeats a micro-batch at weight 0: every rank must
            # run the same number of forwards, as each one gathers the sharded layers
            scale = self.parallel.loss_scale if len(mb) else 0.0
            mb = mb if len(mb) else batch.slice(0, t.micro_batch_size)
            lp, ent = self.token_logprobs(mb, share)
            lp_old = None
            if not algo.bypass_mode:
                lp_old = self._old_logprobs(mb, share) if separate_old else lp.detach()
            lp_ref = self._reference_logprobs(mb, share) if algo.kl_coef > 0 else None
            same = (mb.versions == self.adapter_version).to(mb.mask.dtype)
            loss, metrics = grpo_loss(
                LossInputs(lp, mb.lp_roll, mb.advantages, mb.mask, lp_old, lp_ref, ent, same),
                algo,
                norm,
            )
            (loss * scale).backward()
            if scale == 0.0:
                continue
            add_metrics(sums, weights, metrics, mb.mask, same)

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
        algo, t = self.spec.algorithm, self.spec.train
        evaluates = t.mult_prob_error_samples > 0 or (
            self.spec.lora.dropout > 0 and not algo.bypass_mode
        )
        cpu_rng = torch.random.get_rng_state()
        cuda = self.device.type == "cuda"
        gpu_rng = torch.cuda.get_rng_state(self.device) if cuda else None
        try:
            for shape in ((1, 5, 4, False), (1, 6, 1, False), (2, 7, 6, True), (2, 6, 6, False)):
                batch = _warm_batch(*shape, self.tokenizer.pad_token_id).to(self.device)
                self.model.train()
                with self._backward_context():
                    lp, _ = self.token_logprobs(batch, share_prompts=False)
                    lp.sum().backward()
                if algo.kl_coef > 0:
                    self._reference_logprobs(batch, False)
                if evaluates:
                    self._old_logprobs(batch, False)  # eval mode, no grad
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.model.train()
            torch.random.set_rng_state(cpu_rng)
            if gpu_rng is not None:
                torch.cuda.set_rng_state(gpu_rng, self.device)
        return True

    # ---------------------------------------------------------------- adapter I/O

    def adapter_tensors(self) -> dict[str, torch.Tensor]:
        """The adapter's tensors on the CPU (under FSDP2 a collective: every rank calls it)."""
        return self.parallel.adapter_tensors()

    def adapter_snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the adapter for an engine to load."""
        return self.parallel.adapter_snapshot(self.device)

    def load_adapter_tensors(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        self.parallel.load_adapter_tensors(tensors)
        self.adapter_version = version

    def save_adapter(self, out: str | Path) -> Path:
        return self.parallel.save_adapter(Path(out), self.adapter_version)

    def load_adapter_dir(self, path: str | Path) -> None:
        tensors, version = lora_io.read_adapter_dir(path)
        self.load_adapter_tensors(tensors, version)

    def optimizer_state(self) -> dict:
        return self.parallel.optimizer_state(self.optimizer)

    def load_optimizer_state(self, state: dict) -> None:
        self.parallel.load_optimizer_state(self.optimizer, state)
        if self.optimizer_graph is not None:  # the moments are new tensors: capture again
            self.optimizer_graph.reset()


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
# The layer graphs' capture (layer_graphs.py) runs under autocast without its cache: up to
# two more. 16 in all.
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
