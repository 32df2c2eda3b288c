# SampleSet moved here from the live app: the model's state only, its table (live_sampleset)
# stays as it is (live/migrations/0002_sampleset_moved.py drops it from live's state).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0003_run_state_since"),
        ("live", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="SampleSet",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("step", models.BigIntegerField()),
                        ("dispatch", models.PositiveIntegerField(default=0)),
                        ("items", models.JSONField()),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "live_sampleset",
                        "indexes": [
                            models.Index(fields=["run", "step"], name="sampleset_run_step")
                        ],
                    },
                ),
            ],
        ),
    ]
