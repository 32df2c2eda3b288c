"""The Ray Jobs API as dispatch uses it. The one place the control plane touches Ray: the
Jobs client only (HTTP), never ray.init, never torch.

Every call goes to an approved address only (approval.py: the client carries the
deployment's Ray token), and has a connect timeout, a read timeout and a total deadline on
its reply, which is also bounded in size: a slow or hostile cluster costs a call at most
TOTAL_S, never a hung task."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import requests

from .approval import ClusterNotApproved, Endpoint, cluster_endpoint
from .placement import snapshot_from_cluster_status, snapshot_from_nodes

CONNECT_S = 5.0  # to open the connection
READ_S = 10.0  # between two reads of the reply
TOTAL_S = 20.0  # for the whole reply
MAX_REPLY_BYTES = 64 * 1024 * 1024  # a job's whole log is the largest reply


class ClusterUnreachable(Exception):
    """The cluster's Jobs API did not answer (or may not be called); retry later."""


@dataclass(frozen=True)
class JobInfo:
    status: str  # PENDING | RUNNING | STOPPED | SUCCEEDED | FAILED
    message: str
    end_time_s: float | None = None  # Unix seconds, once the job has ended


@dataclass(frozen=True)
class JobRow:
    submission_id: str
    status: str


def _client(address: str | Endpoint):
    """A Jobs client of an approved address (an Endpoint approved already, e.g. by a task
    that probes clusters from threads, or an address approved here)."""
    try:
        endpoint = address if isinstance(address, Endpoint) else cluster_endpoint(address)
    except ClusterNotApproved as exc:
        raise ClusterUnreachable(str(exc)) from None
    try:
        return _bounded_client_class()(endpoint.url)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
        # the version check of the client's constructor: refused, timed out, an error status,
        # an answer that is not a Jobs API's
        raise ClusterUnreachable(f"{endpoint.address}: {exc}") from exc


_CLIENT_CLASS = None


def _bounded_client_class():
    """JobSubmissionClient with every request bounded (Ray imported on first use: the web
    tier's other paths never need it)."""
    global _CLIENT_CLASS
    if _CLIENT_CLASS is None:
        from ray._private.authentication.http_token_authentication import (
            format_authentication_http_error,
        )
        from ray.exceptions import AuthenticationError
        from ray.job_submission import JobSubmissionClient

        class BoundedJobSubmissionClient(JobSubmissionClient):
            # Ray's own _do_request (dashboard_sdk.py) with a timeout on every request and a
            # deadline and a size bound on the reply; a failure is a ConnectionError, which
            # every caller here maps to ClusterUnreachable
            def _do_request(self, method, endpoint, *, data=None, json_data=None, **kwargs):
                kwargs.setdefault("timeout", (CONNECT_S, READ_S))
                deadline = time.monotonic() + TOTAL_S
                try:
                    response = requests.request(
                        method, self._address + endpoint, cookies=self._cookies, data=data,
                        json=json_data, headers=self._headers, verify=self._verify,
                        stream=True, **kwargs,
                    )  # fmt: skip
                    body = bytearray()
                    with response:
                        # read1: what has arrived, so a reply that trickles in is timed
                        while chunk := response.raw.read1(64 * 1024, decode_content=True):
                            body += chunk
                            if time.monotonic() > deadline:
                                raise ConnectionError(f"no whole reply within {TOTAL_S:g} s")
                            if len(body) > MAX_REPLY_BYTES:
                                raise ConnectionError("a reply over 64 MiB")
                except requests.RequestException as exc:
                    raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
                response._content = bytes(body)
                formatted = format_authentication_http_error(response.status_code, response.text)
                if formatted:
                    raise AuthenticationError(formatted)
                return response

        _CLIENT_CLASS = BoundedJobSubmissionClient
    return _CLIENT_CLASS


def job_submit(
    *,
    address: str,
    submission_id: str,
    entrypoint: str,
    runtime_env: dict[str, Any],
    num_cpus: float,
    num_gpus: float,
    metadata: dict[str, str] | None = None,
) -> bool:
    """Submit; True when this call started the job, False when a job with this submission
    id already existed (a retried dispatch task): either way exactly one job exists."""
    client = _client(address)
    try:
        client.submit_job(
            entrypoint=entrypoint,
            submission_id=submission_id,
            runtime_env=runtime_env,
            entrypoint_num_cpus=num_cpus,
            entrypoint_num_gpus=num_gpus,
            metadata={"paddock": "1", **(metadata or {})},
        )
    except RuntimeError as exc:
        if "already exists" in str(exc):
            return False
        if "try again later" in str(exc) or "status code 5" in str(exc):
            raise ClusterUnreachable(f"{address}: {exc}") from exc  # transient: retried
        raise
    except ConnectionError as exc:
        raise ClusterUnreachable(f"{address}: {exc}") from exc
    return True


def job_info(*, address: str, submission_id: str) -> JobInfo | None:
    """The job's status, or None when the cluster does not know it (vanished)."""
    client = _client(address)
    try:
        info = client.get_job_info(submission_id)
    except RuntimeError as exc:
        if "does not exist" in str(exc) or "404" in str(exc):
            return None
        raise
    except ConnectionError as exc:
        raise ClusterUnreachable(f"{address}: {exc}") from exc
    status = getattr(info.status, "value", str(info.status))
    end = info.end_time / 1000 if info.end_time else None
    return JobInfo(status=status, message=info.message or "", end_time_s=end)


def job_logs_tail(*, address: str, submission_id: str, chars: int = 4000) -> str:
    try:
        return _client(address).get_job_logs(submission_id)[-chars:]
    except (RuntimeError, ConnectionError, ClusterUnreachable) as exc:
        return f"(logs unavailable: {exc})"


def jobs_unfinished(*, address: str, metadata: dict[str, str]) -> list[JobRow]:
    """The cluster's submitted jobs not yet ended (PENDING or RUNNING) whose metadata
    includes `metadata`."""
    try:
        jobs = _client(address).list_jobs()
    except (RuntimeError, OSError) as exc:
        raise ClusterUnreachable(f"{address}: {exc}") from exc
    rows = []
    for job in jobs:
        status = getattr(job.status, "value", str(job.status))
        tags = job.metadata or {}
        if (
            status in ("PENDING", "RUNNING")
            and job.submission_id
            and all(tags.get(k) == v for k, v in metadata.items())
        ):
            rows.append(JobRow(submission_id=job.submission_id, status=status))
    return rows


def job_stop(*, address: str, submission_id: str) -> bool:
    try:
        return bool(_client(address).stop_job(submission_id))
    except RuntimeError as exc:
        if "does not exist" in str(exc):
            return False
        raise
    except ConnectionError as exc:
        raise ClusterUnreachable(f"{address}: {exc}") from exc


def cluster_resources(*, address: str) -> dict[str, Any] | None:
    """The cluster's nodes with their total and free CPUs and GPUs (placement.py's snapshot),
    from the dashboard's cluster status (the autoscaler monitor's load metrics, refreshed
    every few seconds); with no monitor report, the alive nodes' totals only. None when the
    dashboard answers neither. Through the Jobs client's own request method, so that token
    authentication is honoured as for every other call (it has no public call for this)."""
    client = _client(address)
    for endpoint, parse in (
        ("/api/cluster_status", snapshot_from_cluster_status),
        ("/api/v0/nodes?detail=1&limit=1000", snapshot_from_nodes),
    ):
        try:
            reply = client._do_request("GET", endpoint, timeout=5)
        except (RuntimeError, OSError) as exc:  # requests' errors are OSErrors
            raise ClusterUnreachable(f"{address}: {exc}") from exc
        if reply.status_code != 200:
            continue
        try:
            snapshot = parse(reply.json().get("data") or {})
        except (ValueError, AttributeError, TypeError):
            snapshot = None  # an answer of another shape (another Ray version): try the next
        if snapshot is not None:
            return {**snapshot, "observed_at": time.time()}
    return None


def cluster_version(*, address: str) -> str:
    """The cluster's Ray version, through the Jobs client so that token authentication
    (RAY_AUTH_MODE=token) is honoured like it is for every other call."""
    try:
        return str(_client(address).get_version())
    except (RuntimeError, ConnectionError, ValueError) as exc:
        raise ClusterUnreachable(f"{address}: {exc}") from exc
