"""ASGI entry: HTTP goes to Django, websockets to the Channels routes of paddock.live."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddock.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs apps ready)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from paddock.live.handshake import (  # noqa: E402
    malformed_handshakes_answered,
    origin_policy,
    refuse_unrouted,
)
from paddock.live.ingest_asgi import ingest_router  # noqa: E402
from paddock.live.routing import websocket_urlpatterns  # noqa: E402
from paddock.live.wscompression import websocket_compression_fast  # noqa: E402

websocket_compression_fast()  # the live fan-out's CPU (live/wscompression.py says why)
malformed_handshakes_answered()  # an oversized handshake gets its 414, not silence

application = ProtocolTypeRouter(
    {
        # the ingest hot path skips Django's request cycle (live/ingest_asgi.py says why)
        "http": ingest_router(django_asgi_app),
        # live/handshake.py: unknown paths refused, the Origin rule, then the session
        "websocket": origin_policy(
            AuthMiddlewareStack(refuse_unrouted(URLRouter(websocket_urlpatterns)))
        ),
    }
)
