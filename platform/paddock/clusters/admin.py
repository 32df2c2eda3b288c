from django.contrib import admin

from paddock.clusters.models import RayCluster


@admin.register(RayCluster)
class RayClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "address", "backends", "healthy", "last_seen_at"]
    list_filter = ["healthy", "team"]
