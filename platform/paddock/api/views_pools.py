"""Pools: a list and one pool, showing the caller only its own teams' member runs (staff
sessions: all of them). The pool job's own doors are in clusters/views.py."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from paddock.api import serializers as s
from paddock.api.base import ActorViewSet, parse_id
from paddock.api.views_teams import ERRORS
from paddock.clusters import selectors


class PoolViewSet(ActorViewSet):
    serializer_class = s.PoolSerializer

    @extend_schema(responses={200: s.PoolSerializer(many=True)})
    def list(self, request):
        pools = selectors.pool_list(actor=self.actor)[:200]
        return Response([selectors.pool_view(actor=self.actor, pool=p) for p in pools])

    @extend_schema(responses={200: s.PoolSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        pool = selectors.pool_get(actor=self.actor, pool_id=parse_id(pk, "pool"))
        return Response(selectors.pool_view(actor=self.actor, pool=pool))
