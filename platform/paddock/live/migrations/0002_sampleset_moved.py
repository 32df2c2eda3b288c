# SampleSet moved to the experiments app (experiments/migrations/0004_sampleset.py): only
# the state changes, the table stays.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("live", "0001_initial"),
        ("experiments", "0004_sampleset"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="SampleSet")],
        ),
    ]
