"""First-start setup of a platform: an admin account (once) and, optionally, a demo team."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import yaml
from django.contrib.auth import get_user_model
from django.db import transaction

from paddock.clusters.models import RayCluster
from paddock.experiments.launch import experiment_launch
from paddock.experiments.models import Experiment
from paddock.ops.doctor import available_backends, engine_versions
from paddock.teams.access import actor_for
from paddock.teams.models import Membership, Role, Team, TeamQuota
from workers.names import BUILTIN_ENVIRONMENTS, installed_environments


def admin_ensure(*, home: Path, username: str = "admin") -> tuple[object, bool]:
    """Create the admin once, with a random password written (0600) under PADDOCK_HOME.
    A later start never resets a password the admin may have changed."""
    User = get_user_model()
    with transaction.atomic():
        user = User.objects.filter(username=username).first()
        if user is not None:
            return user, False
        password = os.environ.get("PADDOCK_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        user = User.objects.create_superuser(username=username, email="", password=password)
    path = home / "admin-credentials"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{username} / {password}\n")
    return user, True


def demo_team_ensure(*, owner, slug: str = "demo") -> tuple[object, bool]:
    """The demo team, with `owner` as its owner (again, if someone demoted them)."""
    with transaction.atomic():
        team, created = Team.objects.get_or_create(slug=slug, defaults={"name": "Demo"})
        TeamQuota.objects.get_or_create(team=team)
        Membership.objects.update_or_create(team=team, user=owner, defaults={"role": Role.OWNER})
    return team, created


def local_cluster_ensure(
    *, address: str, name: str = "local", embedded: bool = False
) -> tuple[object | None, bool]:
    """Register the Ray head at `address` (settings.RAY_ADDRESS) as a shared cluster that
    runs the torch backend. Idempotent: a later start updates the address, and keeps the
    backends and labels an operator may have added. None when no address is set.
    `embedded`: the head runs on this machine (started by `paddock up`), so its jobs may
    share PADDOCK_HOME (the tiny model's cache) with the platform, and it runs in this
    environment, so it also advertises the engines installed here (vLLM's CPU build after
    `make up`)."""
    wanted = ["torch", *(available_backends(engine_versions()) if embedded else [])]
    # the environments installed here beyond the built-ins, which the embedded head runs too
    envs = [e for e in installed_environments() if e not in BUILTIN_ENVIRONMENTS]
    if not address:
        return None, False
    with transaction.atomic():
        cluster, created = RayCluster.objects.get_or_create(
            name=name,
            defaults={"address": address, "backends": ["torch"], "labels": {}},
        )
        changed = []
        if bool(cluster.labels.get("embedded")) != embedded:
            cluster.labels = {**cluster.labels, "embedded": embedded}
            changed.append("labels")
        if not cluster.healthy:
            cluster.healthy = True  # cluster_health re-checks it within seconds
            changed.append("healthy")
        if cluster.address != address:
            cluster.address = address
            changed.append("address")
        missing = [b for b in dict.fromkeys(wanted) if b not in cluster.backends]
        if missing:
            cluster.backends = [*cluster.backends, *missing]
            changed.append("backends")
        extra = [e for e in envs if embedded and e not in (cluster.environments or [])]
        if extra:
            cluster.environments = [*(cluster.environments or []), *extra]
            changed.append("environments")
        if changed:
            cluster.save(update_fields=changed)
    return cluster, created


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# (spec, name, description): the arithmetic demo trains in about a minute; the chat demo
# shows the real path (a chat template, reasoning chains of up to ~110 tokens, math_verify)
# and builds its model first (a few minutes, once); the calculator demo, multi-turn episodes
# with a tool (docs/environments.md), builds its own. Runs the cluster cannot hold yet wait in
# queued with the reason.
DEMOS = (
    ("tiny-async.yaml", "Demo: tiny arithmetic, async GRPO",
     "The tiny local model learns 2-digit addition with asynchronous LoRA GRPO, on each "
     "rollout engine this machine runs."),
    ("chat-reasoning.yaml", "Demo: chat model, step-by-step sums",
     "A local chat model (its own chat template, two EOS ids) works sums of 2 to 12 terms "
     "step by step to a \\boxed{} answer, scored by math_verify, on each rollout engine."),
    ("calculator-tools.yaml", "Demo: chat model with a calculator tool, multi-turn",
     "A local chat model learns to call a calculator tool (its chat template's "
     "<tool_call> format) over multi-turn episodes, the tool's answers masked out of the "
     "loss, on each rollout engine."),
)  # fmt: skip


# The demo compares engines from the first minute: the same spec on each of these that the
# local cluster runs (the side-by-side view is the product's headline).
DEMO_BACKENDS = ("torch", "vllm")


def demo_backends(cluster) -> tuple[list[str], str | None]:
    """The demo's backends on `cluster`, and why one is left out (None when none is)."""
    have = list(cluster.backends) if cluster is not None else ["torch"]
    backends = [b for b in DEMO_BACKENDS if b in have] or ["torch"]
    if "vllm" in backends:
        return backends, None
    return backends, (
        "the demo runs on torch alone: vLLM's CPU build is not installed here "
        "(`make vllm` installs it; `paddock doctor` shows what is missing)"
    )


def demo_experiments_ensure(*, owner, team, backends=("torch",)) -> list[object]:
    """Launch the demo experiments (DEMOS, each on every one of `backends`) once, so a fresh
    platform shows runs training side by side. Nothing when the team already has
    experiments; returns the experiments launched."""
    if Experiment.objects.filter(team=team).exists():
        return []
    launched = []
    for file, name, description in DEMOS:
        if not (EXAMPLES / file).is_file():
            continue
        spec = yaml.safe_load((EXAMPLES / file).read_text())
        result = experiment_launch(
            actor=actor_for(user=owner), team=team, name=name, spec=spec,
            backends=list(backends), tags=["demo"], description=description,
        )  # fmt: skip
        launched.append(result.experiment)
    return launched
