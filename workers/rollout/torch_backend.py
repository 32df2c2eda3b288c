"""The torch rollout backend: batched sampling with a KV cache in plain PyTorch + PEFT.

The embedded default and the reference the other engines are compared with. Its model is a
separate copy from the trainer's, so an adapter reaches it only through `load_adapter` —
exactly like a remote engine. Work runs in a thread (torch releases the GIL), so the async
driver's trainer can run beside it.

pause("keep") freezes in-flight requests between two decode steps; if an adapter is loaded
meanwhile they continue under it, and their KV cache (prompt and tokens so far) is first
recomputed under the new adapter, as vLLM does for running requests when its prefix cache
is reset. Each token is then exactly what a trainer forward of the version it is labelled
with would give, which is what the trainer's rollout correction and token_mult_prob_error
assume.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import closing, nullcontext
from pathlib import Path

import torch

from ..policy import lora as lora_io
from ..spec import RunSpec
from .base import AdapterUpdate, GroupRequest, GroupResult, PauseMode, Sample, pause_mode_check
from .eos import eos_token_ids
from .static_decode import StaticDecoder, supports


class TorchBackend:
    name = "torch"
    placeable = True  # make_backend may name the device (an in-process run's second GPU)
    needs_probe = False  # loads the trainer's tensors as they are: no handshake to check
    # finished rows leave the decode batch once they are this share of it (see _decode)
    compact_below = 0.75

    def __init__(self, spec: RunSpec, model_dir: str | Path, device: torch.device | None = None):
        use_gpu = spec.resources.rollout_gpus > 0 and torch.cuda.is_available()
        self.device = device or torch.device("cuda" if use_gpu else "cpu")
        self.max_batch_size = getattr(spec.rollout, "max_batch_size", 256)
        self.tokenizer = lora_io.load_tokenizer(model_dir)
        self.eos_id = self.tokenizer.eos_token_id
        # every EOS id the model declares ends a sample (an instruct model has two)
        self.eos_ids = frozenset(eos_token_ids(model_dir, self.eos_id))
        self.pad_id = self.tokenizer.pad_token_id
        self.model = lora_io.load_spec_model(model_dir, spec, self.device)
        self.model.eval()
        self.decoder = self._static_decoder(spec)
        # rollout.compile on a GPU: sampling's passes over [rows, vocab] fused into two
        self._draw = draw
        if self.decoder is not None and self.decoder.compiled:
            self._draw = torch.compile(draw)
        self.continuous = getattr(spec.rollout, "continuous", True)
        # The engine's own CUDA stream: in one process with the trainer (the embedded async
        # run on one GPU) its kernels can then run beside the trainer's instead of queueing
        # behind them on the default stream.
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._version = -1  # nothing acknowledged yet: generate() refuses to run
        self._step_lock = threading.Lock()  # one forward step or one adapter load at a time
        self._cond = threading.Condition()  # guards _admitting and _inflight
        self._admitting = True
        self._inflight = 0
        self._running = threading.Event()  # cleared by pause("keep"): decode steps wait
        self._running.set()
        self._abort = threading.Event()
        self._aborted: list[GroupResult] = []
        self.served_log: list[int] = []  # every version acknowledged, in order (for tests)

    def _static_decoder(self, spec: RunSpec) -> StaticDecoder | None:
        mode = getattr(spec.rollout, "decode", "dynamic")
        if mode == "auto":
            if self.device.type != "cuda" or supports(self.model) is not None:
                return None
        elif mode != "static":
            return None
        compile = "inductor" if getattr(spec.rollout, "compile", False) else None
        if compile and self.device.type != "cuda":
            compile = None  # a CPU run keeps the eager step (no C++ toolchain is assumed)
        # says why if it cannot
        return StaticDecoder(self.model, self.max_batch_size, compile=compile)

    @property
    def served_version(self) -> int:
        return self._version

    def use_stream(self, stream: torch.cuda.Stream) -> None:
        """Decode and load adapters on `stream` instead of the engine's own (one that shares
        the GPU with the trainer on a plan: workers/loop/gpu_share.py). Before generating."""
        self._stream = stream

    # ---------------------------------------------------------------- protocol

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        return await asyncio.to_thread(self._generate, requests)

    async def load_adapter(self, update: AdapterUpdate) -> int:
        return await asyncio.to_thread(self._load_adapter, update)

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        if mode == "abort":
            self._abort.set()
        elif mode == "keep":
            self._running.clear()
        with self._cond:
            self._admitting = False
            self._cond.notify_all()
        if mode != "keep":  # abort: in-flight requests end at their next step; wait: finish
            await asyncio.to_thread(self._wait_idle)

    async def resume(self) -> None:
        self._abort.clear()
        self._running.set()
        with self._cond:
            self._admitting = True
            self._cond.notify_all()

    async def abort(self) -> list[GroupResult]:
        self._aborted = []
        self._abort.set()
        self._running.set()
        with self._cond:
            self._cond.notify_all()  # frozen requests must wake up to end
        await asyncio.to_thread(self._wait_idle)
        self._abort.clear()
        return list(self._aborted)

    async def close(self) -> None:
        await self.abort()
        self.model = None  # type: ignore[assignment]

    # ---------------------------------------------------------------- internals

    def _wait_idle(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._inflight == 0)

    def _load_adapter(self, update: AdapterUpdate) -> int:
        if update.tensors is not None:
            tensors = update.tensors
        elif update.path is not None:
            tensors, _ = lora_io.read_adapter_dir(update.path)
        else:
            raise ValueError(f"adapter update {update.version} has neither tensors nor a path")
        with self._step_lock, self._on_stream():  # between two decode steps, never inside one
            if self._stream is not None:  # a trainer's copy of the tensors may be in flight
                self._stream.wait_stream(torch.cuda.default_stream(self.device))
            lora_io.load_adapter_tensors(self.model, tensors)
            if self.decoder is not None:
                self.decoder.refresh()
            self._version = update.version
            self.served_log.append(update.version)
        return self._version

    def _on_stream(self):
        """Run the caller's block on the engine's stream (a no-op on the CPU)."""
        return torch.cuda.stream(self._stream) if self._stream is not None else nullcontext()

    def _generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self._version < 0:
            raise RuntimeError(
                "torch backend: no adapter acknowledged yet; call load_adapter first"
            )
        with self._cond:
            # Held while paused; but under an abort, come back at once with the requests as
            # aborted partials (the caller may be stopping and must not block here).
            self._cond.wait_for(lambda: self._admitting or self._abort.is_set())
            self._inflight += 1
        try:
            with self._on_stream():
                results = self._in_batches(requests)
            aborted = [r for r in results if r.aborted]
            if aborted:
                self._aborted += aborted
            return results
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def _in_batches(self, requests: list[GroupRequest]) -> list[GroupResult]:
        """The requests in batches of at most max_batch_size rows, each batch decoded to its
        end; on the static decoder, one batch whose freed slots take the next groups
        (continuous batching), split only where the sampling params change."""
        results = []
        # Chunk by whole groups so a group's samples share one batch (and its RNG stream).
        chunk: list[GroupRequest] = []
        for req in requests:
            if chunk and self._full(chunk, req):
                results += self._generate_batch(chunk)
                chunk = []
            chunk.append(req)
        if chunk:
            results += self._generate_batch(chunk)
        return results

    def _full(self, chunk: list[GroupRequest], req: GroupRequest) -> bool:
        if req.params != chunk[0].params:
            return True
        if self.decoder is not None and self.continuous:
            return False
        return sum(r.n for r in chunk) + req.n > self.max_batch_size

    @torch.no_grad()
    def _generate_batch(self, requests: list[GroupRequest]) -> list[GroupResult]:
        params = requests[0].params
        if any(r.params != params for r in requests):
            raise ValueError("torch backend: one batch must share sampling params")
        # One row per sample still to generate; finished partial samples are carried over.
        samples: list[list[Sample]] = []
        rows: list[tuple[int, int]] = []  # (request index, sample index)
        row_prompts: list[list[int]] = []
        gens: list[torch.Generator] = []
        for i, req in enumerate(requests):
            group = [
                Sample(list(s.token_ids), list(s.logprobs), list(s.versions), None, s.text)
                for s in (req.partial or [Sample() for _ in range(req.n)])
            ]
            samples.append(group)
            already = sum(len(s.token_ids) for s in group)
            # On a GPU the noise is drawn there: a CPU draw of [rows, vocab] a step, copied
            # over, cost more than the forward (issue 10).
            gen = torch.Generator(device=self.device)
            gens.append(gen.manual_seed(req.seed + 1_000_003 * already))
            for j, s in enumerate(group):
                if req.partial is not None and req.partial[j].done:
                    s.finish_reason = req.partial[j].finish_reason
                    continue
                rows.append((i, j))
                row_prompts.append(req.prompt_ids + s.token_ids)
        if rows:
            decode = self._decode if self.decoder is None else self._decode_static
            decode(samples, rows, row_prompts, gens, params)
        for group in samples:
            for s in group:
                s.text = self.tokenizer.decode(s.token_ids, skip_special_tokens=True)
        return [
            GroupResult(r.request_id, r.prompt_ids, g)
            for r, g in zip(requests, samples, strict=True)
        ]

    def _prompts(self, row_prompts: list[list[int]]):
        """The n samples of a group share their prompt: each distinct prompt once, left
        padded ([U, P] ids and mask), and each row's prompt index (prefix sharing)."""
        distinct: dict[tuple[int, ...], int] = {}
        owner = [distinct.setdefault(tuple(p), len(distinct)) for p in row_prompts]  # [R]
        ids, attn = self._left_pad(list(distinct))
        return ids, attn, torch.tensor(owner, device=self.device)

    def _left_pad(self, seqs) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(seqs), width), dtype=torch.long)
        for u, p in enumerate(seqs):
            ids[u, width - len(p) :] = torch.tensor(p)
            attn[u, width - len(p) :] = 1
        return ids.to(self.device), attn.to(self.device)

    def _decode(self, samples, rows, row_prompts, gens, params) -> None:
        ids, prompt_attn, own = self._prompts(row_prompts)
        pos = (prompt_attn.cumsum(-1) - 1).clamp(min=0)  # [U, P]
        attn = prompt_attn[own]  # [R, P]
        state = _Rows(rows, samples, params, gens, self.device)
        past, step_input, step_pos = None, ids, pos
        seq = ids[own]  # [R, P + k]: every row's tokens so far, to recompute its KV cache
        cache_version = -1  # the adapter version the KV cache `past` was computed under
        with closing(self._turns(state)) as turns:  # the lock goes with an error
            for version in turns:
                if past is not None and version != cache_version:
                    # A kept request after an adapter change: recompute the whole prefix under
                    # the new adapter instead of decoding on a cache of the old one.
                    past, step_input = None, seq
                    step_pos = (attn.cumsum(-1) - 1).clamp(min=0)
                fanned = past is None and step_input is ids  # the prefill of U prompts
                out = self.model(
                    input_ids=step_input,
                    attention_mask=prompt_attn if fanned else attn,
                    position_ids=step_pos,
                    past_key_values=past,
                    use_cache=True,
                    logits_to_keep=1,
                )
                cache_version = version
                logits = out.logits[:, -1, :]
                if fanned:  # the prefill ran on the U distinct prompts: fan out to R rows
                    out.past_key_values.reorder_cache(own)
                    logits, step_pos = logits[own], step_pos[own]
                past = out.past_key_values
                tokens = self._sample(logits, state, params)
                keep = self._record(tokens, state, version)
                if keep is not None:
                    index = torch.tensor(keep, device=self.device)
                    past.reorder_cache(index)
                    tokens, seq, attn = tokens[index], seq[index], attn[index]
                    step_pos = step_pos[index]
                step_input = tokens.unsqueeze(1)  # [live, 1]
                seq = torch.cat([seq, step_input], dim=1)
                ones = torch.ones((len(state.live), 1), dtype=attn.dtype, device=self.device)
                attn = torch.cat([attn, ones], 1)
                step_pos = step_pos[:, -1:] + 1
        state.abort_unfinished()

    def _decode_static(self, samples, rows, row_prompts, gens, params) -> None:
        """As _decode, on the static cache (see static_decode.py): the same prefix sharing,
        sampling, compaction and recompute-on-adapter-change, without Python per layer. The
        batch's slots are filled by whole groups; once enough rows have finished, their
        slots take the next groups while the others decode on (continuous batching), so a
        long response no longer holds a whole batch of short ones back."""
        dec = self.decoder
        state = _Rows(rows, samples, params, gens, self.device, slots=dec.max_batch)
        widest = max(len(ks) for ks in state.by_req.values())
        if widest > dec.max_batch:  # it could never take its slots
            raise ValueError(
                f"torch backend: a group of {widest} samples exceeds rollout.max_batch_size "
                f"({dec.max_batch}); raise it or use rollout.decode: dynamic"
            )
        dec.reset()
        dec.reserve(max(len(p) for p in row_prompts) + state.steps)
        tokens, cache_version = None, -1
        with closing(self._turns(state)) as turns:  # the lock goes with an error
            for version in turns:
                if tokens is None:
                    tokens = self._admit(state, row_prompts, version)
                    cache_version = version
                    continue
                if version != cache_version:
                    # as in _decode: recompute the live rows' prefix under the new adapter
                    seqs = [row_prompts[k] + state.new_tokens(k) for k in state.live]
                    # rows admitted at different times have made different counts of
                    # tokens: padded to the longest, each still needs its own budget
                    dec.reset()
                    dec.reserve(max(map(len, seqs)) + max(map(state.left, state.live)))
                    logits = dec.prefill(*self._left_pad(seqs))
                else:
                    logits = dec.step(tokens)
                cache_version = version
                tokens = self._sample(logits, state, params)
                keep = self._record(tokens, state, version)
                if keep is not None:
                    index = torch.tensor(keep, device=self.device)
                    dec.compact(index)
                    tokens = tokens[index]
                else:  # finished rows that keep their slots stop walking the cache
                    done = [p for p, k in enumerate(state.live) if not state.active[k]]
                    dec.retire([p for p in done if p not in dec.retired])
                if state.pending and state.room() >= state.admit_at():
                    tokens = self._admit(state, row_prompts, version, tokens)
        state.abort_unfinished()

    def _admit(self, state: _Rows, row_prompts, version: int, tokens=None) -> torch.Tensor:
        """Prefill the next pending groups that fit into the batch's free slots (finished
        rows' slots first, then past the last), sample their first tokens, and return the
        tokens every slot decodes next."""
        slots, new = state.admit()
        ids, attn, own = self._prompts([row_prompts[k] for k in new])
        logits = self.decoder.prefill(ids, attn, fan=own, slots=slots)
        first = self._sample(logits, state, state.params, rows=new)
        self._record(first, state, version, rows=new)
        if tokens is None:
            return first
        grown = torch.zeros(len(state.live), dtype=tokens.dtype, device=self.device)
        grown[: tokens.shape[0]] = tokens
        grown[torch.tensor(slots, device=self.device)] = first
        return grown

    def _turns(self, state: _Rows):
        """Each decode step's turn: waits while paused ("keep"), ends on an abort or once
        every row has finished, and yields the adapter version to decode under. The body
        of the caller's loop runs under the step lock (an adapter load waits for it to
        end; a static decoder's logits are a CUDA graph's buffer until sampled)."""
        while state.any_active():
            self._running.wait()
            with self._step_lock:
                if self._abort.is_set():
                    return
                yield self._version

    def _sample(self, logits: torch.Tensor, state: _Rows, params, rows=None) -> torch.Tensor:
        """One token a row of `rows` (default: the live ones): greedy, or argmax of
        logits/T + Gumbel noise (a draw from the softmax at temperature T). The tokens'
        logprobs go to state.logprobs."""
        u = index = None
        if not params.greedy:
            u, index = state.uniform(logits.shape[1], state.live if rows is None else rows)
        tokens, state.logprobs = self._draw(logits, params.temperature, u, index)
        return tokens

    def _record(
        self, tokens: torch.Tensor, state: _Rows, version: int, rows=None
    ) -> list[int] | None:
        """Append a step's tokens to the samples of `rows` (default: the live ones) and end
        those that stop. Returns the batch positions to keep when finished rows should
        leave the batch (once they are a quarter of it, and no group waits for a slot:
        their KV cache then goes too), else None."""
        step_tokens, step_lps = tokens.tolist(), state.logprobs.tolist()  # one copy each
        for p, k in enumerate(state.live if rows is None else rows):
            if not state.active[k]:
                continue
            i, j = state.rows[k]
            s, tok = state.samples[i][j], step_tokens[p]
            s.token_ids.append(tok)
            s.logprobs.append(step_lps[p])
            s.versions.append(version)
            state.generated[k] += 1
            if tok in self.eos_ids or self._hit_stop(s, state.params.stop):
                s.finish_reason, state.active[k] = "stop", False
            elif len(s.token_ids) >= state.params.max_new_tokens:
                s.finish_reason, state.active[k] = "length", False
        if rows is not None or state.pending:
            return None
        keep = [p for p, k in enumerate(state.live) if state.active[k]]
        if keep and len(keep) <= self.compact_below * len(state.live):
            state.live = [state.live[p] for p in keep]
            return keep
        return None

    def _hit_stop(self, sample: Sample, stop: tuple[str, ...]) -> bool:
        if not stop:
            return False
        text = self.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        return any(text.endswith(s) for s in stop)


def draw(logits: torch.Tensor, temperature: float, u=None, index=None):
    """Tokens and their logprobs at temperature T from [rows, vocab] logits: greedy
    without `u`, else argmax(logits/T + Gumbel noise), the noise made from uniform draws
    `u` (row r takes u[index[r]]). A pure function, compiled with rollout.compile."""
    x = logits.float() / temperature
    if u is None:
        tokens = x.argmax(dim=-1)
    else:
        u = u.index_select(0, index).clamp(1e-20, 1.0 - 1e-7)
        gumbel = -torch.log(-torch.log(u))
        tokens = (x + gumbel).argmax(dim=-1)
    logprobs = x.gather(1, tokens.unsqueeze(1)).squeeze(1) - torch.logsumexp(x, dim=-1)
    return tokens, logprobs


class _Rows:
    """The bookkeeping of one batch's decode: which (request, sample) each row is, which
    rows are live (hold a slot of the batch, in batch order) and active (not finished),
    which groups still wait for slots, and each request's random stream."""

    def __init__(self, rows, samples, params, gens, device, slots: int | None = None):
        self.rows, self.samples, self.params = rows, samples, params
        self.device = device
        budget = [params.max_new_tokens - len(samples[i][j].token_ids) for i, j in rows]
        self.steps = max(budget)
        self.active = [b > 0 for b in budget]
        for k, (i, j) in enumerate(rows):
            if not self.active[k]:
                samples[i][j].finish_reason = "length"
        self.generated = [0] * len(rows)  # tokens appended by this decode, a row
        self.logprobs: torch.Tensor | None = None
        # Rows of each request, to draw that request's noise from its own generator: a
        # group's samples then do not depend on which other groups share the batch.
        self.by_req: dict[int, list[int]] = {}
        for k, (i, _) in enumerate(rows):
            self.by_req.setdefault(i, []).append(k)
        self.gens = gens
        self._plan: tuple | None = None
        # Without a slot count every row is live from the start; with one, groups take
        # slots as admit() gives them (the static decoder's continuous batching).
        self.slots = slots
        self.live: list[int] = [] if slots else list(range(len(rows)))
        self.pending: list[int] = [i for i, ks in self.by_req.items() if slots and ks]

    def room(self) -> int:
        """Slots a group could take now: finished rows' and those past the last live row."""
        return sum(not self.active[k] for k in self.live) + self.slots - len(self.live)

    def admit_at(self) -> int:
        """Free slots worth a prefill: the next group's rows, and an eighth of the batch
        (one prefill for several groups) unless fewer rows wait or no live row is active."""
        need = len(self.by_req[self.pending[0]])
        if not any(self.active[k] for k in self.live):
            return need
        waiting = sum(len(self.by_req[i]) for i in self.pending)
        return max(need, min(self.slots // 8, waiting))

    def admit(self) -> tuple[list[int], list[int]]:
        """Give the next pending groups that fit (in order; at least one) slots: finished
        rows' first, then past the last live row. Returns (slots, rows), aligned."""
        free = [p for p, k in enumerate(self.live) if not self.active[k]]
        free += range(len(self.live), self.slots)
        slots, new = [], []
        while self.pending:
            group = self.by_req[self.pending[0]]
            if new and len(new) + len(group) > len(free):
                break
            self.pending.pop(0)
            for k in group:
                p = free[len(new)] if len(new) < len(free) else len(self.live)
                if p < len(self.live):
                    self.live[p] = k
                else:
                    self.live.append(k)
                slots.append(p)
                new.append(k)
        return slots, new

    def any_active(self) -> bool:
        return any(self.active)

    def left(self, k: int) -> int:
        """Tokens row k may still make."""
        i, j = self.rows[k]
        return self.params.max_new_tokens - len(self.samples[i][j].token_ids)

    def new_tokens(self, k: int) -> list[int]:
        i, j = self.rows[k]
        tokens = self.samples[i][j].token_ids
        return tokens[len(tokens) - self.generated[k] :]

    def abort_unfinished(self) -> None:
        for k, (i, j) in enumerate(self.rows):
            if self.active[k]:  # cut short by an abort
                self.samples[i][j].finish_reason = "abort"

    def uniform(self, vocab: int, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Uniform draws for `rows`, for draw()'s Gumbel noise: [total, vocab] and the draw
        each row takes (in their order). Each request with a row among them draws for all
        its rows from its own generator, whichever have finished, so a row's draws depend
        neither on the other groups in the batch nor on when its group's other rows
        finished or its group was admitted. All draws land in one buffer: one launch a
        request."""
        if self._plan is None or self._plan[0] != rows:
            position = {k: p for p, k in enumerate(rows)}
            drawing, index, at = [], [0] * len(rows), 0
            for i, ks in self.by_req.items():
                if not any(k in position for k in ks):
                    continue  # finished or not admitted: its stream is not needed now
                drawing.append((i, at, len(ks)))
                for n, k in enumerate(ks):
                    if k in position:
                        index[position[k]] = at + n
                at += len(ks)
            self._plan = (list(rows), drawing, at, torch.tensor(index, device=self.device))
        _, drawing, total, index = self._plan
        u = torch.empty((total, vocab), device=self.device)
        for i, at, n in drawing:
            u[at : at + n].uniform_(generator=self.gens[i])
        return u, index
