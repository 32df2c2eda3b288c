"""What a run may use beyond its spec: its team's secrets that it names, the egress policy
its outbound calls keep, and the folders its spec's paths may lead into (docs/security.md).

Under the platform the job receives them in its bootstrap reply (workers/job_replies.py) and
from the variables dispatch sets (the egress policy): never from the worker's own
environment, which holds the cluster's credentials. A pool's job holds one `Grants` per
member, so one member's secrets never reach another's clients. Under `paddock train` (no
platform) the user is the operator: a secret NAME comes from the environment variable
PADDOCK_SECRET_<NAME> (upper case, `-` as `_`), the only variables a spec can reach.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .egress import EgressPolicy
from .path_guard import PathGuard

SECRET_ENV_PREFIX = "PADDOCK_SECRET_"


def secret_env_name(name: str) -> str:
    """The variable `paddock train` reads a secret NAME from."""
    return SECRET_ENV_PREFIX + name.upper().replace("-", "_")


class EnvSecrets(Mapping[str, str]):
    """Secrets read from PADDOCK_SECRET_<NAME> variables (`paddock train` only)."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        self._env = os.environ if environ is None else environ

    def __getitem__(self, name: str) -> str:
        return self._env[secret_env_name(name)]

    def __iter__(self) -> Iterator[str]:
        return iter(())  # names are not listed: a name maps to a variable, not back

    def __len__(self) -> int:
        return 0


@dataclass(frozen=True)
class Grants:
    """A run's secrets (name → value, only those its spec names), the egress policy, and
    the guard of the paths it reads (None: any path, as `paddock train` reads)."""

    secrets: Mapping[str, str] = field(default_factory=dict)
    egress: EgressPolicy = field(default_factory=EgressPolicy.from_env)
    paths: PathGuard | None = None

    @classmethod
    def standalone(cls, environ: Mapping[str, str] | None = None) -> Grants:
        """`paddock train`'s: secrets from PADDOCK_SECRET_<NAME>, the egress policy from the
        same environment."""
        return cls(secrets=EnvSecrets(environ), egress=EgressPolicy.from_env(environ))

    def secret_headers(self, what: str, name: str | None, error: type[Exception]) -> dict:
        """The request headers a secret holds: a JSON object of string headers, or a token
        sent as `Authorization: Bearer <token>`. `what` names the client in errors, which
        never quote the value."""
        if name is None:
            return {}
        value = self.secrets.get(name)
        if value is None or not value.strip():
            where = (
                f"the environment variable {secret_env_name(name)}"
                if isinstance(self.secrets, EnvSecrets)
                else "the team's secrets"
            )
            raise error(f"{what}: the secret {name!r} is not set ({where})")
        value = value.strip()
        if not value.startswith("{"):
            return {"Authorization": f"Bearer {value}"}
        try:
            headers = json.loads(value)
        except ValueError:
            headers = None
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise error(
                f"{what}: the secret {name!r} holds neither a JSON object of string headers "
                "nor a token"
            )
        return headers
