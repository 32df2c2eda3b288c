"""Small test doubles shared by the data-plane tests."""

from __future__ import annotations

import time


class SlowModel:
    """Delegates to an engine's model, sleeping before each forward, so that a test can land
    a pause or a weight update while requests are in flight."""

    def __init__(self, model, delay_s: float):
        self._model, self._delay = model, delay_s

    def __call__(self, *args, **kwargs):
        time.sleep(self._delay)
        return self._model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)
