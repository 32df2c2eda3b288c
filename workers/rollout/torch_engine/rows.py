"""The bookkeeping of the engine's decode batch: the groups waiting for slots, the row each
batch position holds, each group's samples, random stream and sampling params, and the
adapter each group decodes under.

A group is one request (one prompt × n samples) of one adapter. It is admitted whole: its
unfinished samples become rows of the batch together, and leave it together when its
adapter's run is paused (`cut`), to be admitted again later with the tokens they hold.

Kept caches (a source that `keeps`, for requests marked `continued`: an episode's turn,
whose next turn's prompt starts with this turn's sequence): a finished row leaves its
position free but its cache kept (`kept`), and a later row whose sequence starts with the
kept one, under the same adapter at the same version, takes that position and is prefilled
from where the cache ends. A kept position is taken by a new group only when no other is
free; it is let go after _KEEP_TURNS decode turns, when its adapter's rows are cut, or when
a group that needs a new batch finds only kept positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..base import FinishReason, GroupRequest, GroupResult, Sample, SamplingParams

# A request's noise generator is seeded with its seed and this many times the tokens its
# samples already hold, so a resubmitted partial group draws fresh noise.
_RESUME_STRIDE = 1_000_003
# Decode turns a kept cache waits for its continuation: about a second of decoding on a GPU,
# longer than a tool call should take; a longer wait prefills the episode anew.
_KEEP_TURNS = 64


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


@dataclass(eq=False)
class Adapter:
    """One adapter of the engine as the decode loop sees it: its slot in the step source
    (None: the engine's one adapter), the version it serves (each token is labelled with
    it), whether its groups are held out of the batch (its run paused with keep), and how
    many tokens were decoded under it."""

    slot: int | None
    version: int = -1
    held: bool = False
    tokens: int = 0


class Group:
    """One request in the engine: its samples (a partial request's kept as they are), the
    samples still to decode (`todo`, each a row while admitted), its random stream, and
    `to`: where its result goes once every sample has finished or it was cut short (the
    engine's business)."""

    def __init__(self, req: GroupRequest, adapter: Adapter, device: torch.device, to: Any):
        self.req, self.params, self.adapter, self.to = req, req.params, adapter, to
        self.samples = [
            Sample(list(s.token_ids), list(s.logprobs), list(s.versions), None, s.text)
            for s in (req.partial or [Sample() for _ in range(req.n)])
        ]
        for j, s in enumerate(self.samples):
            if req.partial is not None and req.partial[j].done:
                s.finish_reason = req.partial[j].finish_reason
            elif len(s.token_ids) >= self.params.max_new_tokens:
                s.finish_reason = "length"
        already = sum(len(s.token_ids) for s in self.samples)
        # On a GPU the noise is drawn there: a CPU draw of [rows, vocab] a step, copied
        # over, cost more than the forward (issue 10).
        self.gen = torch.Generator(device=device).manual_seed(req.seed + _RESUME_STRIDE * already)
        self.todo = [j for j, s in enumerate(self.samples) if s.finish_reason is None]
        self.live = 0  # its rows in the batch now

    def sequence(self, j: int) -> list[int]:
        """Sample j's prompt and every token it holds (what its row is prefilled with)."""
        return self.req.prompt_ids + self.samples[j].token_ids

    def left(self, j: int) -> int:
        """Tokens sample j may still make."""
        return self.params.max_new_tokens - len(self.samples[j].token_ids)

    def result(self, text: Callable[[list[int]], str]) -> GroupResult:
        for s in self.samples:
            s.text = text(s.token_ids)
        return GroupResult(self.req.request_id, self.req.prompt_ids, self.samples)


Row = tuple[Group, int]  # (group, sample index)


@dataclass(frozen=True)
class Kept:
    """A finished row's cache kept in its position: the sequence it was made from (the
    source holds its first tokens), its adapter and version, and the turn it was kept."""

    adapter: Adapter
    version: int
    sequence: tuple[int, ...]
    turn: int


class Rows:
    """The batch and the queue. `live`: the row each batch position holds (None: a free
    position, its row finished or cut; the step source still computes it until the
    position is taken or compacted away). `pending`: groups waiting for positions, in
    order; those of a held adapter stay there until it is released."""

    def __init__(self, device: torch.device, keeps: bool = False):
        """`keeps`: the step source may keep finished rows' caches (see the module
        docstring)."""
        self.device, self.keeps = device, keeps
        self.pending: list[Group] = []
        self.live: list[Row | None] = []
        self.done: list[Group] = []  # groups whose samples have all ended, to hand back
        self.kept: dict[int, Kept] = {}  # free positions whose caches are kept
        self._index: dict[tuple[int, int], set[int]] = {}  # (length, last token) → kept
        self.turn = 0  # decode turns so far (each record of a step's tokens)
        self._plan: tuple | None = None  # the noise plan of the positions as they are
        self._moved = 0  # bumped whenever a position changes hands (invalidates the plan)

    # ---------------------------------------------------------------- the queue

    def admissible(self) -> list[Group]:
        return [g for g in self.pending if not g.adapter.held]

    def empty(self) -> bool:
        """No row in the batch and no group waiting (held ones included)."""
        return not self.pending and not any(self.live)

    def busy(self) -> bool:
        """A row to decode or a group to admit."""
        return any(self.live) or any(not g.adapter.held for g in self.pending)

    def free(self) -> list[int]:
        """Free positions (finished or cut rows'), in order."""
        return [p for p, r in enumerate(self.live) if r is None]

    def any_live(self) -> bool:
        return any(self.live)  # a row is a tuple, a free position None

    # ---------------------------------------------------------------- admission

    def choose(
        self,
        slots: int,
        one_adapter: bool,
        fits: Callable[[int], bool],
        refill: bool,
        grow: Callable[[int], bool],
        cached: Callable[[int], tuple[int, int]],
    ) -> list[Group]:
        """The next admissible groups that fit the batch now, in order: whole groups into
        free positions (or, into an empty batch, up to `slots` rows: at least one group).
        A source that takes rows into a running batch (`refill`) admits once the free
        positions are worth a prefill: the next group's rows, and an eighth of the batch
        unless fewer rows wait or no row is left decoding. `one_adapter`: rows of one
        adapter a batch. `fits(length)`: whether rows of `length` positions fit the batch's
        cache as it is; where the batch holds kept caches, `grow(length)` may make them fit
        (else a group that does not fit waits for the batch to drain). `cached`: the
        source's (first index, tokens held) of a kept position."""
        waiting = self.admissible()
        if not waiting:
            return []
        running = self.any_live()
        if running and not refill:
            return []
        adapter = None
        if one_adapter:
            adapter = next((r[0].adapter for r in self.live if r is not None), None)
            adapter = adapter or waiting[0].adapter
            waiting = [g for g in waiting if g.adapter is adapter]
            if not waiting:
                return []
        held = running or bool(self.kept)  # positions hold caches to keep
        # free positions (kept ones included) and those past the last live row
        room = self.live.count(None) + slots - len(self.live) if held else slots
        if running:
            rows = sum(len(g.todo) for g in waiting)
            if room < max(len(waiting[0].todo), min(slots // 8, rows)):
                return []
        chosen, taken = [], 0
        width = left = 0
        for g in waiting:
            if chosen and taken + len(g.todo) > room:
                break
            if held:
                w = max(width, max(self._width(g, j, cached) for j in g.todo))
                lf = max(left, max(map(g.left, g.todo)))
                if not fits(w + lf) and not (self.kept and grow(w + lf)):
                    break
                width, left = w, lf
            chosen.append(g)
            taken += len(g.todo)
        if not chosen and not running and self.kept:
            # only kept caches stand in the way of a group that needs a new batch
            self.forget()
            return self.choose(slots, one_adapter, fits, refill, grow, cached)
        return chosen

    def _width(self, g: Group, j: int, cached) -> int:
        """Cache positions row (g, j) takes before its first new token: its sequence, after
        the kept row's padding where it continues one."""
        p = self._continues(g, j)
        return len(g.sequence(j)) + (0 if p is None else cached(p)[0])

    def admit(
        self, groups: list[Group], slots: int, cached: Callable[[int], tuple[int, int]]
    ) -> tuple[list[int], list[Row], list[int]]:
        """Give `groups` batch positions: a row that continues a kept cache takes its
        position; the others free ones first, then past the last live row (up to `slots`),
        then the longest-kept caches' positions. Returns (positions, rows, reuse), aligned:
        reuse, the tokens of a row's sequence its position's cache holds (0: none)."""
        rows = [(g, j) for g in groups for j in g.todo]
        reuse = [0] * len(rows)
        taken: dict[int, int] = {}  # row → kept position it continues
        for i, (g, j) in enumerate(rows):
            p = self._continues(g, j)
            if p is not None:
                held = min(cached(p)[1], len(g.sequence(j)) - 1)
                self._drop(p)
                if held > 0:
                    taken[i], reuse[i] = p, held
        free = [p for p in self.free() if p not in self.kept and p not in taken.values()]
        oldest = sorted(self.kept, key=lambda p: self.kept[p].turn)
        positions = []
        for i, row in enumerate(rows):
            if i in taken:
                p = taken[i]
            elif free:
                p = free.pop(0)
            elif len(self.live) < slots or not oldest:
                p = len(self.live)
                self.live.append(None)
            else:
                p = oldest.pop(0)
                self._drop(p)
            self.live[p] = row
            positions.append(p)
        for g in groups:
            self.pending.remove(g)
            g.live = len(g.todo)
        self._moved += 1
        return positions, rows, reuse

    # ---------------------------------------------------------------- kept caches

    def _keep(self, p: int, g: Group, j: int) -> None:
        seq = tuple(g.sequence(j))
        self.kept[p] = Kept(g.adapter, g.adapter.version, seq, self.turn)
        self._index.setdefault((len(seq), seq[-1]), set()).add(p)

    def _drop(self, p: int) -> None:
        k = self.kept.pop(p)
        key = (len(k.sequence), k.sequence[-1])
        self._index[key].discard(p)
        if not self._index[key]:
            del self._index[key]

    def _continues(self, g: Group, j: int) -> int | None:
        """The kept position whose sequence row (g, j)'s starts with (same adapter and
        version), if any."""
        if not self.kept:
            return None
        seq = g.sequence(j)
        for n, last in self._index:
            if n > len(seq) or seq[n - 1] != last:
                continue
            head = tuple(seq[:n])
            for p in self._index[(n, last)]:
                k = self.kept[p]
                if k.sequence == head and k.adapter is g.adapter and k.version == g.adapter.version:
                    return p
        return None

    def forget(self) -> None:
        """Let go of the kept caches; an empty batch then forgets its positions."""
        for p in list(self.kept):
            self._drop(p)
        self.trim()

    def _expire(self) -> None:
        for p in [p for p, k in self.kept.items() if self.turn - k.turn > _KEEP_TURNS]:
            self._drop(p)

    # ---------------------------------------------------------------- decoding

    def record(self, tokens, logprobs, positions: list[int], stops: Stops) -> None:
        """Append a step's tokens ([len(positions)], with their logprobs) to the samples of
        the rows at `positions`, each labelled with its adapter's version, and free the
        positions of rows that end; a group whose samples have all ended goes to `done`."""
        step_tokens, step_lps = tokens.tolist(), logprobs.tolist()  # one copy each
        self.turn += 1
        for p, tok, lp in zip(positions, step_tokens, step_lps, strict=True):
            row = self.live[p]
            if row is None:
                continue
            g, j = row
            s = g.samples[j]
            s.token_ids.append(tok)
            s.logprobs.append(lp)
            s.versions.append(g.adapter.version)
            g.adapter.tokens += 1
            reason = stops.reason(s, tok, g.params)
            if reason is not None:
                # its position is free; the noise plan keeps it (its group draws for all
                # its rows anyway) until positions move: no rebuild a finished row
                s.finish_reason = reason
                self.live[p] = None
                if self.keeps and g.req.continued:
                    self._keep(p, g, j)
                g.live -= 1
                if not g.live:
                    self.done.append(g)

    def trim(self) -> bool:
        """True if no row decodes. An empty batch forgets its positions (the source starts
        anew at the next admission) unless it keeps caches."""
        if self.any_live():
            return False
        if not self.kept and self.live:
            self.live = []
            self._moved += 1
        return True

    def compaction(self, below: float, refilling: bool) -> list[int] | None:
        """The positions to keep when the free ones should leave the batch (the live rows
        are at most `below` of it, and no group is about to take the free positions:
        `refilling`), the batch cut to them; else None."""
        if refilling:
            return None
        self._expire()
        keep = [p for p, r in enumerate(self.live) if r is not None or p in self.kept]
        if keep and len(keep) <= below * len(self.live):
            self.live = [self.live[p] for p in keep]
            kept = [(i, self.kept[p]) for i, p in enumerate(keep) if p in self.kept]
            self.kept, self._index = {}, {}
            for i, k in kept:  # the kept caches move with their positions
                self.kept[i] = k
                self._index.setdefault((len(k.sequence), k.sequence[-1]), set()).add(i)
            self._moved += 1
            return keep
        return None

    # ---------------------------------------------------------------- cuts

    def cut(self, adapter: Adapter, keep: bool) -> list[Group]:
        """Take `adapter`'s groups out of the batch. `keep`: back to the front of the queue
        with the tokens they hold (admitted again, prefilled with them, once the adapter may
        decode); else their unfinished samples end ("abort") and they leave the queue too.
        Returns the groups that ended."""
        out: dict[int, Group] = {}
        for p in [p for p, k in self.kept.items() if k.adapter is adapter]:
            self._drop(p)
        for p, row in enumerate(self.live):
            if row is not None and row[0].adapter is adapter:
                self.live[p] = None
                out.setdefault(id(row[0]), row[0])
        self._moved += 1
        cut = list(out.values())
        for g in cut:
            g.live = 0
            g.todo = [j for j, s in enumerate(g.samples) if s.finish_reason is None]
        if keep:
            self.pending[:0] = cut
            return []
        queued = [g for g in self.pending if g.adapter is adapter]
        self.pending = [g for g in self.pending if g.adapter is not adapter]
        for g in cut + queued:
            for s in g.samples:
                if s.finish_reason is None:
                    s.finish_reason = "abort"
        return cut + queued

    def extent(self, groups: list[Group]) -> int:
        """Cache positions the rows of `groups` need when prefilled together: the widest
        sequence (they are padded to it) and the most tokens any of them may still make."""
        rows = [(g, j) for g in groups for j in g.todo]
        return max(len(g.sequence(j)) for g, j in rows) + max(g.left(j) for g, j in rows)

    def groups(self) -> list[Group]:
        """Every group in the engine (batch and queue)."""
        seen = {id(g): g for g in self.pending}
        for row in self.live:
            if row is not None:
                seen.setdefault(id(row[0]), row[0])
        return list(seen.values())

    # ---------------------------------------------------------------- sampling

    def sampling(self, vocab: int, positions: list[int]):
        """What a step's draw needs for the rows at `positions`: (temperature, u, index,
        greedy). temperature: one float when the rows share it, else [n, 1]; u, index:
        draw()'s uniform draws and each row's (None when no row samples); greedy: None,
        or a [n] mask of the rows that take the argmax (True: all of them).

        Each group with a row among them draws for all its rows from its own generator, so
        a row's draws depend neither on the other groups in the batch nor on when its
        group's other rows finished or when it was admitted. All draws land in one buffer:
        one launch a group."""
        key = (self._moved, positions)
        if self._plan is None or self._plan[0] != key:
            self._plan = ((self._moved, list(positions)), *self._make_plan(positions))
        _, temperature, drawing, total, index, greedy = self._plan
        if not drawing:
            return temperature, None, None, greedy
        u = torch.empty((total, vocab), device=self.device)
        for g, at in drawing:
            u[at : at + len(g.todo)].uniform_(generator=g.gen)
        return temperature, u, index, greedy

    def _make_plan(self, positions: list[int]):
        rows = [self.live[p] for p in positions]  # None: free (taken again only by admit)
        groups = [r[0] for r in rows if r is not None]
        temps = {g.params.temperature for g in groups} or {1.0}
        drawing: dict[int, tuple[Group, int]] = {}
        index, at = [0] * len(rows), 0
        greedy = [True] * len(rows)
        for i, row in enumerate(rows):
            if row is None or row[0].params.greedy:
                continue
            g, j = row
            greedy[i] = False
            if id(g) not in drawing:
                drawing[id(g)] = (g, at)
                at += len(g.todo)
            index[i] = drawing[id(g)][1] + g.todo.index(j)
        if len(temps) == 1:
            temperature = temps.pop()
        else:
            per_row = [r[0].params.temperature if r is not None else 1.0 for r in rows]
            temperature = torch.tensor(per_row, device=self.device)[:, None]
        mask = None
        if all(greedy):
            mask = True
        elif any(g and r is not None for g, r in zip(greedy, rows, strict=True)):
            mask = torch.tensor(greedy, device=self.device)
        index_t = torch.tensor(index, device=self.device) if drawing else None
        return temperature, list(drawing.values()), at, index_t, mask
