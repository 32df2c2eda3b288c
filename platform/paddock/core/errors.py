"""Every error code the platform answers with, and the one domain error that carries one.

Clients switch on `code`, so a code is a name registered here once, with the HTTP status it
answers with and what it means; docs/errors.md is checked against this enum
(tests/test_docs_errors.py). Services raise `DomainError`; `paddock.api.exceptions`
turns it (and DRF's own errors) into the one body `{"code", "message", "field"}`, and the
views outside DRF build the same body with `error_body`. Plain Python on purpose: a Celery
task or a websocket consumer raises and catches it without DRF."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """A code, its HTTP status and a one-line meaning (a websocket frame's error carries the
    code alone; its status is the one the same refusal has over HTTP)."""

    status: int
    meaning: str

    def __new__(cls, value: str, status: int, meaning: str):
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        member.meaning = meaning
        return member

    # 400: the request is wrong; the field it names says where
    INVALID = "invalid", 400, "a value is not one the field takes"
    REQUIRED = "required", 400, "a required value is missing"
    INVALID_JSON = "invalid_json", 400, "the body (or websocket frame) is not strict JSON"
    UNKNOWN_FIELD = "unknown_field", 400, "the body holds a key the endpoint does not take"
    INVALID_CURSOR = "invalid_cursor", 400, "the list cursor is not one the API handed out"
    PARSE_ERROR = "parse_error", 400, "the body could not be parsed"
    SPEC_INVALID = "spec_invalid", 400, "the run spec does not validate"
    IMPORT_INVALID = "import_invalid", 400, "a verl or NeMo-RL config could not be translated"
    PATH_NOT_ALLOWED = "path_not_allowed", 400, "a path in the spec is outside the allowed roots"
    URL_NOT_ALLOWED = "url_not_allowed", 400, "a URL in the spec is refused by the egress policy"
    SECRET_MISSING = "secret_missing", 400, "the spec names a secret the team does not have"
    BACKEND_UNAVAILABLE = "backend_unavailable", 400, "no cluster advertises the backend"
    ENVIRONMENT_UNAVAILABLE = (
        "environment_unavailable",
        400,
        "no cluster advertises the spec's environment",
    )
    UNPLACEABLE = "unplaceable", 400, "no cluster could ever place the run's resources"
    NO_CLUSTER = "no_cluster", 400, "no Ray cluster is registered for the team"
    USER_NOT_FOUND = "user_not_found", 400, "no user has that username"
    INVALID_CREDENTIALS = "invalid_credentials", 400, "wrong username or password"
    TOO_LARGE = "too_large", 400, "an uploaded file is over the size limit"
    INVALID_BATCH = "invalid_batch", 400, "an ingest batch does not match the schema"
    BAD_HOST = "bad_host", 400, "the Host header is not an allowed host"
    INVALID_ACTION = "invalid_action", 400, "a websocket action is not pause, resume or abort"
    INVALID_RUN = "invalid_run", 400, "a websocket action does not name a run of the stream"
    SWEEP_MEMBER_INVALID = (
        "sweep_member_invalid", 400, "a member of the sweep does not make a valid run spec"
    )  # fmt: skip
    # 401: who is asking is not known
    NOT_AUTHENTICATED = "not_authenticated", 401, "no credentials were sent"
    AUTHENTICATION_FAILED = "authentication_failed", 401, "the credentials were refused"
    TOKEN_INVALID = "token_invalid", 401, "the token is not one this platform issued"
    TOKEN_EXPIRED = "token_expired", 401, "the token has expired"
    TOKEN_REVOKED = "token_revoked", 401, "the token was revoked"
    TOKEN_SPENT = "token_spent", 401, "the one-time bootstrap token was used already"
    # 403: known, and not allowed
    PERMISSION_DENIED = "permission_denied", 403, "the caller's role does not allow this"
    CSRF_FAILED = "csrf_failed", 403, "a session write without a valid CSRF token"
    HTTPS_REQUIRED = "https_required", 403, "the platform takes this over https only"
    DISPATCH_MISMATCH = "dispatch_mismatch", 403, "the batch's dispatch is not the token's"
    # 404
    NOT_FOUND = "not_found", 404, "no such object in the caller's teams"
    ARTIFACT_MISSING = "artifact_missing", 404, "the checkpoint's files are not in the store"
    ARTIFACT_OUTSIDE_STORE = (
        "artifact_outside_store", 404, "the artifact's URI is outside the artifact store"
    )  # fmt: skip
    # 405, 406: the wrong method, or no media type the client takes
    METHOD_NOT_ALLOWED = "method_not_allowed", 405, "the endpoint does not take this method"
    NOT_ACCEPTABLE = "not_acceptable", 406, "no answer in a media type the Accept header takes"
    # 409: the request is well formed, the state of things refuses it
    QUOTA_EXCEEDED = "quota_exceeded", 409, "the launch is over the team's quota"
    ILLEGAL_TRANSITION = "illegal_transition", 409, "the run cannot move to that state from its own"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted", 409, "the run used up its dispatch attempts"
    RUN_FINISHED = "run_finished", 409, "the run has finished"
    RUN_ABORTING = "run_aborting", 409, "the run is being aborted"
    DISPATCH_SUPERSEDED = "dispatch_superseded", 409, "a newer dispatch of the run exists"
    POOL_ENDED = "pool_ended", 409, "the pool's job has ended; a new pool hosts its runs"
    SWEEP_FINISHED = "sweep_finished", 409, "the sweep has finished"
    DATASET_MISSING = "dataset_missing", 409, "the spec names a dataset the team has not uploaded"
    PREFLIGHT_PENDING = (
        "preflight_pending", 409, "the run waits for its experiment's pre-flight check"
    )  # fmt: skip
    PREFLIGHT_FAILED = (
        "preflight_failed", 409, "the experiment's pre-flight check failed: its runs are held"
    )  # fmt: skip
    LAST_OWNER = "last_owner", 409, "the team would be left without an owner"
    ALREADY_MEMBER = "already_member", 409, "the user is a member of the team already"
    SLUG_TAKEN = "slug_taken", 409, "a team has that slug already"
    NAME_TAKEN = "name_taken", 409, "a cluster has that name already"
    CONFIG_IMMUTABLE = "config_immutable", 409, "a stored config version is never changed"
    # 413, 415, 429, 500
    BODY_TOO_LARGE = "body_too_large", 413, "the body is over the request size limit"
    BATCH_TOO_LARGE = "batch_too_large", 413, "the ingest batch is over its size limit"
    UNSUPPORTED_MEDIA_TYPE = (
        "unsupported_media_type", 415, "the body's Content-Type is not one the endpoint reads"
    )  # fmt: skip
    RATE_LIMITED = (
        "rate_limited", 429, "too many failed logins or authentications, or requests of a token"
    )  # fmt: skip
    ERROR = "error", 500, "an API error without a more precise code"
    SERVER_ERROR = "server_error", 500, "a bug or an outage on the platform"


def error_body(code: ErrorCode, message: str, field: str | None = None) -> dict:
    """The one error body, for the answers built outside DRF's exception handler."""
    return {"code": str(code), "message": message, "field": field}


class DomainError(Exception):
    """A refusal: its `code` (which fixes the HTTP status), a sentence for people, the
    request field it is about (dotted path, or None). `errors` carries every problem when
    there are several (a spec)."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        field: str | None = None,
        errors: list[dict[str, str]] | None = None,
    ):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.field = field
        self.errors = errors

    @classmethod
    def of_errors(cls, code: ErrorCode, errors: list[dict[str, str]]) -> DomainError:
        """One refusal for several problems ({field, message} each): the first names the
        field and the sentence, `errors` carries them all."""
        first = errors[0]
        return cls(code, f"{first['field']}: {first['message']}", field=first["field"],
                   errors=errors)  # fmt: skip

    @property
    def status(self) -> int:
        return self.code.status

    def as_dict(self) -> dict:
        body = error_body(self.code, self.message, self.field)
        if self.errors:
            body["errors"] = self.errors
        return body


def not_found(what: str = "object") -> DomainError:
    # An object of another team is reported exactly like one that does not exist.
    return DomainError(ErrorCode.NOT_FOUND, f"{what} not found")


def forbidden(message: str) -> DomainError:
    return DomainError(ErrorCode.PERMISSION_DENIED, message)
