from django.apps import AppConfig
from django.db.models.signals import post_delete


class TeamsConfig(AppConfig):
    name = "paddock.teams"
    label = "teams"

    def ready(self):
        from paddock.teams.models import Membership

        post_delete.connect(
            _membership_deleted, sender=Membership, dispatch_uid="paddock-member-tokens"
        )


def _membership_deleted(sender, instance, **kwargs) -> None:
    """However a membership goes (the API, the Django admin, its team deleted), the tokens
    it gave go with it (teams/services.py member_tokens_revoke says why)."""
    from paddock.teams.services import member_tokens_revoke

    member_tokens_revoke(team_id=instance.team_id, user_id=instance.user_id)
