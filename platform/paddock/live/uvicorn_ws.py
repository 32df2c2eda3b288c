"""What the platform changes in uvicorn's websockets-sansio server (the one it runs:
`--ws websockets-sansio`), each reaching into uvicorn's internals where no option exists.
tests/platform/http/test_framework_internals.py fails when uvicorn changes what they rely
on; each is idempotent and returns False (changing nothing) under another server.

- Compression at zlib level 1 (`websocket_compression_fast`). Every metrics message goes
  to every viewer of the run, compressed once per viewer. uvicorn compresses at zlib's
  default level 6, which costs about 0.5 ms for a 35 KB batch message on this machine, a
  tenth of the live path's server CPU per batch; level 1 costs 0.06 ms and still shrinks
  the message about 10x instead of 13x (bench/live_latency.py, docs/performance.md).
- A handshake it cannot parse answered (`malformed_handshakes_answered`), before uvicorn
  0.55 only: for an upgrade request whose request line or headers are too long (over
  websockets' 8 KiB a line) or malformed, the websockets library prepares its refusal (414,
  431 or 400) and stops parsing; uvicorn up to 0.54 only looked at parsed events, so it
  never wrote that refusal nor closed the socket, and the connection stayed open with no
  reply for as long as the client cared to hold it. uvicorn 0.55 answers it itself
  (`handle_handshake_exception`); tests/security/test_ws_handshake.py holds either way."""

from __future__ import annotations

from typing import Any

LEVEL = 1


def _sansio():
    try:
        from uvicorn.protocols.websockets import websockets_sansio_impl as impl
    except ImportError:
        return None
    return impl


def websocket_compression_fast() -> bool:
    """Wrap the factory uvicorn's websockets-sansio protocol builds its permessage-deflate
    extension with, so that it compresses at LEVEL."""
    impl = _sansio()
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


def malformed_handshakes_answered() -> bool:
    """Make a uvicorn that does not answer a handshake it cannot parse answer it; True when
    that is done, or uvicorn does it itself."""
    protocol = getattr(_sansio(), "WebSocketsSansIOProtocol", None)
    if protocol is None:
        return False
    if hasattr(protocol, "handle_handshake_exception") or getattr(
        protocol, "paddock_answers_malformed", False
    ):
        return True
    received = protocol.data_received

    def data_received(self, data: bytes) -> None:
        received(self, data)
        conn = self.conn
        if self.handshake_initiated or conn.handshake_exc is None:
            return
        if not self.transport.is_closing():
            self.transport.write(b"".join(conn.data_to_send()))
            self.handshake_complete = self.close_sent = True
            self.transport.close()

    protocol.data_received = data_received
    protocol.paddock_answers_malformed = True
    return True
