"""Experiments (launch, clone, edit), config versions and their diff, datasets, and the
spec's JSON Schema."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action, api_view
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from paddock.api import serializers as s
from paddock.api.base import ActorViewSet, body, parse_id, query, request_actor
from paddock.api.pagination import NewestFirst
from paddock.api.views_teams import ERRORS
from paddock.experiments import selectors
from paddock.experiments.artifacts import dataset_upload
from paddock.experiments.launch import (
    LaunchResult,
    experiment_clone,
    experiment_launch,
    experiment_update,
)
from paddock.experiments.models import ConfigVersion, Dataset, Experiment, Purpose, Run
from paddock.experiments.preflight import experiment_preflight_override
from paddock.experiments.spec_imports import spec_import as spec_import_service
from paddock.teams.selectors import team_get
from workers.spec import spec_json_schema


def _launch_response(result: LaunchResult, actor) -> Response:
    if result.experiment is None:  # validate_only
        runs = result.plan.runs if result.plan else []
        report = {"valid": result.valid, "errors": result.errors, "runs": runs}
        return Response(s.ValidationReportSerializer(report).data)
    experiment = selectors.experiment_get(actor=actor, experiment_id=result.experiment.pk)
    ids = [run.pk for run in result.runs]
    rows = selectors.run_list(actor=actor).filter(pk__in=ids).values(*s.RUN_COLUMNS)
    by_id = {row["id"]: row for row in rows}
    runs = s.run_rows([by_id[i] for i in ids], {})  # the run list's rows; no metric yet
    return Response(
        {"experiment": s.ExperimentSerializer(experiment).data, "runs": runs},
        status=status.HTTP_201_CREATED,
    )


LAUNCH_RESPONSES = {200: s.ValidationReportSerializer, 201: OpenApiTypes.OBJECT, **ERRORS}


class ExperimentViewSet(ActorViewSet):
    serializer_class = s.ExperimentSerializer
    queryset = Experiment.objects.none()
    pagination_class = NewestFirst

    def _experiment(self, pk) -> Experiment:
        return selectors.experiment_get(actor=self.actor, experiment_id=parse_id(pk, "experiment"))

    @extend_schema(parameters=[s.ExperimentFilterSerializer])
    def list(self, request):
        params = query(s.ExperimentFilterSerializer, request)
        return Response(
            experiment_page_answer(actor=self.actor, params=params, paginator=self.paginator,
                                   request=request)
        )  # fmt: skip

    @extend_schema(
        request=s.LaunchSerializer,
        responses=LAUNCH_RESPONSES,
        description="Launch: one experiment, its config version, and a queued run per "
        "backend × seed. With validate_only, only the report (200), nothing created.",
    )
    def create(self, request):
        data = body(s.LaunchSerializer, request)
        team = team_get(actor=self.actor, team_id=data.pop("team"))
        data["cluster_id"] = data.pop("cluster", None)
        result = experiment_launch(actor=self.actor, team=team, **data)
        return _launch_response(result, self.actor)

    @extend_schema(responses={200: s.ExperimentSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        return Response(s.ExperimentSerializer(self._experiment(pk)).data)

    @extend_schema(
        request=s.ExperimentUpdateSerializer, responses={200: s.ExperimentSerializer, **ERRORS}
    )
    def partial_update(self, request, pk=None):
        experiment = experiment_update(
            actor=self.actor,
            experiment=self._experiment(pk),
            **body(s.ExperimentUpdateSerializer, request),
        )
        return Response(s.ExperimentSerializer(self._experiment(experiment.pk)).data)

    @extend_schema(request=s.CloneSerializer, responses=LAUNCH_RESPONSES)
    @action(detail=True, methods=["post"])
    def clone(self, request, pk=None):
        experiment = self._experiment(pk)
        data = body(s.CloneSerializer, request)
        if "config" in data:
            data["config"] = selectors.config_get(actor=self.actor, config_id=data["config"])
        data["cluster_id"] = data.pop("cluster", None)
        result = experiment_clone(actor=self.actor, experiment=experiment, **data)
        return _launch_response(result, self.actor)

    @extend_schema(responses={200: s.ExperimentPreflight, **ERRORS})
    @action(detail=True, methods=["get"])
    def preflight(self, request, pk=None):
        """The experiment's pre-flight check: its state and each pre-flight run's verdict."""
        return Response(_preflight_body(self._experiment(pk)))

    @extend_schema(request=None, responses={200: s.ExperimentPreflight, **ERRORS})
    @action(detail=True, methods=["post"], url_path="preflight/override")
    def preflight_override(self, request, pk=None):
        """Launch the runs its failed (or unfinished) pre-flight check holds; audited."""
        experiment = experiment_preflight_override(
            actor=self.actor, experiment=self._experiment(pk)
        )
        return Response(_preflight_body(experiment))


def _preflight_body(experiment: Experiment) -> dict:
    runs = Run.objects.filter(experiment=experiment, purpose=Purpose.PREFLIGHT).order_by("id")
    return s.ExperimentPreflight(
        experiment_id=experiment.pk,
        state=experiment.preflight,
        runs=[
            {"run_id": r.pk, "backend": r.backend, "state": r.state, "verdict": r.verdict}
            for r in runs
        ],
    ).model_dump(mode="json")


def experiment_page_answer(*, actor, params: dict, paginator, request) -> dict:
    """A page of the experiment list (ExperimentFilterSerializer's `params`): rows, not
    models, built by hand (experiment_rows), its tags in one query; the view and
    the fast reads (api/fast_reads.py) both answer with it."""
    source = selectors.experiment_list_rows(
        actor=actor, columns=s.EXPERIMENT_COLUMNS, **_renamed(params)
    )
    page = paginator.paginate_queryset(source, request)
    tags = selectors.experiment_tag_names([row["id"] for row in page])
    return {"next": paginator.get_next_link(), "previous": paginator.get_previous_link(),
            "results": s.experiment_rows(page, tags)}  # fmt: skip


def _renamed(filters: dict) -> dict:
    if "team" in filters:
        filters["team_id"] = filters.pop("team")
    return filters


class ConfigVersionViewSet(ActorViewSet):
    serializer_class = s.ConfigVersionSerializer
    queryset = ConfigVersion.objects.none()

    @extend_schema(responses={200: s.ConfigVersionSerializer, **ERRORS})
    def retrieve(self, request, pk=None):
        config = selectors.config_get(actor=self.actor, config_id=parse_id(pk, "config version"))
        return Response(s.ConfigVersionSerializer(config).data)

    @extend_schema(
        methods=["GET"], parameters=[s.DiffQuerySerializer],
        responses={200: s.DiffSerializer, **ERRORS},
    )  # fmt: skip
    @extend_schema(
        methods=["POST"], request=s.SpecDiffSerializer,
        responses={200: s.SpecDiffAnswerSerializer, **ERRORS},
        description="The diff of two sides, each a stored config version or a spec (an edit "
        "not launched yet): a read, nothing stored. A spec is validated as a launch's is "
        "(400 spec_invalid naming `a_spec.<path>` or `b_spec.<path>`).",
    )  # fmt: skip
    @action(detail=False, methods=["get", "post"])
    def diff(self, request):
        if request.method == "GET":
            sides = query(s.DiffQuerySerializer, request)
        else:
            sides = body(s.SpecDiffSerializer, request)
        return Response(selectors.config_diff(actor=self.actor, **sides))


class DatasetViewSet(ActorViewSet):
    serializer_class = s.DatasetSerializer
    queryset = Dataset.objects.none()
    pagination_class = NewestFirst
    parser_classes = [MultiPartParser, FormParser]

    def list(self, request):
        page = self.paginate_queryset(selectors.dataset_list(actor=self.actor))
        return self.get_paginated_response(s.DatasetSerializer(page, many=True).data)

    @extend_schema(
        request=s.DatasetUploadSerializer, responses={201: s.DatasetSerializer, **ERRORS}
    )
    def create(self, request):
        data = body(s.DatasetUploadSerializer, request)
        team = team_get(actor=self.actor, team_id=data["team"])
        dataset = dataset_upload(actor=self.actor, team=team, name=data["name"], data=data["file"])
        return Response(s.DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


@extend_schema(responses=OpenApiTypes.OBJECT)
@api_view(["GET"])
def spec_schema(request):
    """The RunSpec JSON Schema: what the launcher form is built from."""
    return Response(spec_json_schema())


@extend_schema(request=s.ConfigImportSerializer, responses={200: s.SpecImportSerializer, **ERRORS})
@api_view(["POST"])
def spec_import(request):
    """A verl or NeMo-RL config (YAML, a command line, or both) as a run spec, with every key
    it could not carry over: what the launcher's Import tab sends."""
    data = body(s.ConfigImportSerializer, request)
    result = spec_import_service(
        actor=request_actor(request),
        config=data.get("config"),
        command=data.get("command"),
        source=data.get("source"),
        dataset_id=data.get("dataset"),
    )
    return Response(s.SpecImportSerializer(result).data)
