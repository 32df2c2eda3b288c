from django.conf import settings
from django.core.management.base import BaseCommand

from paddock.core.bootstrap import admin_ensure


class Command(BaseCommand):
    help = "Create the admin account (once) and the demo team and experiment."

    def add_arguments(self, parser):
        parser.add_argument("--no-demo", action="store_true", help="skip the demo experiment")

    def handle(self, *args, **options):
        user, created = admin_ensure(home=settings.PADDOCK_HOME)
        if created:
            self.stdout.write(f"created the admin account '{user.username}'")
