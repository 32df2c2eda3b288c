from django.contrib import admin

from paddock.teams.models import ApiToken, AuditEvent, Membership, Team, TeamQuota, UserQuota


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


class QuotaInline(admin.StackedInline):
    model = TeamQuota
    can_delete = False


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [QuotaInline, MembershipInline]


@admin.register(UserQuota)
class UserQuotaAdmin(admin.ModelAdmin):
    list_display = ["user", "max_concurrent_runs", "max_gpus", "max_queued_runs", "updated_at"]
    raw_id_fields = ["user"]
    search_fields = ["user__username"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    # the hash is useless to read and must not be edited: tokens are created through the API
    list_display = ["name", "prefix", "user", "team", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["team"]
    readonly_fields = ["team", "user", "name", "prefix", "created_at", "last_used_at"]
    exclude = ["hashed"]

    def has_add_permission(self, request):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor", "team", "action", "target_type", "target_id", "ip"]
    list_filter = ["team", "action"]
    search_fields = ["action", "target_id"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
