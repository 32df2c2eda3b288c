"""The bookkeeping of one decode batch: which (request, sample) each row is, which rows hold
a slot of the batch (live, in batch order) and which have not finished (active), which groups
still wait for slots, each request's random stream, and each row's adapter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..base import FinishReason, GroupRequest, GroupResult, Sample, SamplingParams

# A request's noise generator is seeded with its seed and this many times the tokens its
# samples already hold, so a resubmitted partial group draws fresh noise.
_RESUME_STRIDE = 1_000_003


@dataclass(frozen=True)
class Stops:
    """When a row ends: on any EOS id the model declares or a stop string ("stop"), or at
    its budget ("length"). `text` decodes token ids (for the stop strings)."""

    eos_ids: frozenset[int]
    text: Callable[[list[int]], str]

    def reason(self, sample: Sample, token: int, params: SamplingParams) -> FinishReason | None:
        if token in self.eos_ids or self._hit_stop(sample, params.stop):
            return "stop"
        if len(sample.token_ids) >= params.max_new_tokens:
            return "length"
        return None

    def _hit_stop(self, sample: Sample, stop: tuple[str, ...]) -> bool:
        if not stop:
            return False
        text = self.text(sample.token_ids)
        return any(text.endswith(s) for s in stop)


class Rows:
    """One row per sample still to generate (finished partial samples are carried over as
    they are). `slots`: the batch's slots, which groups take as `admit()` gives them (None:
    as many as rows, so every group is admitted at once). `adapters`: each request's adapter
    slot, passed on to the step source (None: the engine's one adapter)."""

    def __init__(
        self,
        requests: list[GroupRequest],
        device: torch.device,
        slots: int | None = None,
        adapters: list[int | None] | None = None,
    ):
        params = requests[0].params
        if any(r.params != params for r in requests):
            raise ValueError("torch backend: one batch must share sampling params")
        self.requests, self.params, self.device = requests, params, device
        self.samples: list[list[Sample]] = []
        self.rows: list[tuple[int, int]] = []  # (request index, sample index)
        self.prompts: list[list[int]] = []  # each row's prompt and partial tokens
        self.adapter: list[int | None] = []
        self.gens: list[torch.Generator] = []
        for i, req in enumerate(requests):
            group = [
                Sample(list(s.token_ids), list(s.logprobs), list(s.versions), None, s.text)
                for s in (req.partial or [Sample() for _ in range(req.n)])
            ]
            self.samples.append(group)
            already = sum(len(s.token_ids) for s in group)
            # On a GPU the noise is drawn there: a CPU draw of [rows, vocab] a step, copied
            # over, cost more than the forward (issue 10).
            gen = torch.Generator(device=device)
            self.gens.append(gen.manual_seed(req.seed + _RESUME_STRIDE * already))
            for j, s in enumerate(group):
                if req.partial is not None and req.partial[j].done:
                    s.finish_reason = req.partial[j].finish_reason
                    continue
                self.rows.append((i, j))
                self.prompts.append(req.prompt_ids + s.token_ids)
                self.adapter.append(None if adapters is None else adapters[i])
        budget = [params.max_new_tokens - len(self.samples[i][j].token_ids) for i, j in self.rows]
        self.steps = max(budget, default=0)
        self.active = [b > 0 for b in budget]
        for k, (i, j) in enumerate(self.rows):
            if not self.active[k]:
                self.samples[i][j].finish_reason = "length"
        # Rows of each request, to draw that request's noise from its own generator: a
        # group's samples then do not depend on which other groups share the batch.
        self.by_req: dict[int, list[int]] = {}
        for k, (i, _) in enumerate(self.rows):
            self.by_req.setdefault(i, []).append(k)
        self._plan: tuple | None = None
        self.slots = slots or len(self.rows)
        self.live: list[int] = []  # the row in each batch position
        self.pending: list[int] = list(self.by_req)  # requests whose rows wait for slots

    # ---------------------------------------------------------------- admission

    def widest(self) -> int:
        """The most rows one group needs at once."""
        return max((len(ks) for ks in self.by_req.values()), default=0)

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

    # ---------------------------------------------------------------- decoding

    def any_active(self) -> bool:
        return any(self.active)

    def left(self, k: int) -> int:
        """Tokens row k may still make."""
        i, j = self.rows[k]
        return self.params.max_new_tokens - len(self.samples[i][j].token_ids)

    def sequence(self, k: int) -> list[int]:
        """Row k's prompt and every token it holds (to recompute its KV cache)."""
        i, j = self.rows[k]
        return self.requests[i].prompt_ids + self.samples[i][j].token_ids

    def record(self, tokens, logprobs, versions, rows: list[int], stops: Stops) -> None:
        """Append a step's tokens ([len(rows)], with their logprobs) to the samples of the
        active ones of `rows` and end those that stop. A token is labelled with the adapter
        version it was decoded under: `versions` itself for a row of the engine's one
        adapter, versions[adapter] for a row of an adapter slot."""
        step_tokens, step_lps = tokens.tolist(), logprobs.tolist()  # one copy each
        for p, k in enumerate(rows):
            if not self.active[k]:
                continue
            i, j = self.rows[k]
            s, tok = self.samples[i][j], step_tokens[p]
            s.token_ids.append(tok)
            s.logprobs.append(step_lps[p])
            adapter = self.adapter[k]
            s.versions.append(versions if adapter is None else versions[adapter])
            reason = stops.reason(s, tok, self.params)
            if reason is not None:
                s.finish_reason, self.active[k] = reason, False

    def compaction(self, below: float) -> list[int] | None:
        """The batch positions to keep when finished rows should leave the batch (they are
        at least 1 - `below` of it, and no group waits for a slot: their KV cache then goes
        too), the live rows cut to them; else None."""
        if self.pending:
            return None
        keep = [p for p, k in enumerate(self.live) if self.active[k]]
        if keep and len(keep) <= below * len(self.live):
            self.live = [self.live[p] for p in keep]
            return keep
        return None

    def finished(self) -> list[int]:
        """Batch positions whose rows have finished but keep their slots."""
        return [p for p, k in enumerate(self.live) if not self.active[k]]

    def abort_unfinished(self) -> None:
        for k, (i, j) in enumerate(self.rows):
            if self.active[k]:  # cut short by an abort
                self.samples[i][j].finish_reason = "abort"

    def results(self, text: Callable[[list[int]], str]) -> list[GroupResult]:
        for group in self.samples:
            for s in group:
                s.text = text(s.token_ids)
        return [
            GroupResult(r.request_id, r.prompt_ids, g)
            for r, g in zip(self.requests, self.samples, strict=True)
        ]

    # ---------------------------------------------------------------- noise

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
