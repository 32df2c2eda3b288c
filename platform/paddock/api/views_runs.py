"""Runs: lists, control (pause / resume / abort), events, checkpoints and their download,
metrics (one run, or several for a comparison)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action, api_view
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response

from paddock.api import serializers as s
from paddock.api.base import ActorViewSet, body, parse_id, query, request_actor
from paddock.api.pagination import NewestFirst
from paddock.api.streaming import streaming_response
from paddock.api.views_teams import ERRORS
from paddock.clusters.selectors import run_pool_info
from paddock.core.errors import DomainError, ErrorCode, not_found
from paddock.experiments import selectors
from paddock.experiments.alarms import alarm_rows, run_alarm_arm, run_alarms
from paddock.experiments.artifacts import CHECKPOINT_PARTS, checkpoint_download
from paddock.experiments.control import RUN_CONTROLS
from paddock.experiments.metrics import (
    Series,
    Window,
    metric_keys,
    metric_latest_many,
    metric_series_many,
)
from paddock.experiments.metrics_export import CONTENT_TYPES as EXPORT_CONTENT_TYPES
from paddock.experiments.metrics_export import metrics_export as export_chunks
from paddock.experiments.metrics_stride import metric_series_stride
from paddock.experiments.models import Run


def _series_dict(series: Series, stride: bool) -> dict:
    # built by hand, not through SeriesSerializer: a compare view's answer holds tens of
    # thousands of numbers and DRF's per-element fields cost more than the query
    return {
        "key": series.key, "x": series.x, "y": series.y, "step": series.step,
        "count": None if stride else series.count,
        "downsampled": None if stride else series.downsampled,
    }  # fmt: skip


def _series(run_ids: list[int], params: dict, keys: list[str]) -> list[dict]:
    """One entry per run, each with one series per key; one statement per key for all runs."""
    window = Window(params.get("x_min"), params.get("x_max"))
    stride = params.get("sample") == "stride"
    read = metric_series_stride if stride else metric_series_many
    by_key = [
        read(run_ids=run_ids, key=key, x=params["x"], max_points=params["max_points"],
             window=window)
        for key in keys
    ]  # fmt: skip
    return [
        {"run": run_id, "x": params["x"],
         "series": [_series_dict(series[i], stride) for series in by_key]}
        for i, run_id in enumerate(run_ids)
    ]  # fmt: skip


# The answers of the hot reads, one function each: the view and the fast reads
# (api/fast_reads.py) both call them, so both answer alike (test_fast_reads.py).

RUN_FILTER_NAMES = {"team": "team_id", "experiment": "experiment_id", "state": "states"}


def run_page_answer(*, actor, params: dict, paginator, request) -> dict:
    """A page of the run list: RunFilterSerializer's `params`, DRF's cursor `paginator`."""
    filters = {RUN_FILTER_NAMES.get(k, k): v for k, v in params.items()}
    rows = selectors.run_list_rows(actor=actor, columns=s.RUN_COLUMNS, **filters)
    page = paginator.paginate_queryset(rows, request)
    latest = metric_latest_many([row["id"] for row in page])
    return {"next": paginator.get_next_link(), "previous": paginator.get_previous_link(),
            "results": s.run_rows(page, latest)}  # fmt: skip


def run_detail_answer(*, actor, run_id: int) -> dict:
    """RunDetailSerializer's answer, built as the list's rows are (`run_rows`)."""
    row = selectors.run_row(actor=actor, run_id=run_id, columns=s.RUN_COLUMNS)
    if row is None:
        raise not_found("run")
    [answer] = s.run_rows([row], metric_latest_many([run_id]))
    # its pool as the run's team may see it; the run's other fields load if it reads them
    run = Run.from_db(Run.objects.db, ["id", "team_id", "dispatch_count"],
                      [row["id"], row["team_id"], row["dispatch_count"]])  # fmt: skip
    pool = run_pool_info(run)
    answer["pool"] = None if pool is None else s.RunPoolSerializer(pool).data
    return answer


def run_metrics_answer(*, actor, run_id: int, params: dict) -> dict:
    """One run's series: MetricsQuerySerializer's `params`."""
    run_id = selectors.run_id_visible(actor=actor, run_id=run_id)
    keys = params.get("keys") or metric_keys(run_id=run_id)
    return _series([run_id], params, keys)[0]


class FormatIsAParameter(DefaultContentNegotiation):
    """The export's `format` (csv | parquet) is its own query parameter, not DRF's renderer
    override (which would answer a 404 for any format it has no renderer for): errors are
    JSON, the export itself is a streamed file."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class RunViewSet(ActorViewSet):
    serializer_class = s.RunSerializer
    queryset = Run.objects.none()
    pagination_class = NewestFirst

    def _run(self, pk) -> Run:
        return selectors.run_get(actor=self.actor, run_id=parse_id(pk, "run"))

    @extend_schema(parameters=[s.RunFilterSerializer])
    def list(self, request):
        filters = query(s.RunFilterSerializer, request)
        return Response(
            run_page_answer(actor=self.actor, params=filters, paginator=self.paginator,
                            request=request)
        )  # fmt: skip

    def _detail(self, run_id: int) -> dict:
        return run_detail_answer(actor=self.actor, run_id=run_id)

    @extend_schema(responses={200: s.RunDetailSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        return Response(self._detail(parse_id(pk, "run")))

    def _control(self, pk, verb: str) -> Response:
        run = RUN_CONTROLS[verb](actor=self.actor, run=self._run(pk))
        return Response(self._detail(run.pk))

    @extend_schema(request=None, responses={200: s.RunDetailSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._control(pk, "pause")

    @extend_schema(request=None, responses={200: s.RunDetailSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._control(pk, "resume")

    @extend_schema(request=None, responses={200: s.RunDetailSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def abort(self, request, pk=None):
        return self._control(pk, "abort")

    @extend_schema(responses={200: s.RunAlarms, **ERRORS})
    @action(detail=True, methods=["get"])
    def alarms(self, request, pk=None):
        """The run's alarms (docs/alarms.md): what each saw and since which step, and
        whether it pauses the run."""
        run = self._run(pk)
        return Response(_alarms_body(run.pk, run_alarms(run=run)))

    @extend_schema(request=s.AlarmArmSerializer, responses={200: s.RunAlarms, **ERRORS})
    @action(detail=True, methods=["post"], url_path=r"alarms/(?P<alarm>[^/]{1,100})")
    def alarm_arm(self, request, pk=None, alarm=None):
        """Arm an alarm to pause the run when it fires (`{"pause": true}`), or disarm it."""
        run = self._run(pk)
        data = body(s.AlarmArmSerializer, request)
        run_alarm_arm(actor=self.actor, run=run, name=alarm, pause=data["pause"])
        return Response(_alarms_body(run.pk, run_alarms(run=run)))

    @extend_schema(
        parameters=[s.RunEventQuerySerializer],
        responses={200: s.RunEventPageSerializer, **ERRORS},
        description="Log and status events after an id, oldest first; with `before`, the "
        "events before that id, newest first.",
    )
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        params = query(s.RunEventQuerySerializer, request)
        before, limit = params.get("before"), params["limit"]
        events = selectors.run_event_list(
            actor=self.actor, run=self._run(pk), after_id=params["after"], before_id=before,
            kind=params.get("kind", ""), limit=limit + (before is not None),
        )  # fmt: skip
        next_before = None
        if before is not None:
            more, events = len(events) > limit, events[:limit]
            next_before = events[-1].id if more else None
        last_id = max((e.id for e in events), default=params["after"])
        page = {"results": events, "last_id": last_id, "next_before": next_before}
        return Response(s.RunEventPageSerializer(page).data)

    @extend_schema(
        parameters=[s.SampleQuerySerializer],
        responses={200: s.SampleSetPageSerializer, **ERRORS},
        description="The sample inspector's history: a few prompts of each step with their "
        "completions, rewards and advantages, newest step first, one set per step.",
    )
    @action(detail=True, methods=["get"])
    def samples(self, request, pk=None):
        params = query(s.SampleQuerySerializer, request)
        limit = params["limit"]
        sets = selectors.sample_set_list(
            actor=self.actor, run=self._run(pk), step=params.get("step"),
            before_step=params.get("before_step"), limit=limit + 1,
        )  # fmt: skip
        more, sets = len(sets) > limit, sets[:limit]
        page = {"results": sets, "next_before_step": sets[-1].step if more else None}
        return Response(s.SampleSetPageSerializer(page).data)

    @extend_schema(responses={200: s.CheckpointSerializer(many=True), **ERRORS})
    @action(detail=True, methods=["get"])
    def checkpoints(self, request, pk=None):
        checkpoints = selectors.checkpoint_list(actor=self.actor, run=self._run(pk))
        return Response(s.CheckpointSerializer(checkpoints, many=True).data)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "part", enum=[*CHECKPOINT_PARTS], default="all",  # (`list` is a method here)
                description="adapter: the PEFT adapter folder alone (a tar), no optimizer state",
            )
        ],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **ERRORS},
    )  # fmt: skip
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
        part = request.query_params.get("part", "all")
        download = checkpoint_download(checkpoint=checkpoint, part=part)
        # under ASGI a chunk at a time (api/streaming.py), not the whole archive first
        response = streaming_response(
            request, download.chunks, download.content_type, download.filename
        )
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
        return Response(run_metrics_answer(actor=self.actor, run_id=parse_id(pk, "run"),
                                           params=params))  # fmt: skip

    @extend_schema(
        parameters=[s.MetricsExportQuerySerializer],
        responses={
            (200, "text/csv"): OpenApiTypes.BINARY,
            (200, "application/vnd.apache.parquet"): OpenApiTypes.BINARY,
            **ERRORS,
        },
        description="Every stored point of the run (or of `keys`) at full resolution, streamed: "
        "columns step, key, value, time (Unix seconds), ordered by key then step.",
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="metrics/export",
        content_negotiation_class=FormatIsAParameter,
    )
    def metrics_export(self, request, pk=None):
        run = self._run(pk)
        params = query(s.MetricsExportQuerySerializer, request)
        fmt = params["format"]
        chunks = export_chunks(run_id=run.pk, fmt=fmt, keys=params.get("keys"))
        return streaming_response(
            request, chunks, EXPORT_CONTENT_TYPES[fmt], f"run-{run.pk}-metrics.{fmt}"
        )


def _alarms_body(run_id: int, alarms) -> dict:
    return s.RunAlarms(run_id=run_id, alarms=alarm_rows(alarms)).model_dump()


def _compared_run_ids(actor, params: dict) -> list[int]:
    """The runs a comparison names (`runs`, or every run of `experiment`), each visible to
    the actor; 404 for one that is not."""
    if "experiment" in params:
        run_ids = selectors.experiment_run_ids(actor=actor, experiment_id=params["experiment"])
        if len(run_ids) > s.MAX_COMPARED_RUNS:
            raise DomainError(
                ErrorCode.INVALID,
                f"the experiment has {len(run_ids)} runs; name at most "
                f"{s.MAX_COMPARED_RUNS} with ?runs=",
                field="experiment",
            )
        return run_ids
    run_ids = params["runs"]
    visible = set(
        selectors.run_list(actor=actor).filter(pk__in=run_ids).values_list("pk", flat=True)
    )
    missing = [r for r in run_ids if r not in visible]
    if missing:
        raise not_found(f"run {missing[0]}")
    return run_ids


@extend_schema(
    parameters=[s.ComparedAlarmsQuerySerializer],
    responses={200: s.ComparedAlarms, **ERRORS},
    description="The alarms of several runs (the compare and sweep pages), named by `runs` or "
    "by `experiment`.",
)
@api_view(["GET"])
def multi_alarms(request):
    params = query(s.ComparedAlarmsQuerySerializer, request)
    run_ids = _compared_run_ids(request_actor(request), params)
    runs = Run.objects.filter(pk__in=run_ids).select_related("config").in_bulk()
    return Response({"runs": [_alarms_body(r, run_alarms(run=runs[r])) for r in run_ids]})


@extend_schema(
    parameters=[s.MultiMetricsQuerySerializer],
    responses={200: s.MultiMetricsSerializer, **ERRORS},
    description="The same keys for several runs (a comparison), named by `runs` or by "
    "`experiment`: one series per run × key, one SQL statement per key for all the runs.",
)
@api_view(["GET"])
def multi_metrics(request):
    params = query(s.MultiMetricsQuerySerializer, request)
    run_ids = _compared_run_ids(request_actor(request), params)
    runs = _series(run_ids, params, params["keys"])
    return Response({"x": params["x"], "runs": runs})
