"""Teams, members, tokens, quotas, the audit log, and who am I."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action, api_view
from rest_framework.response import Response

from paddock.api import serializers as s
from paddock.api.base import ActorViewSet, body, parse_id, query, request_actor
from paddock.api.pagination import NewestFirst
from paddock.experiments import selectors as experiment_selectors
from paddock.teams import selectors, services, team_secrets
from paddock.teams.models import Team

ERRORS = {400: s.ErrorSerializer, 403: s.ErrorSerializer, 404: s.ErrorSerializer,
          409: s.ErrorSerializer}  # fmt: skip


@extend_schema(responses=s.MeSerializer)
@api_view(["GET"])
def me(request):
    actor = request_actor(request)
    return Response(
        s.me_answer(actor, selectors.team_list_rows(actor=actor, columns=s.TEAM_COLUMNS))
    )


class TeamViewSet(ActorViewSet):
    serializer_class = s.TeamSerializer
    queryset = Team.objects.none()

    def _team(self, pk) -> Team:
        return selectors.team_get(actor=self.actor, team_id=parse_id(pk, "team"))

    def list(self, request):
        teams = selectors.team_list(actor=self.actor)
        return Response(s.TeamSerializer(teams, many=True, context={"actor": self.actor}).data)

    @extend_schema(request=s.TeamCreateSerializer, responses={201: s.TeamSerializer, **ERRORS})
    def create(self, request):
        team = services.team_create(actor=self.actor, **body(s.TeamCreateSerializer, request))
        request._paddock_actor = None  # the creator's roles changed
        return Response(
            s.TeamSerializer(team, context={"actor": request_actor(request)}).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(responses={200: s.TeamSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        return Response(s.TeamSerializer(self._team(pk), context={"actor": self.actor}).data)

    @extend_schema(request=s.TeamUpdateSerializer, responses={200: s.TeamSerializer, **ERRORS})
    def partial_update(self, request, pk=None):
        team = services.team_update(
            actor=self.actor, team=self._team(pk), **body(s.TeamUpdateSerializer, request)
        )
        return Response(s.TeamSerializer(team, context={"actor": self.actor}).data)

    # --- members ---

    @extend_schema(responses={200: s.MemberSerializer(many=True), **ERRORS})
    @action(detail=True, methods=["get"])
    def members(self, request, pk=None):
        members = selectors.member_list(actor=self.actor, team=self._team(pk))
        return Response(s.MemberSerializer(members, many=True).data)

    @extend_schema(request=s.MemberAddSerializer, responses={201: s.MemberSerializer, **ERRORS})
    @members.mapping.post
    def member_add(self, request, pk=None):
        membership = services.member_add(
            actor=self.actor, team=self._team(pk), **body(s.MemberAddSerializer, request)
        )
        return Response(s.MemberSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.MemberRoleSerializer, responses={200: s.MemberSerializer, **ERRORS})
    @action(detail=True, methods=["patch"], url_path=r"members/(?P<user_id>[0-9]+)")
    def member(self, request, pk=None, user_id=None):
        membership = selectors.member_get(
            actor=self.actor, team=self._team(pk), user_id=parse_id(user_id, "member")
        )
        membership = services.member_set_role(
            actor=self.actor, membership=membership, **body(s.MemberRoleSerializer, request)
        )
        return Response(s.MemberSerializer(membership).data)

    @extend_schema(responses={204: None, **ERRORS})
    @member.mapping.delete
    def member_remove(self, request, pk=None, user_id=None):
        membership = selectors.member_get(
            actor=self.actor, team=self._team(pk), user_id=parse_id(user_id, "member")
        )
        services.member_remove(actor=self.actor, membership=membership)
        return Response(status=status.HTTP_204_NO_CONTENT)

    # --- tokens ---

    @extend_schema(responses={200: s.TokenSerializer(many=True), **ERRORS})
    @action(detail=True, methods=["get"])
    def tokens(self, request, pk=None):
        tokens = selectors.api_token_list(actor=self.actor, team=self._team(pk))
        return Response(s.TokenSerializer(tokens, many=True).data)

    @extend_schema(
        request=s.TokenCreateSerializer, responses={201: s.TokenCreatedSerializer, **ERRORS}
    )
    @tokens.mapping.post
    def token_create(self, request, pk=None):
        token, secret = services.api_token_create(
            actor=self.actor, team=self._team(pk), **body(s.TokenCreateSerializer, request)
        )
        token.token = secret
        reply = Response(s.TokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)
        reply["Cache-Control"] = "no-store"  # the secret: no cache may keep it
        return reply

    @extend_schema(request=None, responses={200: s.TokenSerializer, **ERRORS})
    @action(detail=True, methods=["delete"], url_path=r"tokens/(?P<token_id>[0-9]+)")
    def token_revoke(self, request, pk=None, token_id=None):
        token = selectors.api_token_get(
            actor=self.actor, team=self._team(pk), token_id=parse_id(token_id, "token")
        )
        token = services.api_token_revoke(actor=self.actor, token=token)
        return Response(s.TokenSerializer(token).data)

    # --- secrets (write-only values: docs/security.md#secrets) ---

    @extend_schema(responses={200: s.SecretSerializer(many=True), **ERRORS})
    @action(detail=True, methods=["get"])
    def secrets(self, request, pk=None):
        """The team's secrets, masked: names and when they changed, never a value."""
        found = team_secrets.team_secret_list(actor=self.actor, team=self._team(pk))
        return Response(s.SecretSerializer(found, many=True).data)

    @extend_schema(
        request=s.SecretSetSerializer,
        responses={200: s.SecretSerializer, 201: s.SecretSerializer, **ERRORS},
        description="Set (create or replace) a secret: admins and owners. A spec names it "
        "(`secret: NAME`); its runs' jobs receive it at their start; the API never shows it.",
    )
    @action(detail=True, methods=["put"], url_path=r"secrets/(?P<name>[^/]+)")
    def secret(self, request, pk=None, name=None):
        secret, created = team_secrets.team_secret_set(
            actor=self.actor, team=self._team(pk), name=name,
            **body(s.SecretSetSerializer, request),
        )  # fmt: skip
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(s.SecretSerializer(secret).data, status=code)

    @extend_schema(responses={204: None, **ERRORS})
    @secret.mapping.delete
    def secret_delete(self, request, pk=None, name=None):
        secret = team_secrets.team_secret_get(actor=self.actor, team=self._team(pk), name=name)
        team_secrets.team_secret_delete(actor=self.actor, secret=secret)
        return Response(status=status.HTTP_204_NO_CONTENT)

    # --- quota ---

    def _quota_body(self, quota) -> dict:
        for name, value in experiment_selectors.team_usage(team_id=quota.team_id).items():
            setattr(quota, name, value)
        return s.QuotaSerializer(quota).data

    @extend_schema(responses={200: s.QuotaSerializer, **ERRORS})
    @action(detail=True, methods=["get"])
    def quota(self, request, pk=None):
        return Response(
            self._quota_body(selectors.team_quota_get(actor=self.actor, team=self._team(pk)))
        )

    @extend_schema(request=s.QuotaUpdateSerializer, responses={200: s.QuotaSerializer, **ERRORS})
    @quota.mapping.put
    def quota_set(self, request, pk=None):
        # staff set quotas of teams they are not in; anyone else finds only their own teams
        team = None
        if self.actor.is_staff:
            team = Team.objects.filter(pk=parse_id(pk, "team")).first()
        quota = services.team_quota_set(
            actor=self.actor, team=team or self._team(pk), **body(s.QuotaUpdateSerializer, request)
        )
        return Response(self._quota_body(quota))

    # --- audit ---

    @extend_schema(
        parameters=[s.AuditFilterSerializer],
        responses={200: s.AuditEventSerializer(many=True), **ERRORS},
    )
    @action(detail=True, methods=["get"], pagination_class=NewestFirst)
    def audit(self, request, pk=None):
        filters = query(s.AuditFilterSerializer, request)
        if "actor" in filters:
            filters["actor_id"] = filters.pop("actor")
        events = selectors.audit_list(actor=self.actor, team=self._team(pk), **filters)
        page = self.paginate_queryset(events)
        return self.get_paginated_response(s.AuditEventSerializer(page, many=True).data)
