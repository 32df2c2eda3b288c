from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("clusters", "0005_pool_name_per_team")]

    operations = [
        migrations.AddField(
            model_name="raycluster",
            name="environments",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
