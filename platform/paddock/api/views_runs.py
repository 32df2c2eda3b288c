"""Runs: lists, control (pause / resume / abort), events, checkpoints and their download,
metrics (one run, or several for a comparison)."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action, api_view
from rest_framework.response import Response

from paddock.api import serializers as s
from paddock.api.base import ActorViewSet, parse_id, query, request_actor
from paddock.api.errors import not_found
from paddock.api.pagination import NewestFirst
from paddock.api.views_teams import ERRORS
from paddock.experiments import selectors
from paddock.experiments.artifacts import checkpoint_download
from paddock.experiments.control import RUN_CONTROLS
from paddock.experiments.metrics import metric_keys, metric_series
from paddock.experiments.models import Run


def _series(run_id: int, keys: list[str], x: str, max_points: int) -> dict:
    series = [
        metric_series(run_id=run_id, key=key, x=x, max_points=max_points)
        for key in keys or metric_keys(run_id=run_id)
    ]
    return {"run": run_id, "x": x, "series": series}


class RunViewSet(ActorViewSet):
    serializer_class = s.RunSerializer
    queryset = Run.objects.none()
    pagination_class = NewestFirst

    def _run(self, pk) -> Run:
        return selectors.run_get(actor=self.actor, run_id=parse_id(pk, "run"))

    @extend_schema(parameters=[s.RunFilterSerializer])
    def list(self, request):
        filters = query(s.RunFilterSerializer, request)
        renames = {"team": "team_id", "experiment": "experiment_id", "state": "states"}
        filters = {renames.get(k, k): v for k, v in filters.items()}
        page = self.paginate_queryset(selectors.run_list(actor=self.actor, **filters))
        return self.get_paginated_response(s.RunSerializer(page, many=True).data)

    @extend_schema(responses={200: s.RunSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        return Response(s.RunSerializer(self._run(pk)).data)

    def _control(self, pk, verb: str) -> Response:
        run = RUN_CONTROLS[verb](actor=self.actor, run=self._run(pk))
        return Response(s.RunSerializer(self._run(run.pk)).data)

    @extend_schema(request=None, responses={200: s.RunSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._control(pk, "pause")

    @extend_schema(request=None, responses={200: s.RunSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._control(pk, "resume")

    @extend_schema(request=None, responses={200: s.RunSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def abort(self, request, pk=None):
        return self._control(pk, "abort")

    @extend_schema(
        parameters=[s.RunEventQuerySerializer],
        responses={200: s.RunEventPageSerializer, **ERRORS},
    )
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        params = query(s.RunEventQuerySerializer, request)
        events = selectors.run_event_list(
            actor=self.actor, run=self._run(pk), after_id=params["after"],
            kind=params.get("kind", ""), limit=params["limit"],
        )  # fmt: skip
        last_id = events[-1].id if events else params["after"]
        return Response(
            {"results": s.RunEventSerializer(events, many=True).data, "last_id": last_id}
        )

    @extend_schema(responses={200: s.CheckpointSerializer(many=True), **ERRORS})
    @action(detail=True, methods=["get"])
    def checkpoints(self, request, pk=None):
        checkpoints = selectors.checkpoint_list(actor=self.actor, run=self._run(pk))
        return Response(s.CheckpointSerializer(checkpoints, many=True).data)

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **ERRORS})
    @action(
        detail=True,
        methods=["get"],
        url_path=r"checkpoints/(?P<checkpoint_id>[0-9]+)/download",
    )
    def checkpoint_download(self, request, pk=None, checkpoint_id=None):
        checkpoint = selectors.checkpoint_get(
            actor=self.actor,
            run_id=parse_id(pk, "run"),
            checkpoint_id=parse_id(checkpoint_id, "checkpoint"),
        )
        download = checkpoint_download(checkpoint=checkpoint)
        response = StreamingHttpResponse(download.chunks, content_type=download.content_type)
        response["Content-Disposition"] = f'attachment; filename="{download.filename}"'
        if download.size is not None:
            response["Content-Length"] = str(download.size)
        return response

    @extend_schema(
        parameters=[s.MetricsQuerySerializer],
        responses={200: s.RunMetricsSerializer, **ERRORS},
        description="Series downsampled on the server to at most max_points each: min and "
        "max per bucket, so spikes survive.",
    )
    @action(detail=True, methods=["get"])
    def metrics(self, request, pk=None):
        params = query(s.MetricsQuerySerializer, request)
        run = self._run(pk)
        data = _series(run.pk, params.get("keys") or [], params["x"], params["max_points"])
        return Response(s.RunMetricsSerializer(data).data)


@extend_schema(
    parameters=[s.MultiMetricsQuerySerializer],
    responses={200: s.MultiMetricsSerializer, **ERRORS},
    description="The same keys for several runs (a comparison): one series per run × key.",
)
@api_view(["GET"])
def multi_metrics(request):
    params = query(s.MultiMetricsQuerySerializer, request)
    actor = request_actor(request)
    visible = set(
        selectors.run_list(actor=actor).filter(pk__in=params["runs"]).values_list("pk", flat=True)
    )
    missing = [r for r in params["runs"] if r not in visible]
    if missing:
        raise not_found(f"run {missing[0]}")
    runs = [_series(r, params["keys"], params["x"], params["max_points"]) for r in params["runs"]]
    return Response(s.MultiMetricsSerializer({"x": params["x"], "runs": runs}).data)
