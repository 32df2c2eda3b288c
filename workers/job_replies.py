"""What the platform's job doors answer a job (docs/ingest-protocol.md, docs/pools.md): a
run's bootstrap, a pool's bootstrap and a pool's members, as typed models that both halves
use. The platform builds each answer with its model (clusters/bootstrap_tokens.py,
clusters/pools.py); the job reads it back with the same model (workers/bootstrap.py,
workers/pool/job.py), so a field renamed on one side fails on the other by name.

Light like events.py (the control plane imports it): pydantic only. Fields a newer platform
adds are ignored, as in `IngestReply`, so an older job keeps working against it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RunBootstrap(_Reply):
    """`POST /api/v1/runs/{id}/bootstrap`: the run token and what the job starts from."""

    token: str = Field(min_length=1, description="the run token (pdr_…), for ingest")
    # The effective spec as stored (every default filled in, each dataset://<id> replaced by
    # its artifact URI). A dict, not a RunSpec: the job validates it where it trains
    # (workers/train.py), whose errors name the spec's own fields.
    spec: dict[str, Any]
    artifacts_uri: str = Field(min_length=1, description="where the job writes")
    resume_from: str | None = Field(
        None, description="the newest reported checkpoint, from dispatch 2 on"
    )
    read_roots: list[str] | None = Field(
        None,
        description="the folders the job may read the spec's paths in (its PathGuard, "
        "workers/path_guard.py): its team's model and data roots, its uploads, its own folder",
    )
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="the team secrets the run's spec names, name → value (workers/grants.py); "
        "none other",
    )
    purpose: Literal["train", "preflight"] = Field(
        "train", description="train the spec, or check it first (workers/preflight.py)"
    )


class PoolBootstrap(_Reply):
    """`POST /api/v1/pools/{id}/bootstrap`: the pool token, its capacity and its key."""

    token: str = Field(min_length=1, description="the pool token (pdp_…), for the members")
    capacity: int = Field(ge=1, description="how many runs the pool hosts at most")
    key: dict[str, Any] = Field(description="the pool key (workers/pool_key.py) and cluster")


class ListedMember(_Reply):
    run_id: int = Field(ge=1)
    dispatch: int = Field(ge=1)
    bootstrap_token: str | None = Field(
        description="the run's one-time bootstrap token while it has not bootstrapped; null after"
    )
    weight: float = Field(gt=0, description="resources.pool_weight: its fair share")


class PoolMembers(_Reply):
    """`GET /api/v1/pools/{id}/members?dispatch=N`: whom the pool's job hosts now."""

    members: list[ListedMember]
    stop: bool = Field(description="no member is left: the job exits once its own are gone")
