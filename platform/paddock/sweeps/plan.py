"""A sweep request checked into its members before anything is created: every member's
effective spec validated by RunSpec (a refusal names the key and the member), every member
on the base's pool key (one base model, one engine), and the whole checked as a launch is
(backends and resources against the clusters, the team's quota)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from paddock.clusters.models import RayCluster
from paddock.clusters.pools import capacity_of
from paddock.core.errors import DomainError, ErrorCode, error_body
from paddock.experiments.configs import spec_apply_edits, spec_for_run, spec_gpus, spec_parse
from paddock.experiments.launch import PlannedRun, runs_check, spec_admit
from paddock.teams.models import Team
from workers.pool_key import pool_key

from .space import MAX_MEMBERS, Param, Scalar, grid_size, members_grid, members_random, params_parse
from .stopping import StoppingRule

MAX_PARALLEL = 64
METRIC_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./@-]{0,99}$"
# the pool a sweep's members share when the base spec names none: the sweep's own, named
# after it once it exists (a name checks the same as this one: workers/spec.py's pattern)
OWN_POOL = "sweep"


def own_pool_name(sweep_id: int) -> str:
    return f"{OWN_POOL}-{sweep_id}"


@dataclass
class MemberPlan:
    index: int
    settings: dict[str, Scalar]
    run: PlannedRun


@dataclass
class SweepPlan:
    spec: dict  # the base, normalized (the experiment's launched config)
    method: str
    params: list[Param]
    seed: int
    metric: str
    mode: str
    stopping: StoppingRule | None
    budget_members: int
    budget_gpu_hours: float | None
    parallel: int
    cluster_id: int | None
    own_pool: bool  # the members share the sweep's own pool (the base named none)
    members: list[MemberPlan] = field(default_factory=list)


def _invalid(message: str, field: str) -> DomainError:
    return DomainError(ErrorCode.INVALID, message, field=field)


def _stopping(raw: Any) -> StoppingRule | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _invalid("give {rule, min_steps, …} or null", "early_stopping")
    allowed = {"rule", "min_steps", "min_members", "threshold"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise _invalid(f"unknown entry {unknown[0]!r}; one of {sorted(allowed)}",
                       f"early_stopping.{unknown[0]}")  # fmt: skip
    rule = raw.get("rule")
    if rule not in ("median", "threshold"):
        raise _invalid("rule is median or threshold", "early_stopping.rule")

    def integer(name: str, default: int | None, low: int, high: int) -> int:
        value = raw.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _invalid(f"an integer from {low} to {high}", f"early_stopping.{name}")
        return value

    min_steps = integer("min_steps", None, 1, 1_000_000)
    if rule == "median":
        if "threshold" in raw:
            raise _invalid("the median rule takes no threshold", "early_stopping.threshold")
        return StoppingRule("median", min_steps, integer("min_members", 3, 1, MAX_PARALLEL))
    if "min_members" in raw:
        raise _invalid("the threshold rule takes no min_members", "early_stopping.min_members")
    threshold = raw.get("threshold")
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not math.isfinite(threshold)
    ):
        raise _invalid("a finite number", "early_stopping.threshold")
    return StoppingRule("threshold", min_steps, threshold=float(threshold))


def _member_spec(team: Team, base: dict, settings: dict[str, Scalar], backend: str):
    """A member's effective spec (RunSpec): the base with its settings, on the base's
    backend (its `seed` the member's own when the space has one), admitted as a launch's
    spec is (its paths and URLs: a swept key may hold either)."""
    edited = spec_apply_edits(spec=base, edits=settings)
    spec = spec_for_run(spec=edited, backend=backend, seed=edited["seed"])
    spec_admit(team=team, spec=spec)
    return spec


def _swept_key(params: list[Param], path: str) -> str | None:
    """The swept key a spec path (`spec.lora.r`, a pool key entry `model.tiny`) is about."""
    path = path.removeprefix("spec.")
    for p in params:
        if path == p.key or path.startswith(f"{p.key}.") or p.key.startswith(f"{path}."):
            return p.key
    return None


def _show(settings: dict[str, Scalar]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in settings.items())


def _members_specs(
    team: Team, base: dict, backend: str, params: list[Param], points: list[dict]
) -> list:
    """Every member's RunSpec; SWEEP_MEMBER_INVALID naming the key and the member for each
    member that does not validate (all of them in `errors`), or that leaves the pool key."""
    base_key = pool_key(spec_parse(spec=base))
    specs, errors = [], []
    for index, settings in enumerate(points):
        try:
            spec = _member_spec(team, base, settings, backend)
        except DomainError as exc:
            for problem in exc.errors or [{"field": exc.field or "", "message": exc.message}]:
                key = _swept_key(params, problem["field"])
                where = f"params.{key}" if key else "params"
                message = f"member {index} ({_show(settings)}): {problem['message']}"
                errors.append({**error_body(exc.code, message, where), "member": index})
            continue
        key = pool_key(spec)
        for entry in sorted(n for n in key if key[n] != base_key.get(n)):
            swept = _swept_key(params, entry)
            message = (
                f"member {index} ({_show(settings)}) changes {entry}, part of the pool key: a "
                "sweep's members share one base model and one engine (docs/pools.md)"
            )
            where = f"params.{swept}" if swept else "params"
            errors.append({**error_body(ErrorCode.SWEEP_MEMBER_INVALID, message, where),
                           "member": index})  # fmt: skip
        specs.append(spec)
    if errors:
        first = errors[0]
        raise DomainError(ErrorCode.SWEEP_MEMBER_INVALID, f"{first['field']}: {first['message']}",
                          field=first["field"], errors=errors)  # fmt: skip
    return specs


def _default_parallel(team: Team, cluster_id: int | None, members: int) -> int:
    """As many members at once as one pool hosts on the clusters the team may use."""
    clusters = RayCluster.objects.filter(Q(team__isnull=True) | Q(team_id=team.pk))
    if cluster_id is not None:
        clusters = clusters.filter(pk=cluster_id)
    capacity = max((capacity_of(c) for c in clusters), default=1)
    return max(1, min(members, capacity))


def sweep_plan(
    *,
    team: Team,
    spec: Any,
    method: str,
    params: Any,
    budget_members: int | None = None,
    budget_gpu_hours: float | None = None,
    parallel: int | None = None,
    metric: str = "reward/mean",
    mode: str = "max",
    early_stopping: Any = None,
    seed: int | None = None,
    cluster_id: int | None = None,
    user_id: int | None = None,
) -> SweepPlan:
    """The sweep's members, each a planned run, checked (the quota of the team and of
    `user_id`, who launches it); DomainError otherwise (nothing is created either way)."""
    if method not in ("grid", "random"):
        raise _invalid("grid or random", "method")
    if not isinstance(metric, str) or not re.fullmatch(METRIC_PATTERN, metric):
        raise _invalid("a metric key such as reward/mean", "metric")
    if mode not in ("max", "min"):
        raise _invalid("max or min", "mode")
    if budget_gpu_hours is not None and not (
        math.isfinite(budget_gpu_hours) and budget_gpu_hours > 0
    ):
        raise _invalid("a number of GPU-hours above 0", "budget.gpu_hours")
    stopping = _stopping(early_stopping)
    parsed = params_parse(params, method=method)
    base_spec = spec_parse(spec=spec)
    base = spec_admit(team=team, spec=base_spec)
    own_pool = base_spec.resources.pool is None
    if own_pool:
        base["resources"]["pool"] = OWN_POOL  # named after the sweep once it exists
    if method == "grid":
        size = grid_size(parsed)
        if size > MAX_MEMBERS:
            raise _invalid(f"the grid has {size} members; at most {MAX_MEMBERS}", "params")
        if budget_members is not None and budget_members < size:
            raise _invalid(
                f"the grid has {size} members; raise it to {size} or search fewer values",
                "budget.members",
            )
        points = members_grid(parsed)
    else:
        if budget_members is None:
            raise DomainError(ErrorCode.REQUIRED, "a random search needs a number of members",
                              field="budget.members")  # fmt: skip
        if not 1 <= budget_members <= MAX_MEMBERS:
            raise _invalid(f"from 1 to {MAX_MEMBERS}", "budget.members")
        seed = base["seed"] if seed is None else seed
        points = members_random(parsed, count=budget_members, seed=seed)
    if parallel is not None and not 1 <= parallel <= MAX_PARALLEL:
        raise _invalid(f"from 1 to {MAX_PARALLEL}", "parallel")
    backend = base_spec.rollout.backend
    specs = _members_specs(team, base, backend, parsed, points)
    if stopping is not None and all(stopping.min_steps >= s.train.steps for s in specs):
        raise _invalid(
            f"min_steps {stopping.min_steps} is not below any member's train.steps: the rule "
            "would never stop one", "early_stopping.min_steps",
        )  # fmt: skip
    members = [
        MemberPlan(i, settings, PlannedRun(backend, s.seed, s, spec_gpus(s)))
        for i, (settings, s) in enumerate(zip(points, specs, strict=True))
    ]
    if parallel is None:
        parallel = _default_parallel(team, cluster_id, len(members))
    parallel = min(parallel, len(members))
    # as a launch is checked, every member; the quota's count for those that start at once
    runs_check(team=team, runs=[m.run for m in members], cluster_id=cluster_id,
               starting=parallel, user_id=user_id)  # fmt: skip
    if own_pool:
        base["resources"]["pool"] = None  # the launched spec is the base as given
    return SweepPlan(
        spec=base, method=method, params=parsed, seed=seed or 0, metric=metric, mode=mode,
        stopping=stopping, budget_members=len(members), budget_gpu_hours=budget_gpu_hours,
        parallel=parallel, cluster_id=cluster_id, own_pool=own_pool, members=members,
    )  # fmt: skip
