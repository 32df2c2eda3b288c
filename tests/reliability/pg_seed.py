"""Run against a throwaway PostgreSQL (DATABASE_URL): `seed` migrates and makes a dispatched
run with a run token (prints `run_id token`); `rows RUN` prints the run's stored ingest
batches and metric steps as JSON; `platform RAY_JOBS_ADDRESS` migrates and makes a team, a
member with an API token and the cluster (prints `{"team": id, "token": secret}`)."""

import json
import sys

import django

django.setup()

from django.core.management import call_command  # noqa: E402


def seed() -> None:
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    from paddock.clusters.models import RayCluster
    from paddock.experiments.launch import experiment_launch
    from paddock.experiments.models import Run
    from paddock.experiments.states import run_transition
    from paddock.experiments.tokens import run_token_mint
    from paddock.teams.access import actor_for
    from paddock.teams.models import Membership, Role, Team

    user = get_user_model().objects.create_user("pg")
    team = Team.objects.create(name="pg", slug="pg")
    Membership.objects.create(team=team, user=user, role=Role.MEMBER)
    RayCluster.objects.create(name="pg", address="http://127.0.0.1:1", backends=["torch"])
    result = experiment_launch(actor=actor_for(user=user), team=team, name="pg", spec={})
    run = result.runs[0]
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run.refresh_from_db()
    run_transition(run=run, to_state="dispatching")
    print(run.pk, run_token_mint(run=run, dispatch=1))


def platform(ray_jobs_address: str) -> None:
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    from paddock.clusters.models import RayCluster
    from paddock.teams.access import actor_for
    from paddock.teams.models import Membership, Role, Team, TeamQuota
    from paddock.teams.services import api_token_create

    user = get_user_model().objects.create_user("chaos")
    team = Team.objects.create(name="chaos", slug="chaos")
    Membership.objects.create(team=team, user=user, role=Role.MEMBER)
    TeamQuota.objects.update_or_create(team=team, defaults={"max_concurrent_runs": 100})
    RayCluster.objects.create(name="chaos", address=ray_jobs_address, backends=["torch"],
                              labels={"embedded": True}, healthy=True)  # fmt: skip
    _, secret = api_token_create(actor=actor_for(user=user), team=team, name="chaos")
    print(json.dumps({"team": team.pk, "token": secret}))


def rows(run_id: int) -> None:
    from paddock.experiments.models import IngestBatch, MetricPoint

    print(json.dumps({
        "batches": sorted(IngestBatch.objects.filter(run_id=run_id).values_list("seq", flat=True)),
        "steps": sorted(MetricPoint.objects.filter(run_id=run_id).values_list("step", flat=True)),
    }))  # fmt: skip


if __name__ == "__main__":
    {
        "seed": seed,
        "rows": lambda: rows(int(sys.argv[2])),
        "platform": lambda: platform(sys.argv[2]),
    }[sys.argv[1]]()
