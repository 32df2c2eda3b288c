"""A named pool is its team's (docs/pools.md): `Pool.team`, the name unique per team, and
unique among the `auto` pools (team null). A named pool made before this belongs to the team
of its first member's run (names were unique across teams, so no two collide); one that
never had a member ends (its job, if any, is told `pool_ended` and exits)."""

import django.db.models.deletion
from django.db import migrations, models


def named_pools_to_their_team(apps, schema_editor):
    Pool = apps.get_model("clusters", "Pool")
    PoolMember = apps.get_model("clusters", "PoolMember")
    for pool in Pool.objects.filter(team__isnull=True).exclude(name__startswith="auto_"):
        first = PoolMember.objects.filter(pool=pool).order_by("id").select_related("run").first()
        if first is None:
            Pool.objects.filter(pk=pool.pk).update(state="ended")
        else:
            Pool.objects.filter(pk=pool.pk).update(team_id=first.run.team_id)


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0004_pools"),
        ("teams", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="pool",
            name="team",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="teams.team",
            ),
        ),
        migrations.AlterField(
            model_name="pool",
            name="name",
            field=models.CharField(max_length=40),
        ),
        migrations.AddConstraint(
            model_name="pool",
            constraint=models.UniqueConstraint(fields=("team", "name"), name="pool_name_per_team"),
        ),
        migrations.AddConstraint(
            model_name="pool",
            constraint=models.UniqueConstraint(
                condition=models.Q(("team__isnull", True)),
                fields=("name",),
                name="pool_auto_name_once",
            ),
        ),
        # the data last: on PostgreSQL an ALTER TABLE after these updates would meet their
        # deferred foreign-key checks ("pending trigger events"); the constraints hold for
        # the old rows (names were unique across teams)
        migrations.RunPython(named_pools_to_their_team, migrations.RunPython.noop),
    ]
