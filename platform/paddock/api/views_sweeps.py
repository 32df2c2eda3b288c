"""Sweeps: create (or check), list, one with its members, stop."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from paddock.api import serializers as s
from paddock.api.base import ActorViewSet, body, parse_id, query
from paddock.api.pagination import NewestFirst
from paddock.api.views_teams import ERRORS
from paddock.sweeps import selectors
from paddock.sweeps.models import Sweep
from paddock.sweeps.services import sweep_create, sweep_stop
from paddock.teams.selectors import team_get


class SweepViewSet(ActorViewSet):
    serializer_class = s.SweepSerializer
    queryset = Sweep.objects.none()
    pagination_class = NewestFirst

    def _detail(self, pk) -> Response:
        sweep = selectors.sweep_get(actor=self.actor, sweep_id=parse_id(pk, "sweep"))
        sweep.member_rows = selectors.sweep_members(sweep)
        return Response(s.SweepDetailSerializer(sweep).data)

    @extend_schema(parameters=[s.SweepFilterSerializer])
    def list(self, request):
        params = query(s.SweepFilterSerializer, request)
        page = self.paginate_queryset(
            selectors.sweep_list(actor=self.actor, team_id=params.get("team"))
        )
        return self.get_paginated_response(s.SweepSerializer(page, many=True).data)

    @extend_schema(
        request=s.SweepCreateSerializer,
        responses={200: s.SweepValidationSerializer, 201: s.SweepDetailSerializer, **ERRORS},
        description="A sweep: every member checked (its spec, the pool key, placement, "
        "quota) before anything is created; the first `parallel` members launched. With "
        "validate_only, only the report (200), nothing created.",
    )
    def create(self, request):
        data = body(s.SweepCreateSerializer, request)
        team = team_get(actor=self.actor, team_id=data.pop("team"))
        budget = data.pop("budget") or {}
        result = sweep_create(
            actor=self.actor, team=team, cluster_id=data.pop("cluster", None),
            budget_members=budget.get("members"), budget_gpu_hours=budget.get("gpu_hours"),
            **data,
        )  # fmt: skip
        if result.sweep is None:  # validate_only
            plan = result.plan
            report = {
                "valid": result.valid, "errors": result.errors,
                "members": [{"index": m.index, "settings": m.settings} for m in plan.members]
                if plan else [],
                "parallel": plan.parallel if plan else None,
            }  # fmt: skip
            return Response(s.SweepValidationSerializer(report).data)
        reply = self._detail(result.sweep.pk)
        reply.status_code = status.HTTP_201_CREATED
        return reply

    @extend_schema(responses={200: s.SweepDetailSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        return self._detail(pk)

    @extend_schema(request=None, responses={200: s.SweepDetailSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        sweep = selectors.sweep_get(actor=self.actor, sweep_id=parse_id(pk, "sweep"))
        sweep_stop(actor=self.actor, sweep=sweep)
        return self._detail(sweep.pk)
