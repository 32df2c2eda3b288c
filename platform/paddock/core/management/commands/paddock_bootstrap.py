from django.conf import settings
from django.core.management.base import BaseCommand

from paddock.core.bootstrap import admin_ensure, demo_team_ensure, local_cluster_ensure


class Command(BaseCommand):
    help = (
        "Create the admin account (once), the demo team (owned by the admin) and register "
        "the local Ray head (RAY_ADDRESS) as a shared cluster. Safe to run on every start."
    )

    def add_arguments(self, parser):
        parser.add_argument("--no-demo", action="store_true", help="skip the demo team")

    def handle(self, *args, **options):
        user, created = admin_ensure(home=settings.PADDOCK_HOME)
        if created:
            self.stdout.write(f"created the admin account '{user.username}'")
        if not options["no_demo"]:
            team, created = demo_team_ensure(owner=user)
            if created:
                self.stdout.write(f"created the demo team '{team.slug}'")
        cluster, created = local_cluster_ensure(address=settings.RAY_ADDRESS)
        if created:
            self.stdout.write(f"registered the Ray cluster '{cluster.name}' at {cluster.address}")
