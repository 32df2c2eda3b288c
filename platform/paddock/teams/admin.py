from django.contrib import admin

from paddock.teams.models import ApiToken, AuditEvent, Membership, Team, TeamQuota


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
