from django.contrib import admin

from paddock.clusters.models import RayCluster


@admin.register(RayCluster)
class RayClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "address", "address_approved", "backends", "healthy",
                    "last_seen_at"]  # fmt: skip
    list_filter = ["healthy", "address_approved", "team"]

    def save_model(self, request, obj, form, change):
        # a staff user who sets an address approves it (docs/security.md#clusters)
        if "address" in form.changed_data and request.user.is_staff:
            obj.address_approved = True
        super().save_model(request, obj, form, change)
