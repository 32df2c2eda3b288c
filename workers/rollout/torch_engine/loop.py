"""The decode loop: the engine's batch (rows.py) decoded over a step source (sources.py), for
a run alone and for a pool of runs alike: each group decodes under its own adapter.

Each turn (one decode step, under the engine's step lock; between two turns the engine
queues new groups and takes the rows of a paused run out of the batch):
1. the rows advance by one token, each sampled from its own group's random stream at its
   group's temperature and labelled with its adapter's version;
2. waiting groups are admitted into free positions (finished or cut rows', first) once
   enough are free, prefilled (a group cut from the batch with the tokens it holds: the
   whole prefix under the adapter it now has, as vLLM recomputes running requests after a
   prefix-cache reset), and their first tokens sampled. A source that cannot take rows
   into a running batch (the PEFT forward) admits into an empty one only;
3. free positions leave the batch once the live rows are at most `compact_below` of it and
   no group is about to take them (their cache goes too), else they stop advancing.

A finished row of a `continued` request (an episode's turn) may keep its cache in its
position where the source `keeps` (rows.py: kept caches): the episode's next turn, whose
prompt starts with that row's sequence, takes the position back and is prefilled with its
new tokens only; kept positions move with compaction like live rows.

With `overlap` (on a GPU), once no group waits for a position the next step is launched as
soon as this one's tokens are sampled, before the host reads and records them: the step
reads the tokens from device memory, so the GPU computes it while the host copies the
tokens out, checks the stops and appends them. A row that finishes with those tokens has had
one step too many (its cache has room for it: a row never writes past its own budget; the
step's logits of it are never sampled) and stops advancing at the retire or compaction
below; a row cut meanwhile leaves its logits of that step unsampled too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing

import torch

from .rows import Group, Rows, Stops
from .sources import StepSource


def _sample(logits, state: Rows, positions: list[int], draw: Callable):
    """One token a row at `positions` and its logprob: from the softmax at its group's
    temperature with noise from its group's own stream, or the argmax for greedy groups
    (logprobs still under the temperature)."""
    temperature, u, index, greedy = state.sampling(logits.shape[1], positions)
    if greedy is True or u is None:
        return draw(logits, temperature)
    tokens, logprobs = draw(logits, temperature, u, index)
    if greedy is not None:  # greedy and sampled rows in one step
        top, top_lp = draw(logits, temperature)
        tokens, logprobs = torch.where(greedy, top, tokens), torch.where(greedy, top_lp, logprobs)
    return tokens, logprobs


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


def _ahead(state: Rows) -> bool:
    """Whether the next step may be launched before this one's tokens are recorded: no
    group waits for a position (an admission would change the next step's rows) and some
    row may go on after them (one that is not at its last token)."""
    return not state.admissible() and any(r is not None and r[0].left(r[1]) > 1 for r in state.live)


@torch.no_grad()
def decode(
    state: Rows,
    source: StepSource,
    turns: Iterator,
    *,
    draw: Callable,
    stops: Stops,
    compact_below: float,
    overlap: bool = False,
) -> None:
    """Decode the groups of `state` until `turns` ends. `turns` yields once a turn may run
    (the step runs before the next is asked for); `draw`: sampling.draw or its compiled
    form; `compact_below`: the share of live rows at or under which the free positions
    leave the batch; `overlap`: run the next step ahead of the host's recording (see the
    module docstring)."""
    tokens = ahead = None  # each position's next input; the logits of a step run ahead
    with closing(turns):  # the step lock goes with an error
        for _ in turns:
            if state.trim():  # every row of the batch was cut between two turns
                tokens = ahead = None
            if tokens is not None:
                positions = list(range(len(state.live)))
                logits = source.step(tokens) if ahead is None else ahead
                tokens, logprobs = _sample(logits, state, positions, draw)
                host = _to_host(tokens, logprobs)
                ahead = source.step(tokens) if overlap and _ahead(state) else None
                state.record(*host(), positions, stops)
                if state.trim():  # every row has finished
                    tokens = ahead = None
            chosen = state.choose(source.slots, source.one_adapter, source.fits, source.refill,
                                  source.grow, source.cached)  # fmt: skip
            if chosen:
                tokens = _admit(state, source, chosen, tokens, draw, stops)
            if state.trim():  # nothing decodes on: the batch's cache goes, unless kept
                tokens = ahead = None
                if not state.live:
                    source.start(0)
                continue
            refilling = source.refill and bool(state.admissible())
            keep = state.compaction(compact_below, refilling)
            if keep is not None:
                index = torch.tensor(keep, device=state.device)
                source.compact(index)
                tokens = tokens[index]
                if ahead is not None:  # the kept rows' logits of the step run ahead
                    ahead = ahead[index]
            source.retire(state.free(), state.kept)


def _admit(state: Rows, source: StepSource, groups: list[Group], tokens, draw, stops: Stops):
    """Prefill `groups` into free positions (a new batch when it is empty: its cache sized
    for every group waiting), sample their first tokens, and return the tokens every
    position decodes next."""
    if not state.live:
        source.start(state.extent(state.admissible()))
    positions, rows, reuse = state.admit(groups, source.slots, source.cached)
    prompts = [g.sequence(j) for g, j in rows]
    slots = [g.adapter.slot for g, _ in rows]
    logits = source.prefill(prompts, positions, slots, reuse if any(reuse) else None)
    first, logprobs = _sample(logits, state, positions, draw)
    state.record(first, logprobs, positions, stops)
    # every position's next input: the running rows' tokens, the admitted rows' first (a
    # free or kept position's is never read)
    grown = torch.zeros(len(state.live), dtype=first.dtype, device=state.device)
    if tokens is not None:
        grown[: tokens.shape[0]] = tokens
    grown[torch.tensor(positions, device=state.device)] = first
    return grown
