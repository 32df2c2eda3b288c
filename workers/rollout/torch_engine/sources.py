"""Step sources: what computes the decode batch's logits for the decode loop (loop.py), and
holds the engine's adapters.

A source holds the batch's KV cache, one row a batch position. The loop tells it to begin an
empty batch (`start`), which rows to prefill into which positions (`prefill`, each row with
its adapter slot), to advance every row by one token (`step`), to drop free positions
(`compact`) or to stop advancing those that keep their place (`retire`). A source that
`keeps` lets a finished row keep its cache (`retire(..., kept)`) and prefills a row that
continues it (an episode's next turn: its prompt starts with the kept sequence) from where
the cache ends, not anew. The engine loads
adapters into it (`load`; `join` and `leave` for a pool's runs) and scores the version
handshake's probe under one of them (`score`).

Adapters: a run alone has one, the model's own (slot None). A pool has a slot per run: the
static decoder's slot table (rows of every adapter in one batch), or for the PEFT forward a
named PEFT adapter each (one adapter's rows a batch, as PEFT's forward runs one adapter).

- `CachedForward`: the PEFT model's own forward and its dynamic KV cache (any model). Every
  row of a batch is admitted at once; the next batch starts when it has finished.
- `StaticSource`: the static decoder of static_decode.py (a preallocated cache, a CUDA graph a
  step on a GPU), whose freed positions take new groups while the other rows decode on.
"""

from __future__ import annotations

from typing import Protocol

import torch
from peft.utils import get_peft_model_state_dict
from torch import Tensor, nn
from transformers import PretrainedConfig

from ...adapters import lora as lora_io
from ...adapters.padding import left_pad
from ...spec import LoraSpec, TorchRolloutSpec
from ..static_decode import StaticDecoder, supports


class StepSource(Protocol):
    slots: int  # rows a batch holds (a group wider than that is refused or decoded alone)
    refill: bool  # freed positions take new groups while the other rows decode on
    one_adapter: bool  # a batch's rows share one adapter (else rows of any adapters mix)
    keeps: bool  # finished rows may keep their caches for a continuation

    def start(self, length: int) -> None:
        """A new, empty batch whose rows need up to `length` positions (0: none yet, the
        last batch's cache let go)."""

    def fits(self, length: int) -> bool:
        """Whether rows of `length` positions fit the running batch's cache."""

    def grow(self, length: int) -> bool:
        """Make the running batch's cache hold rows of `length` positions, its rows' caches
        kept; False where memory does not allow it."""

    def cached(self, position: int) -> tuple[int, int]:
        """(cache index of its first token, tokens it holds) of the kept row at `position`."""

    def check(self, rows: int) -> None:
        """Raise ValueError if a group of `rows` rows could never be admitted."""

    def prefill(
        self, prompts: list[list[int]], positions: list[int], adapters: list, reuse=None
    ) -> Tensor:
        """Rows with these token sequences take these batch positions (free ones, or one
        past the last); their last logits. `adapters`: each row's adapter slot. `reuse`:
        for each row, how many of its first tokens its position's kept cache holds (0 or
        None: prefilled whole)."""

    def step(self, tokens: Tensor) -> Tensor:
        """Append one token to each row; the next logits ([rows, vocab])."""

    def compact(self, keep: Tensor) -> None:
        """Keep only the rows at batch positions `keep` (ascending), moved to the front."""

    def retire(self, positions: list[int], kept=()) -> None:
        """The rows at these positions have left (finished or cut) but keep their places;
        those in `kept` keep their caches too."""

    def load(self, slot: int | None, tensors: dict[str, Tensor], lora: LoraSpec) -> None:
        """Copy an adapter (PEFT file keys) into `slot`, never while a row of it decodes."""

    def score(self, ids: list[int], slot: int | None) -> Tensor:
        """The logits after every token of one sequence ([len, vocab]) under `slot`, the
        batch left as it is."""

    def join(self, slot: int, lora: LoraSpec) -> None:
        """A pool's run takes `slot`, with its LoRA settings."""

    def leave(self, slot: int) -> None:
        """A pool's run leaves `slot`, its adapter emptied."""


def shared_prompts(prompts: list[list[int]], pad_id: int, device: torch.device, adapters=None):
    """The n samples of a group share their prompt: each distinct (prompt, adapter) once,
    left padded ([U, P] ids and mask), each row's index among them ([R]: prefix sharing),
    and each distinct one's adapter."""
    adapters = adapters or [None] * len(prompts)
    distinct: dict[tuple, int] = {}
    owner = [
        distinct.setdefault((tuple(p), a), len(distinct))
        for p, a in zip(prompts, adapters, strict=True)
    ]
    ids, attn = left_pad([list(p) for p, _ in distinct], pad_id, device)
    return ids, attn, torch.tensor(owner, device=device), [a for _, a in distinct]


def _positions(attn: Tensor) -> Tensor:
    return (attn.cumsum(-1) - 1).clamp(min=0)


class CachedForward:
    """The PEFT model's forward with its dynamic cache: every row of the batch is admitted
    in one prefill (of its distinct prompts, fanned out to the rows), then decodes on. A
    pool's adapters are named PEFT adapters on the model, one active a batch."""

    refill = False
    one_adapter = True
    keeps = False

    def __init__(self, model: nn.Module, pad_id: int, device: torch.device, slots: int):
        self.model, self.pad_id, self.device, self.slots = model, pad_id, device, slots
        self.past = None
        self.attn: Tensor | None = None  # [rows, tokens so far]
        self.pos: Tensor | None = None  # [rows, 1]: each row's last position
        self.adapter: int | None = None  # the batch's adapter slot
        self._names: dict[int, str] = {}  # a pool's slots: their PEFT adapter names
        self._index: dict[int, dict[str, Tensor]] = {}  # their parameters by file key
        self._active = lora_io.ADAPTER_NAME

    def start(self, length: int) -> None:
        self.past = self.attn = self.pos = None

    def fits(self, length: int) -> bool:
        return True

    def grow(self, length: int) -> bool:
        return True

    def cached(self, position: int) -> tuple[int, int]:
        raise RuntimeError("the PEFT forward keeps no row's cache")

    def check(self, rows: int) -> None:
        pass  # a group wider than the batch is decoded alone

    def _use(self, slot: int | None) -> None:
        name = lora_io.ADAPTER_NAME if slot is None else self._names[slot]
        if name != self._active:
            self.model.set_adapter(name)
            self._active = name

    def _forward(self, ids: Tensor, attn: Tensor, pos: Tensor) -> Tensor:
        self._use(self.adapter)  # a probe may have switched it between two steps
        out = self.model(
            input_ids=ids,
            attention_mask=attn,
            position_ids=pos,
            past_key_values=self.past,
            use_cache=True,
            logits_to_keep=1,
        )
        self.past = out.past_key_values
        return out.logits[:, -1, :]

    def prefill(
        self, prompts: list[list[int]], positions: list[int], adapters: list, reuse=None
    ) -> Tensor:
        if self.past is not None or positions != list(range(len(prompts))):
            raise RuntimeError("the PEFT forward admits every row of a batch at once")
        if len(set(adapters)) != 1:
            raise ValueError("the PEFT forward decodes one adapter's rows a batch")
        self.adapter = adapters[0]
        ids, attn, own, _ = shared_prompts(prompts, self.pad_id, self.device)
        pos = _positions(attn)
        logits = self._forward(ids, attn, pos)
        self.past.reorder_cache(own)  # the U distinct prompts' cache fanned out to R rows
        self.attn, self.pos = attn[own], pos[own][:, -1:]
        return logits[own]

    def step(self, tokens: Tensor) -> Tensor:
        ones = torch.ones((tokens.shape[0], 1), dtype=self.attn.dtype, device=self.device)
        self.attn, self.pos = torch.cat([self.attn, ones], 1), self.pos + 1
        return self._forward(tokens.unsqueeze(1), self.attn, self.pos)

    def compact(self, keep: Tensor) -> None:
        self.past.reorder_cache(keep)
        self.attn, self.pos = self.attn[keep], self.pos[keep]

    def retire(self, positions: list[int], kept=()) -> None:
        pass  # finished rows decode on (their tokens unused) until a compaction drops them

    def load(self, slot: int | None, tensors: dict[str, Tensor], lora: LoraSpec) -> None:
        if slot is None:
            lora_io.load_adapter_tensors(self.model, tensors)
        else:
            lora_io.copy_into(self._index[slot], tensors, f"adapter slot {slot}: ")

    @torch.no_grad()
    def score(self, ids: list[int], slot: int | None) -> Tensor:
        self._use(slot)
        return self.model(input_ids=torch.tensor([ids], device=self.device)).logits[0]

    def join(self, slot: int, lora: LoraSpec) -> None:
        name = f"slot{slot}"  # PEFT module keys: no dots, nothing like "lora_"
        # its initial weights are never served (the run's first load replaces them): the
        # init draws from a forked RNG, so the process's stays as it was
        with torch.random.fork_rng(devices=[]):
            self.model.add_adapter(name, lora_io.lora_config(lora))
        self.model.set_adapter(self._active)  # add_adapter may activate the new one
        self._names[slot] = name
        self._index[slot] = get_peft_model_state_dict(self.model, adapter_name=name)

    def leave(self, slot: int) -> None:
        name = self._names.pop(slot)
        del self._index[slot]
        if self._active == name:
            self.model.set_adapter(lora_io.ADAPTER_NAME)
            self._active = lora_io.ADAPTER_NAME
        self.model.delete_adapter(name)


class StaticSource:
    """The static decoder (static_decode.py): rows take positions of its fixed batch, and
    with `refill` the positions of finished rows take new groups while the others decode
    on (continuous batching). A run alone's adapter is folded into the decoder's weights;
    a pool's adapters are its slot table, one slot a run, rows of every slot in one step.
    With `refill`, a finished row may keep its cache, parked in its position (`keeps`), and
    a row continuing it is prefilled with the tokens after it only (`StaticDecoder.extend`):
    an episode's turn costs its new tokens, not the whole episode again."""

    one_adapter = False

    def __init__(self, model: nn.Module, decoder: StaticDecoder, pad_id: int, refill: bool):
        self.model, self.decoder, self.pad_id, self.refill = model, decoder, pad_id, refill
        self.keeps = refill
        self.device, self.slots = decoder.device, decoder.max_batch
        self.empty = True  # no row holds a sequence (the cache may be regrown)
        self.pads = [0] * self.slots  # each position's left padding (its first token's index)

    def start(self, length: int) -> None:
        self.decoder.reset()
        self.decoder.reserve(length)
        self.empty = True

    def fits(self, length: int) -> bool:
        return length <= self.decoder.length

    def grow(self, length: int) -> bool:
        return self.decoder.reserve(length, keep=True)

    def cached(self, position: int) -> tuple[int, int]:
        pad = self.pads[position]
        return pad, self.decoder.ends[position] - pad

    def check(self, rows: int) -> None:
        if rows > self.slots:  # it could never take its positions
            raise ValueError(
                f"torch backend: a group of {rows} samples exceeds rollout.max_batch_size "
                f"({self.slots}); raise it or use rollout.decode: dynamic"
            )

    def _slots(self, adapters: list) -> list[int] | None:
        return [a or 0 for a in adapters] if self.decoder.adapters else None

    def prefill(
        self, prompts: list[list[int]], positions: list[int], adapters: list, reuse=None
    ) -> Tensor:
        reuse = reuse or [0] * len(prompts)
        new = [i for i, n in enumerate(reuse) if not n]
        going = [i for i, n in enumerate(reuse) if n]
        self.empty = False
        parts = []
        if new:
            fresh = [prompts[i] for i in new]
            ids, attn, own, slots = shared_prompts(
                fresh, self.pad_id, self.device, [adapters[i] for i in new]
            )
            width = ids.shape[1]
            at = [positions[i] for i in new]
            for p, prompt in zip(at, fresh, strict=True):
                self.pads[p] = width - len(prompt)
            slots = self._slots(slots)
            parts.append(self.decoder.prefill(ids, attn, fan=own, slots=at, adapters=slots))
        if going:
            at = [positions[i] for i in going]
            starts = [self.pads[p] + reuse[i] for p, i in zip(at, going, strict=True)]
            suffixes = [prompts[i][reuse[i] :] for i in going]
            parts.append(self.decoder.extend(at, starts, suffixes))
        if len(parts) == 1:
            return parts[0]
        order = torch.tensor(new + going, device=self.device)
        logits = torch.cat(parts)
        return torch.empty_like(logits).index_copy_(0, order, logits)

    def step(self, tokens: Tensor) -> Tensor:
        return self.decoder.step(tokens)

    def compact(self, keep: Tensor) -> None:
        self.decoder.compact(keep)
        kept = keep.tolist()
        self.pads[: len(kept)] = [self.pads[p] for p in kept]

    def retire(self, positions: list[int], kept=()) -> None:
        # left rows that keep their positions stop walking the cache; kept ones stay where
        # their sequences end
        left = [p for p in positions if p not in self.decoder.retired]
        self.decoder.park([p for p in left if p in kept])
        self.decoder.retire([p for p in left if p not in kept])

    def load(self, slot: int | None, tensors: dict[str, Tensor], lora: LoraSpec) -> None:
        if slot is None:  # the model's own adapter, folded into the decoder's weights
            lora_io.load_adapter_tensors(self.model, tensors)
            self.decoder.refresh()
        else:
            self.decoder.set_adapter(slot, tensors, lora.alpha / lora.r)

    def score(self, ids: list[int], slot: int | None) -> Tensor:
        if len(ids) > self.decoder.length and self.empty:
            self.decoder.reserve(len(ids))
        return self.decoder.score(ids, slot or 0)

    def join(self, slot: int, lora: LoraSpec) -> None:
        pass  # the slot table is sized by the pool's rank: admission checked the run's

    def leave(self, slot: int) -> None:
        self.decoder.set_adapter(slot, None, 1.0)


def decodes_static(rollout: TorchRolloutSpec, device: torch.device, config: PretrainedConfig):
    """Whether rollout.decode asks for the static decoder (auto: on a GPU, for a model it
    supports) rather than the PEFT forward."""
    if rollout.decode == "auto":
        return device.type == "cuda" and supports(config) is None
    return rollout.decode == "static"


def make_source(
    model: nn.Module,
    rollout: TorchRolloutSpec,
    device: torch.device,
    pad_id: int,
    adapters: int = 0,
    max_rank: int = 0,
) -> StepSource:
    """The step source rollout.decode asks for: the static decoder (StaticDecoder says why
    if it cannot take the model), with a slot table of `adapters` slots of rank up to
    `max_rank` for a pool (0: the model's own adapter), or the PEFT forward."""
    if not decodes_static(rollout, device, model.base_model.model.config):
        return CachedForward(model, pad_id, device, rollout.max_batch_size)
    # a CPU run keeps the eager step (no C++ toolchain is assumed)
    compile = "inductor" if rollout.compile and device.type == "cuda" else None
    decoder = StaticDecoder(
        model, rollout.max_batch_size, compile=compile, adapters=adapters, max_rank=max_rank
    )
    return StaticSource(model, decoder, pad_id, rollout.continuous)
