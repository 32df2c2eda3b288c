"""The egress policy: where a job (or the platform) may connect for a URL that a user wrote.

A spec names URLs (a reward service, an environment server, an MLflow tracking server) that
a worker then calls from inside the cluster's network, where the cloud's metadata service,
the Ray dashboard and every internal service answer. So every client that calls a user's URL
goes through this one policy (docs/security.md):

- the scheme is http or https and the port one of the allowed ports (80, 443 and 1024-65535
  unless the operator says otherwise), with no user:password part;
- every address the host resolves to is a global unicast address: private, loopback,
  link-local, shared (CGNAT), multicast, reserved and the cloud metadata addresses are
  refused, unless the operator allows a network that holds them
  (`PADDOCK_EGRESS_ALLOW_NETWORKS`, e.g. `127.0.0.0/8` for tests or `10.0.0.0/8` for the
  team services of a private cloud). A metadata address stays refused unless it is named
  on its own (`169.254.169.254/32`);
- the connection goes to an address that was checked (the session's resolver checks what it
  resolves; a literal IP is checked before the request), so a name that resolves to a public
  address when checked and to a private one when used cannot slip through;
- redirects are refused (a POST turned into a GET towards another host is never followed);
- errors name the host, the status and the reason the policy gives, never the reply's body.

The operator sets the policy on the platform (PADDOCK_EGRESS_ALLOW_NETWORKS,
PADDOCK_EGRESS_PORTS); dispatch hands the same variables to every job, and `paddock train`
reads them from its own environment. Light: the standard library only, aiohttp imported
where a session is made.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "ENV_ALLOW_NETWORKS",
    "ENV_PORTS",
    "EgressPolicy",
    "EgressRefused",
    "Target",
    "egress_session",
]

ENV_ALLOW_NETWORKS = "PADDOCK_EGRESS_ALLOW_NETWORKS"
ENV_PORTS = "PADDOCK_EGRESS_PORTS"
DEFAULT_PORTS = "80,443,1024-65535"
SCHEMES = ("http", "https")
# cloud metadata services (AWS, GCP and Azure share 169.254.169.254; AWS's IPv6 one;
# Alibaba's): refused even inside an allowed network unless that network is the address
METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
REDIRECTS = frozenset({301, 302, 303, 307, 308})

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(ValueError):
    """The policy refuses this URL or address; the message says which rule, and names the
    host, never a reply's body."""


@dataclass(frozen=True)
class Target:
    """What a URL points at, as the policy read it."""

    scheme: str
    host: str  # lower case, IPv6 without brackets
    port: int


def _ports(raw: str) -> tuple[tuple[int, int], ...]:
    spans = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            span = (int(low), int(high) if sep else int(low))
        except ValueError:
            raise ValueError(f"{ENV_PORTS}: {part!r} is not a port or a range a-b") from None
        if not 1 <= span[0] <= span[1] <= 65535:
            raise ValueError(f"{ENV_PORTS}: {part!r} is outside 1-65535")
        spans.append(span)
    return tuple(spans)


def _networks(raw: str) -> tuple[Network, ...]:
    out = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(
                f"{ENV_ALLOW_NETWORKS}: {part!r} is not an IP address or a CIDR block"
            ) from None
    return tuple(out)


def _plain(ip: Address) -> Address:
    # ::ffff:127.0.0.1 is 127.0.0.1 to the kernel: judge the IPv4 address it carries
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@dataclass(frozen=True)
class EgressPolicy:
    """Which URLs and addresses a user's URL may reach. The default refuses every address
    that is not global unicast; `allow_networks` lets some in."""

    ports: tuple[tuple[int, int], ...] = field(default_factory=lambda: _ports(DEFAULT_PORTS))
    allow_networks: tuple[Network, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EgressPolicy:
        """The policy of PADDOCK_EGRESS_ALLOW_NETWORKS and PADDOCK_EGRESS_PORTS (a bad
        entry raises ValueError naming it: a typo must not open or close egress silently)."""
        environ = os.environ if environ is None else environ
        return cls(
            ports=_ports(environ.get("PADDOCK_EGRESS_PORTS") or DEFAULT_PORTS),
            allow_networks=_networks(environ.get("PADDOCK_EGRESS_ALLOW_NETWORKS") or ""),
        )

    def to_env(self) -> dict[str, str]:
        """The variables that give a child process (a job) this same policy."""
        return {
            ENV_PORTS: ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ports),
            ENV_ALLOW_NETWORKS: ",".join(str(n) for n in self.allow_networks),
        }

    # --- the checks ---------------------------------------------------------------------

    def address_refusal(self, ip: Address | str) -> str | None:
        """What kind of address the policy refuses `ip` as ("a loopback address"), or None
        when it allows a connection to it."""
        ip = _plain(ipaddress.ip_address(ip))
        if ip in METADATA:
            named = any(n.num_addresses == 1 and ip in n for n in self.allow_networks)
            return None if named else "a cloud metadata address"
        if any(ip in n for n in self.allow_networks):
            return None
        if ip.is_loopback:
            return "a loopback address"
        if ip.is_link_local:
            return "a link-local address"
        if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
            return "not a unicast address"
        if not ip.is_global:
            return "a private address"
        return None

    def check_url(self, url: str) -> Target:
        """The URL's scheme, host and port, or EgressRefused saying which rule it breaks.
        A host given as an IP literal is checked here; a name is checked when it resolves
        (`resolve`, or the session's resolver)."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:  # a bad port, an unclosed [IPv6 bracket
            raise EgressRefused(f"{url[:200]!r} is not a URL ({exc})") from None
        scheme, host = parts.scheme.lower(), (parts.hostname or "")
        if scheme not in SCHEMES:
            raise EgressRefused(f"{scheme or 'no'} scheme: only http and https are allowed")
        if not host:
            raise EgressRefused("the URL names no host")
        if parts.username is not None or parts.password is not None:
            raise EgressRefused(f"{host}: credentials in the URL are not allowed")
        port = port if port is not None else (443 if scheme == "https" else 80)
        if not any(low <= port <= high for low, high in self.ports):
            raise EgressRefused(f"{host}: port {port} is not allowed (the operator's {ENV_PORTS})")
        if _is_ip(host):
            self._check_address(host, host)
        return Target(scheme, host, port)

    def _check_address(self, host: str, ip: str) -> None:
        kind = self.address_refusal(ip)
        if kind is not None:
            what = f"{ip} is {kind}" if host == ip else f"{host} resolves to {ip}, {kind}"
            raise EgressRefused(
                f"{what}: refused (an operator allows a network with {ENV_ALLOW_NETWORKS})"
            )

    def resolve(self, host: str, port: int) -> list[str]:
        """The addresses of `host`, each one checked; EgressRefused when any is refused
        (a name that resolves to a private address beside public ones is not used) or when
        it does not resolve. For clients that connect to an address themselves."""
        if _is_ip(host):
            self._check_address(host, host)
            return [host]
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise EgressRefused(f"{host}: does not resolve ({exc})") from None
        return self.checked(host, [info[4][0] for info in infos])

    def checked(self, host: str, addresses: list[str]) -> list[str]:
        if not addresses:
            raise EgressRefused(f"{host}: resolves to no address")
        for ip in addresses:
            self._check_address(host, ip)
        return list(dict.fromkeys(addresses))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


# --- aiohttp -------------------------------------------------------------------------------


def egress_session(
    policy: EgressPolicy, *, headers: Mapping[str, str] | None = None, **kwargs: Any
) -> aiohttp.ClientSession:
    """An aiohttp session that keeps `policy` on every request it makes: each URL checked
    before it is sent, every name resolved and checked by the session's own resolver (so
    the connection goes to a checked address), no proxy from the environment, and a redirect
    answered with EgressRefused instead of followed. `kwargs` go to ClientSession."""
    import aiohttp

    class _Resolver(aiohttp.ThreadedResolver):
        async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
            found = await super().resolve(host, port, family)
            policy.checked(host, [f["host"] for f in found])
            return found

    async def guard(request: aiohttp.ClientRequest, handler) -> aiohttp.ClientResponse:
        policy.check_url(str(request.url))
        response = await handler(request)
        if response.status in REDIRECTS:
            response.release()
            raise EgressRefused(
                f"{request.url.host}: HTTP {response.status}, a redirect; redirects are not "
                "followed (give the final URL)"
            )
        return response

    connector = aiohttp.TCPConnector(resolver=_Resolver())
    return aiohttp.ClientSession(
        connector=connector, headers=headers, trust_env=False, middlewares=(guard,), **kwargs
    )
