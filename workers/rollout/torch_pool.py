"""The torch pool engine: one base model, one static decoder with per-row adapters
(workers/rollout/static_decode.py, `adapters=capacity`), and one lane per run
(workers/rollout/pool_engine.py says what a lane promises).

- A run's adapter lives in a slot of the decoder's slot table; loading a version is a copy
  into that slot (no graph is recaptured), zero-padded to the pool's rank, and the version
  handshake scores the trainer's probe under that slot. Unloading empties the slot.
- One decode thread serves every run: the lanes' requests go to its queue, and each step
  decodes the rows of every run together, each row under its own run's slot. Finished
  rows' batch positions take the next waiting groups (continuous batching), whatever run
  they belong to.
- A run's pause touches only its rows: `abort` ends them now (their partial tokens come
  back), `wait` lets them finish while the run's new requests wait, `keep` takes them out
  of the batch with their tokens kept and puts them back, under the new adapter (their
  prefix recomputed), once the run resumes. The other runs decode on meanwhile.
- A token is labelled with the version its run's lane served when it was made: a run's
  adapter changes only while its rows are out of the batch.
- Sampling is the single-adapter backend's (`draw`, a generator per request seeded as it
  seeds it), so a group gives the tokens it gives alone on that backend.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import torch

from ..policy import lora as lora_io
from ..spec import LoraSpec, RunSpec
from . import adapter_files
from .base import AdapterUpdate, GroupRequest, GroupResult, PauseMode, Sample, pause_mode_check
from .eos import eos_token_ids
from .gate import RequestGate, unfinished
from .pool_engine import LanePool
from .static_decode import StaticDecoder
from .torch_engine.sampling import draw


class _Group:
    """One request in the engine: its samples (partial ones kept), the rows still to
    decode, its random stream, and where its result goes."""

    def __init__(self, lane: TorchLane, req: GroupRequest, future, loop, device):
        self.lane, self.req, self.future, self.loop = lane, req, future, loop
        self.samples = [
            Sample(list(s.token_ids), list(s.logprobs), list(s.versions), s.finish_reason, s.text)
            for s in (req.partial or [Sample() for _ in range(req.n)])
        ]
        for s in self.samples:
            if not s.done:
                s.finish_reason = None
        self.reseed(device)

    def reseed(self, device) -> None:
        """As the single backend seeds a request (also a continued one): its rows are the
        samples not done, each drawing from row k of the group's draw."""
        already = sum(len(s.token_ids) for s in self.samples)
        self.gen = torch.Generator(device=device).manual_seed(self.req.seed + 1_000_003 * already)
        self.todo = [j for j, s in enumerate(self.samples) if not s.done]
        for j in list(self.todo):
            if len(self.samples[j].token_ids) >= self.req.params.max_new_tokens:
                self.samples[j].finish_reason = "length"
                self.todo.remove(j)

    def active(self, j: int) -> bool:
        return self.samples[j].finish_reason is None

    def finished(self) -> bool:
        return all(s.finish_reason is not None for s in self.samples)


class TorchLane:
    """One run on the pool's engine: its gate, adapter slot, version and handshake."""

    def __init__(self, pool: TorchPoolEngine, run_id: str, lora: LoraSpec, slot: int):
        self.pool, self.run_id, self.lora, self.slot = pool, run_id, lora, slot
        self._version = -1
        self._gate = RequestGate()
        self.frozen = False  # paused with keep: its cut groups wait for resume
        self.unusable: str | None = None  # why the last handshake failed
        self.tokens_streamed = 0  # tokens made for this run (tests watch it)
        self.handshakes: list[dict[str, float]] = []

    @property
    def served_version(self) -> int:
        return self._version

    async def generate(self, requests: list[GroupRequest]) -> list[GroupResult]:
        if self.unusable is not None:
            raise RuntimeError(f"torch pool: run {self.run_id!r} is unusable: {self.unusable}")
        if self._version < 0:
            raise RuntimeError(f"torch pool: run {self.run_id!r} has no adapter acknowledged")
        return await self._gate.run(requests, self._one)

    async def _one(self, req: GroupRequest) -> GroupResult:
        if self._gate.cut:  # an abort began between admission and here
            return unfinished(req)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pool._submit(_Group(self, req, future, loop, self.pool.device))
        return await future

    async def load_adapter(self, update: AdapterUpdate) -> int:
        if self._version >= 0 and self._gate.open:
            raise RuntimeError(
                f"torch pool: pause run {self.run_id!r} before loading adapter version "
                f"{update.version}: its requests in flight would run on a version they are "
                "not labelled with"
            )
        await asyncio.to_thread(self.pool._load, self, update)
        return self._version

    async def pause(self, mode: PauseMode) -> None:
        pause_mode_check(mode)
        await self._gate.close(mode)
        if mode == "wait":
            await self._gate.idle()
        elif mode == "keep":
            self.frozen = True
            await asyncio.to_thread(self.pool._cut, self, True)
        else:
            await asyncio.to_thread(self.pool._cut, self, False)
            await self._gate.idle()

    async def resume(self) -> None:
        self.frozen = False
        await self._gate.reopen()
        self.pool._wake.set()

    async def abort(self) -> list[GroupResult]:
        await self._gate.change(aborting=True, aborted=[])
        self.frozen = False
        await asyncio.to_thread(self.pool._cut, self, False)
        await self._gate.idle()
        await self._gate.change(aborting=False)
        return list(self._gate.aborted)

    async def close(self) -> None:
        """Leave the pool: abort this run's requests and empty its slot."""
        await self.abort()
        await asyncio.to_thread(self.pool._unload, self)
        self._version = -1


class TorchPoolEngine(LanePool):
    """The pool's adapters on one torch model: `capacity` slots of rank `max_lora_rank` in
    the static decoder's table, `rollout.max_batch_size` rows decoded together."""

    name = "torch"
    ranks = tuple(range(1, 1025))  # any rank: slots are zero-padded to the pool's
    compact_below = 0.75  # as the single backend: finished rows leave at this share

    def __init__(
        self,
        spec: RunSpec,
        model_dir: str | Path,
        capacity: int | None = None,
        max_lora_rank: int | None = None,
        device: torch.device | None = None,
        lora_kernel: str | None = None,
    ):
        use_gpu = spec.resources.rollout_gpus > 0 and torch.cuda.is_available()
        self.device = device or torch.device("cuda" if use_gpu else "cpu")
        self.lora_kernel = lora_kernel
        super().__init__(spec, model_dir, capacity, max_lora_rank)

    # ---------------------------------------------------------------- LanePool hooks

    def _start(self) -> None:
        self.tokenizer = lora_io.load_tokenizer(self.model_dir)
        self.pad_id = self.tokenizer.pad_token_id
        self.eos_ids = frozenset(eos_token_ids(self.model_dir, self.tokenizer.eos_token_id))
        self.model = lora_io.load_spec_model(self.model_dir, self.spec, self.device).eval()
        self.max_batch = self.spec.rollout.max_batch_size
        self.decoder = StaticDecoder(
            self.model,
            self.max_batch,
            adapters=self.capacity,
            max_rank=self.max_lora_rank,
            lora_kernel=self.lora_kernel,
        )
        self.probe_atol = adapter_files.probe_tolerance(self.decoder.dtype)
        self._lock = threading.Lock()  # one step, cut or adapter copy at a time
        self._wake = threading.Event()
        self._inbox: list[_Group] = []
        self._inbox_lock = threading.Lock()
        self._pending: list[_Group] = []
        self._live: list[tuple[_Group, int] | None] = []  # batch position → (group, sample)
        self._tokens: torch.Tensor | None = None  # each position's next input token
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="torch-pool", daemon=True)
        self._thread.start()

    async def _new_lane(self, run_id: str, lora: LoraSpec, slot: int) -> TorchLane:
        return TorchLane(self, run_id, lora, slot)

    async def _shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        await asyncio.to_thread(self._thread.join)
        self.model = self.decoder = None  # type: ignore[assignment]

    # ---------------------------------------------------------------- adapters

    def _load(self, lane: TorchLane, update: AdapterUpdate) -> None:
        tensors = lora_io.update_tensors(update)
        slot = lane.slot - 1
        with self._lock:  # between two steps; the run has no row in the batch
            self.decoder.set_adapter(slot, tensors, lane.lora.alpha / lane.lora.r)
            if update.probe is not None:
                try:
                    err = adapter_files.check_probe(
                        f"torch pool run {lane.run_id!r}",
                        update.version,
                        update.probe,
                        self._probe_logprobs(update.probe, slot),
                        self.probe_atol,
                    )
                except RuntimeError as exc:
                    lane.unusable = str(exc)
                    raise
                lane.handshakes.append({"version": update.version, "probe_err": err})
            lane.unusable = None
            lane._version = update.version

    def _probe_logprobs(self, probe, slot: int) -> list[float]:
        ids = probe.prompt_ids + probe.token_ids
        if len(ids) > self.decoder.length and not self._live:
            self.decoder.reserve(len(ids))
        logits = self.decoder.score(ids, slot).float()
        start = len(probe.prompt_ids) - 1
        lp = torch.log_softmax(logits[start : start + len(probe.token_ids)], dim=-1)
        index = torch.tensor(probe.token_ids, device=lp.device)[:, None]
        return lp.gather(1, index)[:, 0].tolist()

    def _unload(self, lane: TorchLane) -> None:
        with self._lock:
            self.decoder.set_adapter(lane.slot - 1, None, 1.0)

    # ---------------------------------------------------------------- requests

    def _submit(self, group: _Group) -> None:
        if self._error is not None:
            raise RuntimeError("torch pool: the decode thread failed") from self._error
        with self._inbox_lock:
            self._inbox.append(group)
        self._wake.set()

    def _cut(self, lane: TorchLane, keep: bool) -> None:
        """Take the run's groups out of the engine: with `keep`, back to the queue (their
        tokens kept, continued after resume); else ended now, as aborted partials."""
        with self._lock:
            self._drain_inbox()
            groups = [g for g in self._groups() if g.lane is lane]
            for p, entry in enumerate(self._live):
                if entry is not None and entry[0].lane is lane:
                    self._live[p] = None
            if self._live:
                self._retire_free()
            self._pending = [g for g in self._pending if g.lane is not lane]
            for g in groups:
                if keep:
                    g.reseed(self.device)
                    self._pending.insert(0, g)
                else:
                    for s in g.samples:
                        if s.finish_reason is None:
                            s.finish_reason = "abort"
                    self._finish(g)
        self._wake.set()

    def _groups(self) -> list[_Group]:
        seen: dict[int, _Group] = {id(g): g for g in self._pending}
        for entry in self._live:
            if entry is not None:
                seen.setdefault(id(entry[0]), entry[0])
        return list(seen.values())

    def _finish(self, g: _Group) -> None:
        for s in g.samples:
            s.text = self.tokenizer.decode(s.token_ids, skip_special_tokens=True)
        result = GroupResult(g.req.request_id, g.req.prompt_ids, g.samples)

        def settle():
            if not g.future.done():
                g.future.set_result(result)

        g.loop.call_soon_threadsafe(settle)

    def _drain_inbox(self) -> None:
        with self._inbox_lock:
            self._pending += self._inbox
            self._inbox = []

    # ---------------------------------------------------------------- the decode thread

    def _run(self) -> None:
        try:
            while not self._stop:
                self._wake.clear()
                with self._lock:
                    self._drain_inbox()
                    busy = self._iterate()
                if not busy:
                    self._wake.wait(0.5)
        except BaseException as exc:  # every waiting request learns of it
            self._error = exc
            with self._lock:
                for g in self._groups():
                    g.loop.call_soon_threadsafe(_fail, g.future, exc)
                self._pending, self._live = [], []
            raise

    def _iterate(self) -> bool:
        """One step of every run's rows (after admitting what fits); False when idle."""
        with torch.no_grad():
            self._admit()
            self._settle()
            if not self._live:
                return False
            logits = self.decoder.step(self._tokens)
            self._sample(logits, list(range(len(self._live))))
            self._settle()
            self._compact()
        return True

    def _admissible(self) -> list[_Group]:
        return [g for g in self._pending if not g.lane.frozen]

    def _admit(self) -> None:
        dec = self.decoder
        if not any(e is not None for e in self._live) and self._live:
            dec.reset()
            self._live, self._tokens = [], None
        free = [p for p, e in enumerate(self._live) if e is None]
        free += range(len(self._live), self.max_batch)
        chosen, widest, most = [], 0, 0
        for g in self._admissible():
            if not g.todo:  # nothing left to make (a continued group whose rows are done)
                self._pending.remove(g)
                self._finish(g)
                continue
            if len(g.todo) > self.max_batch:
                self._pending.remove(g)
                g.loop.call_soon_threadsafe(
                    _fail,
                    g.future,
                    ValueError(
                        f"torch pool: a group of {len(g.todo)} samples exceeds "
                        f"rollout.max_batch_size ({self.max_batch})"
                    ),
                )
                continue
            if sum(len(c.todo) for c in chosen) + len(g.todo) > len(free):
                break
            # prompts admitted together are padded to one width; each row may still make
            # its budget's tokens after it
            width = max(len(g.req.prompt_ids) + len(g.samples[j].token_ids) for j in g.todo)
            left = max(g.req.params.max_new_tokens - len(g.samples[j].token_ids) for j in g.todo)
            need = max(widest, width) + max(most, left)
            if need > dec.length and self._live:
                break  # the cache grows only when the batch is empty: wait for it to drain
            chosen.append(g)
            widest, most = max(widest, width), max(most, left)
        if not chosen:
            return
        if widest + most > dec.length:
            dec.reserve(widest + most)
        for g in chosen:
            self._pending.remove(g)
        # each distinct (sequence, slot) once; a fresh group's rows share its prompt
        seqs: dict[tuple[tuple[int, ...], int], int] = {}
        fan, slots, rows = [], [], []
        for g in chosen:
            for j in g.todo:
                seq = tuple(g.req.prompt_ids + g.samples[j].token_ids)
                fan.append(seqs.setdefault((seq, g.lane.slot - 1), len(seqs)))
                p = free[len(rows)]
                slots.append(p)
                rows.append((g, j))
        ids, attn = self._left_pad([list(s) for s, _ in seqs])
        adapters = [slot for _, slot in seqs]
        logits = dec.prefill(
            ids, attn, fan=torch.tensor(fan, device=self.device), slots=slots, adapters=adapters
        )
        grown = len(self._live)
        for p in slots:
            if p >= grown:
                self._live.append(None)
        for p, row in zip(slots, rows, strict=True):
            self._live[p] = row
        tokens = torch.zeros(len(self._live), dtype=torch.long, device=self.device)
        if self._tokens is not None:
            tokens[: self._tokens.shape[0]] = self._tokens
        self._tokens = tokens
        self._sample(logits, slots)

    def _left_pad(self, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(seqs), width), dtype=torch.long)
        for u, s in enumerate(seqs):
            ids[u, width - len(s) :] = torch.tensor(s)
            attn[u, width - len(s) :] = 1
        return ids.to(self.device), attn.to(self.device)

    def _sample(self, logits: torch.Tensor, positions: list[int]) -> None:
        """Tokens for the rows at `positions` (logits row i ↔ positions[i]): each request's
        noise from its own generator, one draw of its rows a step, as the single backend
        draws; greedy rows take the argmax. Records them and sets the next inputs."""
        rows = [self._live[p] for p in positions]
        drawing: dict[int, tuple[_Group, int]] = {}
        at = 0
        index, temps, greedy = [0] * len(rows), [1.0] * len(rows), [True] * len(rows)
        for i, row in enumerate(rows):
            if row is None:
                continue
            g, j = row
            temps[i], greedy[i] = g.req.params.temperature, g.req.params.greedy
            if greedy[i]:
                continue
            if id(g) not in drawing:
                drawing[id(g)] = (g, at)
                at += len(g.todo)
            index[i] = drawing[id(g)][1] + g.todo.index(j)
        temperature = torch.tensor(temps, device=self.device)[:, None]
        if len(set(temps)) == 1:
            temperature = temps[0]  # one temperature: draw() as the single backend calls it
        if not drawing:
            tokens, lps = draw(logits, temperature)
        else:
            u = torch.empty((at, logits.shape[1]), device=self.device)
            for g, start in drawing.values():
                u[start : start + len(g.todo)].uniform_(generator=g.gen)
            tokens, lps = draw(logits, temperature, u, torch.tensor(index, device=self.device))
            if any(greedy[i] for i, row in enumerate(rows) if row is not None):
                g_tokens, g_lps = draw(logits, temperature)
                mask = torch.tensor(greedy, device=self.device)
                tokens, lps = torch.where(mask, g_tokens, tokens), torch.where(mask, g_lps, lps)
        self._tokens[torch.tensor(positions, device=self.device)] = tokens
        self._record(rows, tokens.tolist(), lps.tolist())

    def _record(self, rows, tokens: list[int], lps: list[float]) -> None:
        for row, tok, lp in zip(rows, tokens, lps, strict=True):
            if row is None or not row[0].active(row[1]):
                continue
            g, j = row
            s = g.samples[j]
            s.token_ids.append(tok)
            s.logprobs.append(lp)
            s.versions.append(g.lane._version)
            g.lane.tokens_streamed += 1
            if tok in self.eos_ids or self._hit_stop(s, g.req.params.stop):
                s.finish_reason = "stop"
            elif len(s.token_ids) >= g.req.params.max_new_tokens:
                s.finish_reason = "length"

    def _hit_stop(self, sample: Sample, stop: tuple[str, ...]) -> bool:
        if not stop:
            return False
        text = self.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        return any(text.endswith(s) for s in stop)

    def _settle(self) -> None:
        """Free finished rows' positions and hand back the groups that are done."""
        ended: dict[int, _Group] = {}
        for p, entry in enumerate(self._live):
            if entry is not None and not entry[0].active(entry[1]):
                ended[id(entry[0])] = entry[0]
                self._live[p] = None
        live = {id(e[0]) for e in self._live if e is not None}
        for key, g in ended.items():
            if key not in live and g.finished():
                self._finish(g)
        if self._live:
            self._retire_free()

    def _compact(self) -> None:
        """An empty batch is reset; finished rows leave it once they are a quarter of it and
        nothing waits for a position (their cache rows go too)."""
        active = [p for p, e in enumerate(self._live) if e is not None]
        if not active:
            self.decoder.reset()
            self._live, self._tokens = [], None
        elif not self._admissible() and len(active) <= self.compact_below * len(self._live):
            keep = torch.tensor(active, device=self.device)
            self.decoder.compact(keep)
            self._live = [self._live[p] for p in active]
            self._tokens = self._tokens[keep]

    def _retire_free(self) -> None:
        free = [p for p, e in enumerate(self._live) if e is None and p not in self.decoder.retired]
        self.decoder.retire(free)


def _fail(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
