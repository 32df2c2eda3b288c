"""One trainer process, one base model in memory, many runs' LoRA adapters.

Each run is a named PEFT adapter on the shared model with its own optimizer (and its
state), torch RNG stream, step counter and adapter version. A step for run A activates A's
adapter (PEFT's `set_adapter`: only A's LoRA layers take part in the forward, only A's
parameters require grad), then runs the single-run GRPO step of `LoraPolicy` with A's spec,
parameters and optimizer bound to it: the same code as a run alone, so A's update is the one
a solo `LoraPolicy` computes for the same batch, seed and starting state. Nothing of another
run moves: its parameters get no gradient and its optimizer is not stepped.

What must match between runs (checked at admission): what the base model and the host
policy fix (model path, dtype, activation checkpointing, compile). What may differ: LoRA
rank, alpha, dropout and target modules, the algorithm, learning rate and other train
settings, the rollout temperature and lengths the loss normalises by.

Adapters are exported (`adapter_update`, `save`) in the format of a run alone: PEFT file
keys without the adapter's name, so a pooled run's checkpoint resumes a solo run and the
engines load its directories as they are (rollout/adapter_files.py).

Several runs in one step (`train_steps`): their batches' rows go through the base model in
one forward and one backward, each row under its own run's adapter. Each LoRA linear
computes the base matmul over every row once, then each run's B·A·x over that run's block of
rows (contiguous slices: its rows, and its own columns, the width its batch has alone), so
a run's rows get exactly its adapter's output and its adapter's gradient comes from its rows
only (a NaN in one run stays in that run's rows). Each run keeps its own loss (its
algorithm, normalisation, temperature, micro-batches), the losses are summed for one
backward (the adapters are disjoint: each one's gradient is the one its own loss gives), and
each run's own optimizer steps. LoRA dropout draws from the run's own stream with the shapes
its batch has alone (a generator per run, `bernoulli_` as `F.dropout` draws on the CPU), so
on the CPU a run's masks are those of its solo step: its update equals a solo step's to
fp32 rounding (the matmuls see other shapes), dropout included. On a GPU the masks come
from the run's own CUDA stream but are not the fused dropout kernel's of a solo step (same
distribution, other draws). Micro-batch i of the step is micro-batch i of every run (a
run's micro-batching is its own, so the forward holds up to one micro-batch per run).
PEFT's own mixed-adapter batch (`adapter_names=`) is not used: it gathers rows by index
lists, draws dropout from the global stream over the padded width, and would need the
run's columns anyway. Where the per-row forward is not the solo function (the stacked LoRA
layers of a GPU, activation checkpointing, which would redraw dropout in its recompute,
compiled layers, DoRA or LoRA on other than linear layers), the runs step one at a time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import types
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from peft.tuners.lora.layer import Linear as LoraLinear
from peft.tuners.lora.layer import LoraLayer
from peft.utils import get_peft_model_state_dict

from ..grpo import AggNorm, LossInputs, grpo_loss
from ..pool.key import trainer_key
from ..rollout.adapter_files import peft_config
from ..rollout.base import AdapterUpdate
from ..spec import RunSpec
from . import lora as lora_io
from .batch import TrainBatch
from .parallel import OneProcess
from .policy import LoraPolicy, add_metrics

log = logging.getLogger(__name__)

STATE_FILE = "run_state.json"


@dataclass
class RunAdapter:
    """One run's training state beside the shared base model."""

    run_id: str
    adapter: str  # the PEFT adapter's name in the shared model
    spec: RunSpec
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    rng: torch.Tensor  # this run's torch CPU generator state
    cuda_rng: torch.Tensor | None = None
    adapter_version: int = 0
    step: int = 0
    index: dict[str, torch.Tensor] = field(default_factory=dict)  # PEFT file key → parameter
    # the adapters it published lately, by version (the stale-token check's; version_check.py)
    history: object | None = None


class MultiLoraTrainer:
    """Runs' adapters on one `LoraPolicy`'s model. The host policy's own adapter
    (`default`, from `base_spec`) is a placeholder that no run trains."""

    def __init__(
        self,
        base_spec: RunSpec,
        model_dir: str | Path,
        device: torch.device | None = None,
        batched: bool = True,
    ):
        """`batched`: `train_steps` of several runs as one forward and backward where the
        per-row forward is the solo function (see the module's docstring); False: one run
        after the other, each a solo step (the pool's trainer before batching)."""
        self.batched = batched
        self.together: Counter[int] = Counter()  # steps by how many runs each took together
        self.base_spec = base_spec
        self.model_dir = str(model_dir)
        self.policy = LoraPolicy(base_spec, model_dir, device)
        self.device = self.policy.device
        self.model = self.policy.model
        self.runs: dict[str, RunAdapter] = {}
        self._names = 0
        # the host's own binding, restored after each run's step
        self._host = (
            self.policy.spec,
            self.policy.params,
            self.policy.optimizer,
            self.policy.adapter_version,
        )
        for p in self.policy.params:  # the placeholder never trains
            p.requires_grad_(False)

    # ---------------------------------------------------------------- admission

    def add_run(self, run_id: str, spec: RunSpec) -> RunAdapter:
        """A fresh adapter for the run, initialised as a run alone initialises its own (the
        run's seed draws the A matrices; B starts at zero)."""
        if run_id in self.runs:
            raise ValueError(f"trainer pool: run {run_id!r} is already in the pool")
        mine, host = trainer_key(spec), trainer_key(self.base_spec)  # the pool key's part
        differ = [k for k in host if mine[k] != host[k]]
        if differ:
            raise ValueError(
                f"trainer pool: run {run_id!r} differs from the pool in {', '.join(differ)}: "
                "runs of one trainer share the base model and its setup"
            )
        name = f"pool{self._names}"  # PEFT module keys: no dots, nothing like "lora_"
        self._names += 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            self.model.add_adapter(name, lora_io.lora_config(spec.lora))
        index = get_peft_model_state_dict(self.model, adapter_name=name)
        params = [p for n, p in self.model.named_parameters() if f".{name}." in n]
        for p in params:
            p.requires_grad_(False)  # trainable only while its run's step runs
        t = spec.train
        optimizer = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay, betas=t.betas)
        gen = torch.Generator().manual_seed(spec.seed)
        cuda_rng = None
        if self.device.type == "cuda":
            with torch.random.fork_rng(devices=[self.device]):
                torch.cuda.manual_seed(spec.seed)
                cuda_rng = torch.cuda.get_rng_state(self.device)
        run = RunAdapter(run_id, name, spec, params, optimizer, gen.get_state(), cuda_rng)
        run.index = index
        from ..loop.version_check import AdapterHistory  # the loop imports the policy

        run.history = AdapterHistory(spec.async_.max_staleness if spec.async_.enabled else 0)
        self.runs[run_id] = run
        return run

    def remove_run(self, run_id: str) -> None:
        """Drop the run's adapter and optimizer (checkpoint it first)."""
        run = self._run(run_id)
        self.model.delete_adapter(run.adapter)
        del self.runs[run_id]

    # ---------------------------------------------------------------- the step

    def train_step(self, run_id: str, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step of `run_id`'s adapter on `batch` (its own samples)."""
        run = self._run(run_id)
        stale = self._stale_sums(run, batch)
        version = run.adapter_version
        with self._bound(run), self._own_rng(run):
            metrics = self.policy.train_step(batch)
            run.adapter_version = self.policy.adapter_version
        run.step += 1
        return _with_stale(metrics, batch, version, stale)

    def _stale_sums(self, run: RunAdapter, batch: TrainBatch):
        """The stale-token check of a run alone (loop/version_check.py): before the step,
        up to `train.mult_prob_error_samples` samples whose tokens came from an older
        version the run published, each under that version's adapter (copied into the
        run's adapter, then its current one back), no dropout. None when it is off."""
        if run.spec.train.mult_prob_error_samples <= 0:
            return None
        from ..loop.version_check import TokenSums, stale_token_sums

        older = [v for v in run.history.versions() if v != run.adapter_version]
        if not older or not torch.isin(batch.versions, torch.tensor(older)).any():
            return TokenSums.empty()  # nothing stale to check: no adapter switch

        with self._bound(run):  # the host policy computes with the run's spec and adapter
            return stale_token_sums(
                _RunPolicy(self, run), batch, run.history, run.spec.train.mult_prob_error_samples
            )

    def _stale_together(self, batches: dict[str, TrainBatch]) -> dict:
        """Each run's stale-token check (`_stale_sums`) for a batched step: the samples and
        versions a run alone would check, each run's adapter at its k-th older version in
        its own adapter for round k, one no-grad forward a round (and micro-batch) over
        every run's samples of that round, each under its own adapter (the check of a run
        alone is a forward of a few samples: its cost is the forward's ops, not its rows).
        Then each run's current adapter back, bit for bit."""
        from ..loop.version_check import TokenSums, of_version, stale_pick

        out: dict[str, TokenSums | None] = {}
        picks = {}
        for run_id, batch in batches.items():
            run = self._run(run_id)
            limit = run.spec.train.mult_prob_error_samples
            out[run_id] = TokenSums.empty() if limit > 0 else None
            pick = stale_pick(batch, run.history, run.adapter_version, limit) if limit else None
            if pick is not None:
                part, versions = pick
                picks[run_id] = (part, versions, self.policy.shares_prompts(part))
        if not picks:
            return out
        restore = {r: self.adapter_tensors(r) for r in picks}
        was_training = self.model.training
        self.model.eval()  # no dropout: the engine samples without it
        try:
            with torch.no_grad(), self._rows_lora():
                for k in range(max(len(versions) for _, versions, _ in picks.values())):
                    jobs = []
                    for run_id, (part, versions, share) in picks.items():
                        if k < len(versions):
                            run, v = self._run(run_id), versions[k]
                            lora_io.copy_into(run.index, run.history.get(v), f"run {run_id!r}: ")
                            jobs.append((run, v, of_version(part, v), share))
                    self._stale_round(jobs, out)
        finally:
            for run_id, tensors in restore.items():
                lora_io.copy_into(self._run(run_id).index, tensors, f"run {run_id!r}: ")
            self.model.train(was_training)
        return out

    def _stale_round(self, jobs, out: dict) -> None:
        """One round of `_stale_together`: jobs (run, version, its samples of that version,
        whether they share prompts), each run's adapter holding that version; each run's
        micro-batches as a run alone splits them, the i-th of every run in one forward."""
        p = self.policy
        sizes = [run.spec.train.micro_batch_size for run, *_ in jobs]
        micros = [-(-len(own) // n) for (_, _, own, _), n in zip(jobs, sizes, strict=True)]
        for i in range(max(micros)):
            now = [
                (run, v, own.slice(i * n, (i + 1) * n).to(self.device), share)
                for (run, v, own, share), n, m in zip(jobs, sizes, micros, strict=True)
                if i < m
            ]
            with p._autocast():
                hidden = self._hidden([(run.adapter, None, mb, share) for run, _, mb, share in now])
            for (run, v, mb, _), h in zip(now, hidden, strict=True):
                lp, _ = p.hidden_logprobs(h, mb, run.spec)
                out[run.run_id].add(mb.lp_roll, lp, mb.mask * (mb.versions == v).to(mb.mask.dtype))

    def train_steps(
        self, batches: dict[str, TrainBatch]
    ) -> dict[str, dict[str, float] | Exception]:
        """One optimizer step of each run in `batches` (run id → its own samples): with
        more than one run and `batched`, one forward and backward over all their rows (see
        the module's docstring); else, or if that step fails, one run's step at a time, so
        a run whose batch fails fails alone. Each run's metrics, or the exception of its
        step."""
        out: dict[str, dict[str, float] | Exception] = {}
        if len(batches) > 1 and self.can_batch(list(batches)):
            try:
                out = self._step_together(batches)
                self.together[len(batches)] += 1
                return out
            except Exception as exc:  # e.g. one run's batch: find it by stepping each alone
                name = type(exc).__name__
                log.warning("batched train step failed (%s: %s); each run alone", name, exc)
        for run_id, batch in batches.items():
            try:
                out[run_id] = self.train_step(run_id, batch)
            except Exception as exc:
                out[run_id] = exc
            self.together[1] += 1
        return out

    def can_batch(self, run_ids: list[str]) -> bool:
        """Whether these runs' steps can go in one forward with the solo step's function:
        PEFT's LoRA linears (no DoRA or other variants), one process, no stacked layers,
        activation checkpointing or compiled layers."""
        p = self.policy
        if not self.batched or p.stacked or p._checkpointed or p._compiled:
            return False
        if not isinstance(p.parallel, OneProcess):
            return False
        names = {self._run(r).adapter for r in run_ids}
        for m in self.model.modules():
            mine = isinstance(m, LoraLayer) and names & set(m.lora_A.keys())
            if mine and (type(m) is not LoraLinear or m.merged or names & set(m.lora_variant)):
                return False
        return True

    def _step_together(
        self, batches: dict[str, TrainBatch]
    ) -> dict[str, dict[str, float] | Exception]:
        p = self.policy
        parts = []
        stale = self._stale_together(batches)
        for run_id, batch in batches.items():
            run = self._run(run_id)
            spec = run.spec
            share = p.shares_prompts(batch)
            batch = batch.to(self.device)
            algo, t = spec.algorithm, spec.train
            if self.device.type == "cuda":
                gen = torch.Generator(device=self.device)
                gen.set_state(run.cuda_rng)
            else:
                gen = torch.Generator()
                gen.set_state(run.rng)
            parts.append(
                _Part(
                    run,
                    batch,
                    share,
                    AggNorm.of(batch.mask, max_len=spec.rollout.max_new_tokens),
                    not algo.bypass_mode and spec.lora.dropout > 0,
                    -(-len(batch) // t.micro_batch_size),
                    gen,
                )
            )
        self.model.train()
        for part in parts:
            for param in part.run.params:
                param.grad = None
                param.requires_grad_(True)
        try:
            with self._rows_lora():
                for i in range(max(part.n_micro for part in parts)):
                    self._micro_together([(x, x.micro(i)) for x in parts if i < x.n_micro])
        except BaseException:
            self._release(parts)
            raise
        out: dict[str, dict[str, float] | Exception] = {}
        try:
            for part in parts:  # each run's own optimizer; one's failure is its own
                run_id, version = part.run.run_id, part.run.adapter_version
                try:
                    metrics = self._apply(part)
                    out[run_id] = _with_stale(metrics, batches[run_id], version, stale[run_id])
                except Exception as exc:
                    out[run_id] = exc
        finally:
            self._release(parts)
        return out

    def _apply(self, part: _Part) -> dict[str, float]:
        run, t = part.run, part.run.spec.train
        grad_norm = torch.nn.utils.clip_grad_norm_(run.params, t.grad_clip)
        run.optimizer.step()
        run.adapter_version += 1
        run.step += 1
        if self.device.type == "cuda":
            run.cuda_rng = part.gen.get_state()
        else:
            run.rng = part.gen.get_state()
        sums, weights = part.sums, part.weights
        metrics = {k: sums[k] / weights[k] for k in sums if weights[k] > 0}
        metrics["grad_norm"] = float(grad_norm)
        return metrics

    def _micro_together(self, items: list[tuple[_Part, TrainBatch]]) -> None:
        """Micro-batch i of each run: one forward with grad (each run's adapter and dropout
        on its rows), the no-grad forwards some runs need (π_old in eval mode with dropout
        and not bypass; the base model for the KL term), each run's own loss; one
        backward of their sum; each run's metrics into its sums."""
        p = self.policy
        with p._autocast():
            hidden = self._hidden([(x.run.adapter, x.gen, mb, x.share) for x, mb in items])
        lps = [
            p.hidden_logprobs(h, mb, x.run.spec) for h, (x, mb) in zip(hidden, items, strict=True)
        ]
        old_items = [k for k, (x, _) in enumerate(items) if x.separate_old]
        ref_items = [k for k, (x, _) in enumerate(items) if x.run.spec.algorithm.kl_coef > 0]
        lp_old, lp_ref = {}, {}
        with torch.no_grad():
            if old_items:
                self.model.eval()  # π_old without dropout
                try:
                    lp_old = self._nograd_logprobs(items, old_items, lora=True)
                finally:
                    self.model.train()
            if ref_items:  # the base model: no adapter on any row
                lp_ref = self._nograd_logprobs(items, ref_items, lora=False)
        total = None
        for k, ((x, mb), (lp, ent)) in enumerate(zip(items, lps, strict=True)):
            algo = x.run.spec.algorithm
            old = None
            if not algo.bypass_mode:
                old = lp_old[k] if x.separate_old else lp.detach()
            same = (mb.versions == x.run.adapter_version).to(mb.mask.dtype)
            loss, metrics = grpo_loss(
                LossInputs(lp, mb.lp_roll, mb.advantages, mb.mask, old, lp_ref.get(k), ent, same),
                algo,
                x.norm,
            )
            add_metrics(x.sums, x.weights, metrics, mb.mask, same)
            total = loss if total is None else total + loss
        total.backward()

    def _nograd_logprobs(self, items, which: list[int], lora: bool) -> dict[int, torch.Tensor]:
        p = self.policy
        sub = [items[k] for k in which]
        with p._autocast():
            hidden = self._hidden(
                [(x.run.adapter if lora else None, None, mb, x.share) for x, mb in sub]
            )
        return {
            k: p.hidden_logprobs(h, mb, x.run.spec)[0]
            for k, h, (x, mb) in zip(which, hidden, sub, strict=True)
        }

    def _hidden(self, items) -> list[torch.Tensor]:
        """Each item's final hidden states `[B, T, H]` at the positions that predict its
        response tokens, as `LoraPolicy._response_hidden` gives them for that batch alone.
        Items: (adapter name or None for the base model, its dropout generator, micro-batch,
        whether its batch shares prompts). The runs whose micro-batch has repeated prompts
        (and share them) go through the prompt-sharing forward together, the others through
        the plain forward together."""
        out: list[torch.Tensor | None] = [None] * len(items)
        shared, plain = [], []
        for k, (name, gen, mb, share) in enumerate(items):
            keys: dict[tuple[int, ...], int] = {}
            owner = []
            ids, lens = mb.input_ids.tolist(), mb.prompt_len.tolist()  # two ops, not 2 a row
            for row, n in zip(ids, lens, strict=True):
                owner.append(keys.setdefault(tuple(row[:n]), len(keys)))
            if not share or len(keys) == len(mb):
                plain.append((k, name, gen, mb))
            else:
                shared.append((k, name, gen, mb, list(keys), owner))
        if plain:
            for k, h in zip([it[0] for it in plain], self._plain_hidden(plain), strict=True):
                out[k] = h
        if shared:
            for k, h in zip([it[0] for it in shared], self._shared_hidden(shared), strict=True):
                out[k] = h
        return out

    def _plain_hidden(self, items) -> list[torch.Tensor]:
        body, _ = self.policy._lm_parts()
        pad = self.policy.tokenizer.pad_token_id
        width = max(mb.input_ids.shape[1] for _, _, _, mb in items)
        ids, attn, blocks = [], [], []
        for _, name, gen, mb in items:
            n, w = mb.input_ids.shape
            ids.append(F.pad(mb.input_ids, (0, width - w), value=pad))
            attn.append(F.pad(mb.attention_mask, (0, width - w)))
            blocks.append((name, n, 0, w, gen))
        with self._blocks(blocks):
            hidden = body(
                input_ids=torch.cat(ids), attention_mask=torch.cat(attn), use_cache=False
            ).last_hidden_state  # [ΣB, L, H]
        out, row = [], 0
        for _, _, _, mb in items:
            n, w = mb.input_ids.shape
            h = hidden[row : row + n, :w]
            out.append(h.gather(1, mb.resp_pos.unsqueeze(-1).expand(-1, -1, h.shape[-1])))
            row += n
        return out

    def _shared_hidden(self, items) -> list[torch.Tensor]:
        """The prompt-sharing forward of `LoraPolicy._response_hidden` over several runs'
        micro-batches: each run's distinct prompts once (a prompt of two runs is two rows,
        one per adapter), left-padded to the widest, each run's LoRA on its own columns (its
        own width), then the responses over the reordered cache."""
        body, _ = self.policy._lm_parts()
        pad = self.policy.tokenizer.pad_token_id
        device = self.device
        prompts = [q for it in items for q in it[4]]
        width = max(len(q) for q in prompts)
        p_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        p_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for u, q in enumerate(prompts):  # left-padded: every prompt ends at column width − 1
            p_ids[u, width - len(q) :] = torch.tensor(q)
            p_mask[u, width - len(q) :] = 1
        p_ids, p_mask = p_ids.to(device), p_mask.to(device)
        owner, blocks, u0 = [], [], 0
        for _, name, gen, _, keys, own in items:
            owner += [u0 + o for o in own]
            blocks.append((name, len(keys), width - max(len(q) for q in keys), width, gen))
            u0 += len(keys)
        own_t = torch.tensor(owner, device=device)
        with self._blocks(blocks):
            out = body(
                input_ids=p_ids,
                attention_mask=p_mask,
                position_ids=(p_mask.cumsum(-1) - 1).clamp(min=0),
                use_cache=True,
            )
        first = out.last_hidden_state[own_t, -1]  # [ΣB, H]
        lengths = [it[3].resp_tokens.shape[1] for it in items]
        t_max = max(lengths)
        rest = None
        if t_max > 1:
            cache = out.past_key_values
            cache.reorder_cache(own_t)  # [ΣU, …] → [ΣB, …], differentiable (index_select)
            resp_in, resp_mask, blocks = [], [], []
            for (_, name, gen, mb, _, _), t in zip(items, lengths, strict=True):
                resp_in.append(F.pad(mb.resp_tokens[:, : t - 1], (0, t_max - t), value=pad))
                resp_mask.append(F.pad(mb.resp_attn[:, : t - 1], (0, t_max - t)))
                blocks.append((name, len(mb), 0, t - 1, gen))  # t == 1: no columns, no LoRA
            resp_mask = torch.cat(resp_mask).to(p_mask.dtype)
            positions = p_mask.sum(-1)[own_t].unsqueeze(1) + torch.arange(t_max - 1, device=device)
            with self._blocks(blocks):
                rest = body(
                    input_ids=torch.cat(resp_in),
                    attention_mask=torch.cat([p_mask[own_t], resp_mask], dim=1),
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                ).last_hidden_state  # [ΣB, T_max − 1, H]
        hidden, row = [], 0
        for it, t in zip(items, lengths, strict=True):
            n = len(it[3])
            h = first[row : row + n].unsqueeze(1)
            if t > 1:
                h = torch.cat([h, rest[row : row + n, : t - 1]], dim=1)
            hidden.append(h)
            row += n
        return hidden

    @contextlib.contextmanager
    def _rows_lora(self):
        """The model's LoRA linears computing each run's adapter on its rows only (the
        blocks set by `_blocks` for each forward), for the duration."""
        self._rows = _Rows()
        patched = []
        for m in self.model.modules():
            if type(m) is LoraLinear:
                m.forward = types.MethodType(_rows_forward, m)
                m._paddock_rows = self._rows
                patched.append(m)
        try:
            yield
        finally:
            for m in patched:
                del m.forward
                del m._paddock_rows

    @contextlib.contextmanager
    def _blocks(self, blocks):
        self._rows.blocks = blocks
        try:
            yield
        finally:
            self._rows.blocks = []

    def _release(self, parts) -> None:
        for part in parts:
            for param in part.run.params:
                param.requires_grad_(False)
                param.grad = None

    @contextlib.contextmanager
    def _bound(self, run: RunAdapter):
        """The host policy steps `run`'s adapter: its spec, parameters, optimizer, version."""
        p = self.policy
        self.model.set_adapter(run.adapter)  # makes its parameters trainable
        p.spec, p.params, p.optimizer, p.adapter_version = (
            run.spec,
            run.params,
            run.optimizer,
            run.adapter_version,
        )
        try:
            yield
        finally:
            for param in run.params:
                param.requires_grad_(False)
                param.grad = None
            p.spec, p.params, p.optimizer, p.adapter_version = self._host

    @contextlib.contextmanager
    def _own_rng(self, run: RunAdapter):
        """The run's own random stream (LoRA dropout), whatever ran in between."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(run.rng)
            if run.cuda_rng is not None:
                torch.cuda.set_rng_state(run.cuda_rng, self.device)
            yield
            run.rng = torch.get_rng_state()
            if run.cuda_rng is not None:
                run.cuda_rng = torch.cuda.get_rng_state(self.device)

    # ---------------------------------------------------------------- adapters out and in

    def adapter_tensors(self, run_id: str) -> dict[str, torch.Tensor]:
        """The run's adapter as CPU tensors under PEFT's file keys (a copy)."""
        return lora_io.move_tensors(self._run(run_id).index, torch.device("cpu"))

    @contextlib.contextmanager
    def active(self, run_id: str):
        """The shared model computing with `run_id`'s adapter (an eval forward, the
        handshake's probe); no parameter of the run is trainable meanwhile."""
        run = self._run(run_id)
        self.model.set_adapter(run.adapter)
        for param in run.params:
            param.requires_grad_(False)
        yield self.model

    def adapter_update(self, run_id: str, with_probe: bool = True) -> AdapterUpdate:
        """The run's adapter as an engine loads it, labelled with its version, with the
        version handshake's probe computed under this run's adapter."""
        from ..loop.executor import adapter_probe  # the loop imports the policy

        run = self._run(run_id)
        probe = None
        if with_probe:
            with self.active(run_id) as model:
                probe = adapter_probe(model, len(self.policy.tokenizer))
        tensors = self.adapter_tensors(run_id)
        run.history.record(run.adapter_version, tensors)  # for the stale-token check
        return AdapterUpdate(run.adapter_version, tensors=tensors, probe=probe)

    def load_adapter_tensors(self, run_id: str, tensors: dict[str, torch.Tensor], version: int):
        run = self._run(run_id)
        lora_io.copy_into(run.index, tensors, f"run {run_id!r}: ")
        run.adapter_version = version

    # ---------------------------------------------------------------- checkpoints

    def save(self, run_id: str, out: str | Path) -> Path:
        """The run's checkpoint in a run alone's layout (adapter/, optimizer.pt, rng.pt) plus
        its step counter: a pooled run resumes alone from it, and the reverse."""
        run = self._run(run_id)
        out = Path(out)
        adapter = out / "adapter"
        adapter.mkdir(parents=True, exist_ok=True)
        lora_io.write_adapter_file(
            self.adapter_tensors(run_id), adapter / "adapter_model.safetensors"
        )
        config = peft_config(run.spec.lora, self.model_dir)
        config["lora_dropout"] = run.spec.lora.dropout
        (adapter / "adapter_config.json").write_text(json.dumps(config))
        (adapter / lora_io.VERSION_FILE).write_text(
            json.dumps({"adapter_version": run.adapter_version})
        )
        torch.save(run.optimizer.state_dict(), out / "optimizer.pt")
        rng = {"torch": run.rng, "python": random.getstate()}
        if run.cuda_rng is not None:
            rng["cuda"] = [run.cuda_rng]
        torch.save(rng, out / "rng.pt")
        (out / STATE_FILE).write_text(json.dumps({"step": run.step, "run_id": run_id}))
        return out

    def load(self, run_id: str, src: str | Path) -> None:
        """Restore the run's adapter, optimizer state, RNG and step from `save`'s layout."""
        run = self._run(run_id)
        src = Path(src)
        tensors, version = lora_io.read_adapter_dir(src / "adapter")
        self.load_adapter_tensors(run_id, tensors, version)
        run.optimizer.load_state_dict(torch.load(src / "optimizer.pt", weights_only=True))
        # tensors, ints and tuples only (save() writes no numpy state): no pickle needed
        rng = torch.load(src / "rng.pt", weights_only=True)
        run.rng = rng["torch"]
        if run.cuda_rng is not None and rng.get("cuda"):
            run.cuda_rng = rng["cuda"][0]
        state = src / STATE_FILE
        run.step = json.loads(state.read_text())["step"] if state.is_file() else version

    def _run(self, run_id: str) -> RunAdapter:
        run = self.runs.get(run_id)
        if run is None:
            known = ", ".join(sorted(self.runs)) or "none"
            raise KeyError(f"trainer pool: no run {run_id!r} (runs: {known})")
        return run


@dataclass
class _Part:
    """One run's share of a batched step."""

    run: RunAdapter
    batch: TrainBatch
    share: bool  # its batch takes the prompt-sharing forward (LoraPolicy.shares_prompts)
    norm: AggNorm
    separate_old: bool  # π_old is a forward of its own (dropout, not bypass)
    n_micro: int
    gen: torch.Generator  # its dropout stream for this step
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    weights: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def micro(self, i: int) -> TrainBatch:
        size = self.run.spec.train.micro_batch_size
        return self.batch.slice(i * size, (i + 1) * size)


@dataclass
class _Rows:
    # the forward's rows in blocks, in order, covering every row: (adapter name or None,
    # rows, first column, end column, dropout generator)
    blocks: list[tuple[str | None, int, int, int, torch.Generator | None]] = field(
        default_factory=list
    )


def _rows_forward(self: LoraLinear, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """A PEFT LoRA linear with each run's adapter on its block of rows and columns: the base
    linear over every row, then per block `base + B(A(dropout(x))) · scaling` (the scaling
    folded into B's weights: the same to fp32 rounding), as PEFT's forward computes it for
    that run alone (its dropout drawn from the run's generator with the block's shape, as
    `F.dropout` draws it on the CPU). The blocks are split off and put back together
    (`split`, `cat`), not sliced and assigned in place: each of those would cost a copy of
    the whole batch's activations or gradients per run in backward."""
    result = self.base_layer(x, *args, **kwargs)
    blocks = self._paddock_rows.blocks
    if not any(name is not None and name in self.lora_A for name, *_ in blocks):
        return result
    dtype, width = result.dtype, x.shape[1]
    pieces = []
    sizes = [n for _, n, _, _, _ in blocks]
    for (name, _, c0, c1, gen), xb, base in zip(
        blocks, x.split(sizes), result.split(sizes), strict=True
    ):
        if name is None or name not in self.lora_A or c1 <= c0:
            pieces.append(base)  # the base model, or not one of this run's target modules
            continue
        lora_a, lora_b = self.lora_A[name], self.lora_B[name]
        whole = (c0, c1) == (0, width)
        xs = self._cast_input_dtype(xb if whole else xb[:, c0:c1], lora_a.weight.dtype)
        drop = self.lora_dropout[name]
        if isinstance(drop, torch.nn.Dropout) and drop.training and drop.p > 0:
            keep = 1.0 - drop.p
            noise = torch.empty(xs.shape, dtype=xs.dtype, device=xs.device)
            noise.bernoulli_(keep, generator=gen)
            noise.div_(keep)
            xs = xs * noise
        if lora_b.bias is None:  # the scale on B's few weights, not on the activations
            delta = F.linear(lora_a(xs), lora_b.weight * self.scaling[name])
        else:
            delta = lora_b(lora_a(xs)) * self.scaling[name]
        if not whole:
            delta = F.pad(delta, (0, 0, c0, width - c1))
        pieces.append(base + delta)
    return torch.cat(pieces).to(dtype)


def _with_stale(metrics, batch: TrainBatch, version: int, stale) -> dict[str, float]:
    """The step's metrics with the stale tokens' check folded in, as a solo run's executor
    folds it (loop/executor.py): over the tokens of the version the step started at."""
    if stale is None:
        return metrics
    from ..loop.version_check import merge

    current = (batch.versions == version).to(batch.mask.dtype)
    return merge(metrics, (batch.mask * current).sum().item(), stale)


class _RunPolicy:
    """The host policy, bound to one run (`MultiLoraTrainer._bound`), as the stale-token
    check sees a policy: its adapter tensors and loads are that run's adapter's."""

    def __init__(self, trainer: MultiLoraTrainer, run: RunAdapter):
        self._policy, self._trainer, self._run = trainer.policy, trainer, run

    def __getattr__(self, name: str):
        return getattr(self._policy, name)

    @property
    def adapter_version(self) -> int:
        return self._run.adapter_version

    def adapter_tensors(self) -> dict[str, torch.Tensor]:
        return self._trainer.adapter_tensors(self._run.run_id)

    def load_adapter_tensors(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        lora_io.copy_into(self._run.index, tensors, f"run {self._run.run_id!r}: ")
