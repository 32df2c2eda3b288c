"""Every setting Paddock reads from the environment, in one place.

Settings come from the environment only (twelve-factor): the embedded mode is what you get
when nothing is set, production is chosen by setting DATABASE_URL, REDIS_URL and RAY_ADDRESS.
docs/configuration.md lists each variable; keep the two in step."""

from __future__ import annotations

import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlparse

TRUE_WORDS = {"1", "true", "yes", "on"}


def env_flag(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in TRUE_WORDS


def paddock_home() -> Path:
    """The data directory of the embedded mode: database, broker socket, artifacts, logs."""
    home = Path(os.environ.get("PADDOCK_HOME", ".paddock")).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home


def embedded_redis_socket(home: Path) -> Path:
    return home / "redis" / "redis.sock"


def redis_url(home: Path) -> str:
    """REDIS_URL, or the unix socket of the bundled Redis that `paddock up` starts."""
    return os.environ.get("REDIS_URL") or f"unix://{embedded_redis_socket(home)}"


def redis_db(redis: str) -> str:
    """The database number of a Redis URL: `redis://host/3`, `unix:///path.sock?db=3`."""
    parts = urlparse(redis)
    if parts.scheme == "unix":
        return parse_qs(parts.query).get("db", ["0"])[0]
    return parts.path.strip("/") or "0"


def celery_broker_url(redis: str) -> str:
    # kombu spells a unix-socket Redis differently from redis-py.
    if redis.startswith("unix://"):
        return "redis+socket://" + redis[len("unix://") :]
    return redis


def cidrs_from(name: str, raw: str) -> list[str]:
    """A setting of comma-separated addresses or CIDR blocks (PADDOCK_TRUSTED_PROXIES,
    PADDOCK_CLUSTER_NETWORKS). A typo fails the start, naming the entry, rather than trusting
    nobody (or everybody) in silence."""
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(f"{name}: {entry!r} is not an IP address or a CIDR block") from None
    return entries


def secret_key(home: Path) -> str:
    """PADDOCK_SECRET_KEY, or a random key made once and kept (0600) under PADDOCK_HOME."""
    given = os.environ.get("PADDOCK_SECRET_KEY")
    if given:
        return given
    path = home / "secret_key"
    if not path.exists():
        create_once(path, secrets.token_urlsafe(50))
    return path.read_text().strip()


def create_once(path: Path, text: str) -> None:
    """Write `path` (0600) unless it exists, so that processes starting at once (`paddock
    up`'s server and worker on a new home) all read one whole file: each writes a file of
    its own and links it into place; the first link wins, the others read that one."""
    part = path.with_name(f"{path.name}.{os.getpid()}")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    try:
        os.link(part, path)
    except FileExistsError:
        pass
    finally:
        part.unlink()


@dataclass(frozen=True)
class Environment:
    home: Path
    debug: bool
    database_url: str
    redis_url: str
    ray_address: str
    public_url: str
    artifacts_uri: str
    allowed_hosts: list[str]
    embedded_redis: bool


def read_environment() -> Environment:
    home = paddock_home()
    redis = redis_url(home)
    public_url = os.environ.get("PADDOCK_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
    hosts = os.environ.get("PADDOCK_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
    return Environment(
        home=home,
        debug=env_flag("PADDOCK_DEBUG"),
        database_url=os.environ.get("DATABASE_URL") or f"sqlite:///{home / 'paddock.sqlite3'}",
        redis_url=redis,
        ray_address=os.environ.get("RAY_ADDRESS", "").rstrip("/"),
        public_url=public_url,
        artifacts_uri=os.environ.get("PADDOCK_ARTIFACTS_URI") or (home / "artifacts").as_uri(),
        allowed_hosts=[h.strip() for h in hosts.split(",") if h.strip()],
        embedded_redis="REDIS_URL" not in os.environ or not os.environ["REDIS_URL"],
    )
