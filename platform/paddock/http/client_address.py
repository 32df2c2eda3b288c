"""The client's address: the one function the rate limits, the audit log and the actor of
a request (REST, websocket, ingest) read it from.

A proxy in front of the platform puts the client's address in `X-Forwarded-For`; anyone
else can write that header too. So the header is believed only when the peer that sent
the request is one of `PADDOCK_TRUSTED_PROXIES` (addresses or CIDR blocks, empty by
default): then the client is the last address of the header that is not itself a trusted
proxy (each proxy appends the address it saw, so the entries left of the first untrusted
one from the right were written by the client and prove nothing). Otherwise the client is
the peer, and the header is ignored: a guesser rotating it is still one address to the
login limit, and the audit log records where a request really came from.

The ASGI server must not rewrite the peer from the header itself (uvicorn does so by
default for 127.0.0.1: `paddock up` and the images run it with `--no-proxy-headers`)."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def trusted_proxies() -> tuple[Network, ...]:
    return _networks(tuple(getattr(settings, "PADDOCK_TRUSTED_PROXIES", ())))


def _address(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not text:
        return None
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [::1]:443, as some proxies write it
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # 10.0.0.1:443
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:10.0.0.1 is 10.0.0.1
    return mapped or address


def _trusted(address, networks: tuple[Network, ...]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


def client_address(peer: str | None, forwarded_for: str | None = None) -> str | None:
    """The client of a request that `peer` sent with this `X-Forwarded-For` (or None)."""
    networks = trusted_proxies()
    address = _address(peer)
    if address is None:
        return None
    if not networks or not forwarded_for or not _trusted(address, networks):
        return str(address)
    for entry in reversed(forwarded_for.split(",")):
        hop = _address(entry)
        if hop is None:
            break  # garbage from the client's side of the chain: stop at the last good hop
        address = hop
        if not _trusted(hop, networks):
            break
    return str(address)


def request_client_address(request) -> str | None:
    """The client of a Django request (REMOTE_ADDR is the peer: see the docstring)."""
    meta = request.META
    return client_address(meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR"))


def scope_client_address(scope) -> str | None:
    """The client of an ASGI scope (a websocket, the ingest route)."""
    peer = (scope.get("client") or (None, None))[0]
    forwarded = [v for k, v in scope.get("headers") or [] if k.lower() == b"x-forwarded-for"]
    return client_address(peer, b",".join(forwarded).decode("latin-1") if forwarded else None)
