"""`manage.py paddock_cluster register|list|health`: the operator's side of the cluster
registry, on the server (where a shared cluster is registered: an API token never carries
the staff rights the REST endpoint asks for one)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from paddock.clusters.models import RayCluster
from paddock.clusters.services import cluster_check, cluster_register
from paddock.core.errors import DomainError
from paddock.teams.models import Team


def _json_object(text: str | None, option: str) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise CommandError(f"{option}: not JSON: {text!r}") from None
    if not isinstance(value, dict):
        raise CommandError(f"{option}: a JSON object")
    return value


class Command(BaseCommand):
    help = "Register, list and health-check the Ray clusters runs are dispatched to."

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True)
        r = verbs.add_parser("register", help="register a cluster (shared unless --team)")
        r.add_argument("name")
        r.add_argument("address", help="its Jobs API, e.g. http://head:8265")
        r.add_argument("--team", help="a team slug: the cluster is that team's")
        r.add_argument("--backends", help="comma-separated, e.g. torch,vllm")
        r.add_argument("--capacity", help='JSON, e.g. {"cpus": 16, "gpus": 8}')
        r.add_argument("--labels", help="JSON object")
        r.add_argument("--dashboard-url", default="")
        verbs.add_parser("list", help="every cluster, shared or a team's")
        h = verbs.add_parser("health", help="check clusters' Jobs API now")
        h.add_argument("names", nargs="*", help="default: every cluster")

    def handle(self, *args, **options):
        getattr(self, f"_{options['verb']}")(options)

    def _register(self, options):
        team = None
        if options["team"]:
            team = Team.objects.filter(slug=options["team"]).first()
            if team is None:
                raise CommandError(f"--team: no team {options['team']!r}")
        backends = options["backends"]
        try:
            cluster = cluster_register(
                actor=None, name=options["name"], address=options["address"], team=team,
                dashboard_url=options["dashboard_url"],
                labels=_json_object(options["labels"], "--labels"),
                capacity=_json_object(options["capacity"], "--capacity"),
                backends=[b.strip() for b in backends.split(",")] if backends else [],
            )  # fmt: skip
        except DomainError as exc:
            raise CommandError(f"{exc.field or 'cluster'}: {exc.message}") from None
        owner = f"team {team.slug}" if team else "shared"
        self.stdout.write(f"registered cluster {cluster.pk} '{cluster.name}' ({owner})")

    def _list(self, options):
        for c in RayCluster.objects.select_related("team").order_by("name"):
            owner = c.team.slug if c.team else "shared"
            state = "healthy" if c.healthy else f"unhealthy: {c.health_error}"
            backends = ",".join(c.backends) or "-"
            self.stdout.write(f"{c.pk}\t{c.name}\t{owner}\t{c.address}\t{backends}\t{state}")

    def _health(self, options):
        clusters = RayCluster.objects.order_by("name")
        if options["names"]:
            clusters = clusters.filter(name__in=options["names"])
            missing = set(options["names"]) - {c.name for c in clusters}
            if missing:
                raise CommandError(f"no cluster {sorted(missing)[0]!r}")
        sick = []
        for cluster in clusters:
            ok = cluster_check(cluster)
            self.stdout.write(f"{cluster.name}: {'healthy' if ok else cluster.health_error}")
            sick += [] if ok else [cluster.name]
        if sick:
            raise CommandError(f"unhealthy: {', '.join(sick)}")
