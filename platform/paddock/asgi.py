"""ASGI entry: the platform's doors, each applying the one request policy (http/policy.py).

HTTP: the ingest POSTs are answered by live/ingest_asgi.py around Django's request cycle;
everything else goes to Django's handler in a few request lanes (http/lanes.py), where the
hot GET reads of an API token are answered by api/fast_reads.py before the middleware
chain. Websockets: the handshake's checks (live/handshake.py), then the Channels routes."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddock.settings")

django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from paddock.api.fast_reads import fast_read  # noqa: E402
from paddock.http.body_limits import body_capped  # noqa: E402
from paddock.http.lanes import LanedASGIHandler, switch_interval  # noqa: E402
from paddock.live.handshake import (  # noqa: E402
    origin_policy,
    refuse_unrouted,
    request_policy,
    session_users,
)
from paddock.live.ingest_asgi import ingest_router  # noqa: E402
from paddock.live.routing import websocket_urlpatterns  # noqa: E402
from paddock.live.uvicorn_ws import websocket_compression_fast  # noqa: E402

switch_interval()  # the event loop's share of the GIL (http/lanes.py says why)
websocket_compression_fast()  # the live fan-out's CPU (live/uvicorn_ws.py says why)

django_asgi_app = LanedASGIHandler(fast=fast_read)

application = ProtocolTypeRouter(
    {
        "http": ingest_router(body_capped(django_asgi_app)),
        # live/handshake.py: the request policy, unknown paths refused, the Origin rule,
        # then the session
        "websocket": request_policy(
            origin_policy(session_users(refuse_unrouted(URLRouter(websocket_urlpatterns))))
        ),
    }
)
