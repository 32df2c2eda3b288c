"""The Ray Jobs API as dispatch uses it. The one place the control plane touches Ray: the
Jobs client only (HTTP), never ray.init, never torch."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .placement import snapshot_from_cluster_status, snapshot_from_nodes


class ClusterUnreachable(Exception):
    """The cluster's Jobs API did not answer; retry later."""


@dataclass(frozen=True)
class JobInfo:
    status: str  # PENDING | RUNNING | STOPPED | SUCCEEDED | FAILED
    message: str
    end_time_s: float | None = None  # Unix seconds, once the job has ended


@dataclass(frozen=True)
class JobRow:
    submission_id: str
    status: str


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except ConnectionError as exc:
        raise ClusterUnreachable(f"{address}: {exc}") from exc


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
