"""Contiguous shares of a sequence: how a batch is split over trainer ranks and a list of
group requests over engine replicas (groups stay whole and in order)."""

from __future__ import annotations


def contiguous_shares(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) of `parts` contiguous shares of n items; sizes differ by at most one,
    the larger shares first."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out
