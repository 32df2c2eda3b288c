"""Where a spec's URLs may point: every address its job will call for the user (a reward
service, an MLflow server: `RunSpec.outbound_urls`) checked at launch against the
operator's egress policy (workers/egress.py, settings.PADDOCK_EGRESS).

The launch reads the URL as written (scheme, port, an IP literal), without resolving its
name: a lookup of a user's hostname would make the web tier wait on the user's DNS. The job's
client checks every address the name resolves to where it connects, so a name that resolves
to a refused address fails there, with the same rule in the error."""

from __future__ import annotations

from django.conf import settings

from paddock.core.errors import DomainError, ErrorCode
from workers.egress import EgressRefused
from workers.spec import RunSpec


def spec_urls_check(*, spec: RunSpec, field: str = "spec") -> None:
    """DomainError(ErrorCode.URL_NOT_ALLOWED) naming every URL the policy refuses."""
    errors = []
    for path, url in spec.outbound_urls():
        try:
            settings.PADDOCK_EGRESS.check_url(url)
        except EgressRefused as exc:
            errors.append({"field": f"{field}.{path}", "message": str(exc)})
    if errors:
        raise DomainError.of_errors(ErrorCode.URL_NOT_ALLOWED, errors)
