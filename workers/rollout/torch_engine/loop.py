"""The decode loop: one batch of rows (rows.py) decoded over a step source (sources.py).

Each turn (one decode step, under the engine's step lock):
1. the live rows advance by one token; after an adapter change (the turn's versions differ
   from those the cache was computed under) their whole prefix is recomputed instead, as
   vLLM does for running requests when its prefix cache is reset, so each token is exactly
   what a trainer forward of the version it is labelled with would give;
2. pending groups are admitted into free slots (finished rows' first) once enough are free,
   prefilled, and their first tokens sampled: the first turn admits the batch's first
   groups, a source of as many slots as rows all of them;
3. finished rows leave the batch once they are a quarter of it and no group waits (their
   cache goes too), else they keep their slots and stop advancing.

With `overlap` (on a GPU), once no group waits for a slot the next step is launched as soon
as this one's tokens are sampled, before the host reads and records them: the step reads
the tokens from device memory, so the GPU computes it while the host copies the tokens out,
checks the stops and appends them. A row that finishes with those tokens has had one step
too many (its cache has room for it: a row never writes past its own budget; the step's
logits of it are never sampled) and stops advancing at the retire or compaction below;
after an adapter change the step run ahead is dropped with the rest of the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import closing

import torch

from ..base import GroupRequest
from .rows import Rows, Stops
from .sources import StepSource


def batches(requests: list[GroupRequest], max_rows: int | None) -> Iterator[list[GroupRequest]]:
    """The requests in batches of at most `max_rows` rows (None: no limit, for a source
    whose freed slots take the next groups), split where the sampling params change. By
    whole groups, so a group's samples share one batch (and its random stream)."""
    chunk: list[GroupRequest] = []
    for req in requests:
        if chunk and (
            req.params != chunk[0].params
            or (max_rows is not None and sum(r.n for r in chunk) + req.n > max_rows)
        ):
            yield chunk
            chunk = []
        chunk.append(req)
    if chunk:
        yield chunk


def _sample(logits, state: Rows, rows: list[int], draw: Callable):
    """One token a row of `rows` and its logprob: greedy, or from the softmax at the
    temperature with noise from each request's own stream."""
    u = index = None
    if not state.params.greedy:
        u, index = state.uniform(logits.shape[1], rows)
    return draw(logits, state.params.temperature, u, index)


def _to_host(tokens: torch.Tensor, logprobs: torch.Tensor):
    """The step's tokens and logprobs copied to the host without waiting for them (pinned
    buffers and an event on a GPU); `wait` gives them once they are there."""
    if tokens.device.type != "cuda":
        return lambda: (tokens, logprobs)
    out = [torch.empty(x.shape, dtype=x.dtype, pin_memory=True) for x in (tokens, logprobs)]
    for host, x in zip(out, (tokens, logprobs), strict=True):
        host.copy_(x, non_blocking=True)
    done = torch.cuda.Event()
    done.record()

    def wait():
        done.synchronize()
        return out

    return wait


def _ahead(state: Rows, live: list[int]) -> bool:
    """Whether the next step may be launched before this one's tokens are recorded: no
    group waits for a slot (an admission would change the next step's rows) and some row
    may go on after them (one that is not at its last token)."""
    return not state.pending and any(state.active[k] and state.left(k) > 1 for k in live)


@torch.no_grad()
def decode(
    state: Rows,
    source: StepSource,
    turns: Generator,
    *,
    draw: Callable,
    stops: Stops,
    compact_below: float,
    overlap: bool = False,
) -> None:
    """Decode every row of `state` to its end, or until `turns` ends (an abort: the rows
    still going are marked so). `turns` yields, once a decode step may run, the adapter
    versions to decode under (an int, or a mapping adapter slot → version for rows that
    name one); the step runs before the next is asked for. `draw`: sampling.draw or its
    compiled form; `compact_below`: the share of live rows at or under which the finished
    ones leave the batch; `overlap`: run the next step ahead of the host's recording (see
    the module docstring)."""
    source.start(state.widest(), max(map(len, state.prompts)) + state.steps)
    tokens, cache_versions = None, None
    ahead = None  # the logits of the step launched ahead, not yet sampled
    with closing(turns):  # the step lock goes with an error
        for versions in turns:
            if tokens is not None:
                live = state.live
                if versions != cache_versions:  # a kept request after an adapter change
                    seqs = [state.sequence(k) for k in live]
                    room = max(map(state.left, live))
                    logits = source.recompute(seqs, room, [state.adapter[k] for k in live])
                else:
                    logits = source.step(tokens) if ahead is None else ahead
                ahead = None
                tokens, logprobs = _sample(logits, state, live, draw)
                host = _to_host(tokens, logprobs)
                if overlap and _ahead(state, live):
                    ahead = source.step(tokens)
                state.record(*host(), versions, live, stops)
            if state.pending and state.room() >= state.admit_at():
                tokens = _admit(state, source, versions, tokens, draw, stops)
            cache_versions = versions
            keep = state.compaction(compact_below)
            if keep is not None:
                index = torch.tensor(keep, device=state.device)
                source.compact(index)
                tokens = tokens[index]
                if ahead is not None:  # the kept rows' logits of the step run ahead
                    ahead = ahead[index]
            else:
                source.retire(state.finished())
    state.abort_unfinished()


def _admit(state: Rows, source: StepSource, versions, tokens, draw, stops: Stops):
    """Prefill the next pending groups that fit into the batch's free slots, sample their
    first tokens, and return the tokens every slot decodes next."""
    slots, new = state.admit()
    prompts = [state.prompts[k] for k in new]
    logits = source.prefill(prompts, slots, [state.adapter[k] for k in new])
    first, logprobs = _sample(logits, state, new, draw)
    state.record(first, logprobs, versions, new, stops)
    if tokens is None:
        return first
    grown = torch.zeros(len(state.live), dtype=tokens.dtype, device=state.device)
    grown[: tokens.shape[0]] = tokens
    grown[torch.tensor(slots, device=state.device)] = first
    return grown
