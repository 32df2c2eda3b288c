from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("clusters", "0006_cluster_address_approved")]

    operations = [
        migrations.AddField(
            model_name="raycluster",
            name="environments",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
