"""Which cluster addresses the platform may call (docs/security.md#clusters).

Every call to a cluster's Jobs API carries the deployment's Ray token (Ray reads it from the
process environment), and a dispatch hands the job a bootstrap token; so the platform calls
only an address an operator approved:

- `RAY_ADDRESS` (the operator's own setting);
- an address a staff user or the operator on the server registered or edited (the admin,
  `manage.py paddock_cluster`, `paddock_bootstrap`): `RayCluster.address_approved`;
- an address inside the networks the operator allows teams to register clusters in
  (`PADDOCK_CLUSTER_NETWORKS`): every address its name resolves to must lie inside, and an
  http address is then called at the checked IP (a name that resolves elsewhere later is
  not followed there; https keeps the name, which TLS then holds to its certificate).

`cluster_endpoint` is the only way to an `Endpoint`, and ray_jobs builds a Jobs client for
an Endpoint only, so nothing reaches an address that was not approved."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from .models import RayCluster


class ClusterNotApproved(Exception):
    """The address was not approved by an operator; nothing was sent to it."""

    def __init__(self, address: str):
        super().__init__(
            f"{address}: an operator has not approved this address, so nothing is sent to it "
            "(a staff user approves it in the admin, or the operator allows its network with "
            "PADDOCK_CLUSTER_NETWORKS)"
        )


@dataclass(frozen=True)
class Endpoint:
    """An approved cluster address: `url` is what the Jobs client calls, `address` what the
    registry holds (they differ where the IP was pinned)."""

    address: str
    url: str


def approved_endpoint(address: str) -> Endpoint | None:
    """The Endpoint of an address an operator set or approved (RAY_ADDRESS, a row with
    `address_approved`): the database only, no name lookup."""
    if address and (
        address == settings.RAY_ADDRESS
        or RayCluster.objects.filter(address=address, address_approved=True).exists()
    ):
        return Endpoint(address, address)
    return None


def network_endpoint(address: str) -> Endpoint | None:
    """The Endpoint of an address whose host resolves only into PADDOCK_CLUSTER_NETWORKS
    (http: called at the checked IP); a name lookup, no database."""
    networks = [ipaddress.ip_network(n, strict=False) for n in settings.PADDOCK_CLUSTER_NETWORKS]
    parts = urlsplit(address)
    if not networks or parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return None
    ips = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not ips or not all(any(ip in n for n in networks) for ip in ips):
        return None
    if parts.scheme == "https":
        return Endpoint(address, address)
    host = f"[{ips[0]}]" if ips[0].version == 6 else str(ips[0])
    netloc = f"{host}:{parts.port}" if parts.port else host
    return Endpoint(address, urlunsplit(parts._replace(netloc=netloc)))


def cluster_endpoint(address: str) -> Endpoint:
    """The Endpoint of an approved `address`; ClusterNotApproved otherwise."""
    endpoint = approved_endpoint(address) or network_endpoint(address)
    if endpoint is None:
        raise ClusterNotApproved(address)
    return endpoint
