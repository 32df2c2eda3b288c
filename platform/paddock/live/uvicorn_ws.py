"""Websocket compression at zlib level 1 in uvicorn's websockets-sansio server (the one the
platform runs: `--ws websockets-sansio`), reaching into uvicorn where it has no option for
the level; tests/platform/http/test_framework_internals.py fails when uvicorn changes what
this relies on.

Why: every metrics message goes to every viewer of the run, compressed once per viewer.
uvicorn compresses at zlib's default level 6, which costs about 0.5 ms for a 35 KB batch
message on this machine, a tenth of the live path's server CPU per batch; level 1 costs
0.06 ms and still shrinks the message about 10x instead of 13x (bench/live_latency.py,
docs/performance.md).

(A handshake uvicorn cannot parse, too long or malformed, it answers itself since 0.55,
which the platform requires: tests/security/test_ws_handshake.py.)"""

from __future__ import annotations

from typing import Any

LEVEL = 1


def websocket_compression_fast() -> bool:
    """Wrap the factory uvicorn's websockets-sansio protocol builds its permessage-deflate
    extension with, so that it compresses at LEVEL. Idempotent; False when uvicorn or that
    protocol is not there (another server), leaving everything as it was."""
    try:
        from uvicorn.protocols.websockets import websockets_sansio_impl as impl
    except ImportError:
        return False
    factory = getattr(impl, "ServerPerMessageDeflateFactory", None)
    if factory is None:
        return False
    if getattr(factory, "paddock_level", None) == LEVEL:
        return True

    class FastDeflateFactory(factory):
        paddock_level = LEVEL

        def __init__(self, *args: Any, compress_settings: dict | None = None, **kwargs: Any):
            settings = {**(compress_settings or {}), "level": LEVEL}
            super().__init__(*args, compress_settings=settings, **kwargs)

    impl.ServerPerMessageDeflateFactory = FastDeflateFactory
    return True
