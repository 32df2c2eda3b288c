"""The GIL switch interval while runs are in flight in this process, set and given back.

`sys.setswitchinterval` is process-wide. A run sets it for its lifetime only, so that code
which runs a spec in-process (a test, a notebook, a pool's driver between members) gets
its own interval back when the last run ends. Several runs at once in one process (a pool's
members, each a coroutine of `run_training`) share one setting: the first sets it, the last
one out restores what was there before."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_saved: float | None = None


@contextmanager
def held_switch_interval(seconds: float | None) -> Iterator[None]:
    """Hold the interval at `seconds` while inside (None: leave it as it is)."""
    global _holders, _saved
    if seconds is None:
        yield
        return
    with _lock:
        if _holders == 0:
            _saved = sys.getswitchinterval()
        _holders += 1
        sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _saved is not None:
                sys.setswitchinterval(_saved)
                _saved = None
