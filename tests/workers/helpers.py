"""Small test doubles shared by the data-plane tests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable


class SlowModel:
    """Delegates to an engine's model, sleeping before each forward, so that publishes of a
    whole training run land while requests are in flight (the loop tests' workload; a test
    of one control call holds the decode with `Parked` instead)."""

    def __init__(self, model, delay_s: float):
        self._model, self._delay = model, delay_s

    def __call__(self, *args, **kwargs):
        time.sleep(self._delay)
        return self._model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


class Parked:
    """Holds the torch engine's decode thread between two decode steps, from the first turn
    where `when()` holds until `release()`: a test lands a pause, an abort or an adapter
    load there while rows are certainly in flight (an event, never a delay). The step lock
    is free while it is held, so the engine's control calls go through."""

    def __init__(self, engine, when: Callable[[], bool]):
        self.engine, self.when = engine, when
        self._reached, self._go = threading.Event(), threading.Event()
        engine.on_turn = self._on_turn

    def _on_turn(self) -> None:
        if not self._go.is_set() and self.when():
            self._reached.set()
            self._go.wait()

    async def reached(self, timeout_s: float = 120) -> None:
        """Until the decode thread is held (a bound for a hang, not a delay)."""
        if not await asyncio.to_thread(self._reached.wait, timeout_s):
            raise TimeoutError(f"the decode never reached the point to hold in {timeout_s} s")

    def release(self) -> None:
        self.engine.on_turn = None
        self._go.set()
