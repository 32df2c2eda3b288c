from django.conf import settings
from django.core.management.base import BaseCommand

from paddock.ops.bootstrap import (
    admin_ensure,
    demo_backends,
    demo_experiments_ensure,
    demo_team_ensure,
    local_cluster_ensure,
)


class Command(BaseCommand):
    help = (
        "Create the admin account (once), the demo team (owned by the admin) and register "
        "the local Ray head (RAY_ADDRESS) as a shared cluster. Safe to run on every start."
    )

    def add_arguments(self, parser):
        parser.add_argument("--no-demo", action="store_true", help="skip the demo team")
        parser.add_argument(
            "--embedded-ray", action="store_true", help="RAY_ADDRESS is a head on this machine"
        )

    def handle(self, *args, **options):
        user, created = admin_ensure(home=settings.PADDOCK_HOME)
        if created:
            self.stdout.write(f"created the admin account '{user.username}'")
        cluster, created = local_cluster_ensure(
            address=settings.RAY_ADDRESS, embedded=options["embedded_ray"]
        )
        if created:
            self.stdout.write(f"registered the Ray cluster '{cluster.name}' at {cluster.address}")
        if not options["no_demo"]:
            team, created = demo_team_ensure(owner=user)
            if created:
                self.stdout.write(f"created the demo team '{team.slug}'")
            backends, why = demo_backends(cluster)
            launched = demo_experiments_ensure(owner=user, team=team, backends=backends)
            for experiment in launched:
                self.stdout.write(
                    f"launched the demo experiment '{experiment.name}' on {', '.join(backends)}"
                )
            if launched and why:
                self.stdout.write(why)
