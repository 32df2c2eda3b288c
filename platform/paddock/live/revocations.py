"""Credentials that stopped working reach the open streams of this process: one listener per
process (per event loop) on the `access` group, which hands each `access.changed` message
(live/broadcast.py) to every open stream; each decides whether it was its credentials
(live/access.py: access_change_applies).

One subscription per process rather than a group membership per stream: a stream's
connect and close then cost no channel-layer call for it, where a group_add or discard
waits for the layer's lock behind every other subscription of the process."""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Protocol

from channels.layers import get_channel_layer

from .groups import ACCESS_GROUP

log = logging.getLogger(__name__)


class Stream(Protocol):
    async def access_changed(self, event: dict[str, Any]) -> None: ...


_streams: weakref.WeakSet = weakref.WeakSet()
_listeners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop → task


def watch(stream: Stream) -> None:
    """Hand `stream` every `access.changed` message until `unwatch` (or it is gone)."""
    _streams.add(stream)
    loop = asyncio.get_running_loop()
    listener = _listeners.get(loop)
    if listener is None or listener.done():
        _listeners[loop] = loop.create_task(_listen())


def unwatch(stream: Stream) -> None:
    _streams.discard(stream)


async def _listen() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel("access.")
    await layer.group_add(ACCESS_GROUP, channel)
    while True:
        event = await layer.receive(channel)
        for stream in list(_streams):
            try:
                await stream.access_changed(event)
            except Exception:  # one stream's failure must not stop the others' closes
                log.exception("a stream failed to act on revoked access")
