"""The one domain error of the control plane.

Services raise it; `paddock.api.exceptions.exception_handler` turns it (and DRF's own
errors) into one JSON shape, `{"code", "message", "field"}`. Plain Python on purpose: a
Celery task or a websocket consumer can raise and catch it without DRF."""

from __future__ import annotations


class DomainError(Exception):
    """A refusal with a machine-readable `code` (stable: clients switch on it), a sentence
    for people, the request field it is about (dotted path, or None) and the HTTP status
    the API answers with. `errors` carries every problem when there are several (a spec)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        status: int = 400,
        errors: list[dict[str, str]] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.status = status
        self.errors = errors

    def as_dict(self) -> dict:
        body: dict = {"code": self.code, "message": self.message, "field": self.field}
        if self.errors:
            body["errors"] = self.errors
        return body


def not_found(what: str = "object") -> DomainError:
    # An object of another team is reported exactly like one that does not exist.
    return DomainError("not_found", f"{what} not found", status=404)


def forbidden(message: str) -> DomainError:
    return DomainError("permission_denied", message, status=403)
