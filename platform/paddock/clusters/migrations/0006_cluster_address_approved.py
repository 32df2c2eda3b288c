"""RayCluster.address_approved (docs/security.md#clusters). A cluster an operator wrote
(the admin, a shell, the management command, paddock_bootstrap) stays approved; one a team's
admin registered through the API (its `cluster.register` audit event names a user who is not
staff) is not: the platform stops calling it, and so stops sending it the Ray token, until a
staff user approves it or its address lies in PADDOCK_CLUSTER_NETWORKS."""

from django.db import migrations, models


def unapprove_team_registrations(apps, schema_editor):
    RayCluster = apps.get_model("clusters", "RayCluster")
    AuditEvent = apps.get_model("teams", "AuditEvent")
    by_users = AuditEvent.objects.filter(
        action="cluster.register", actor__isnull=False, actor__is_staff=False
    ).values_list("target_id", flat=True)
    ids = [int(t) for t in by_users if t.isdigit()]
    RayCluster.objects.filter(pk__in=ids).update(address_approved=False)


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0005_pool_name_per_team"),
        ("teams", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="raycluster",
            name="address_approved",
            field=models.BooleanField(
                default=True,
                help_text="an operator approved this address: the platform sends the Ray token there",
            ),
        ),
        migrations.RunPython(unapprove_team_registrations, migrations.RunPython.noop),
    ]
