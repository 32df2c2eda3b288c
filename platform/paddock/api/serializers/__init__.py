"""Input validation and output shapes, one module per domain. No logic: services decide,
these only translate. The views read them as `serializers.X` through this package."""

# ruff: noqa: F401  (re-exported for the views)

from __future__ import annotations

from .alarms import AlarmArmSerializer, ComparedAlarms, ComparedAlarmsQuerySerializer, RunAlarms
from .clusters import ClusterSerializer
from .common import MAX_ID, Description, ErrorSerializer, Id, Name, UserBriefSerializer
from .experiments import (
    EXPERIMENT_COLUMNS,
    ChangeSerializer,
    CloneSerializer,
    ConfigImportSerializer,
    ConfigVersionSerializer,
    DatasetSerializer,
    DatasetUploadSerializer,
    DiffQuerySerializer,
    DiffSerializer,
    ExperimentFilterSerializer,
    ExperimentSerializer,
    ExperimentUpdateSerializer,
    LaunchSerializer,
    PlannedRunSerializer,
    SpecDiffAnswerSerializer,
    SpecDiffSerializer,
    SpecImportSerializer,
    TagsField,
    ValidationReportSerializer,
    experiment_rows,
)
from .metrics import (
    MAX_COMPARED_RUNS,
    ComparedRunsQuerySerializer,
    MetricsExportQuerySerializer,
    MetricsQuerySerializer,
    MultiMetricsQuerySerializer,
    MultiMetricsSerializer,
    RunMetricsSerializer,
    SeriesSerializer,
)
from .pools import PoolMemberSerializer, PoolSerializer, RunPoolSerializer
from .preflight import ExperimentPreflight
from .runs import (
    RUN_COLUMNS,
    CheckpointSerializer,
    CursorSerializer,
    RunDetailSerializer,
    RunEventPageSerializer,
    RunEventQuerySerializer,
    RunEventSerializer,
    RunFilterSerializer,
    RunSerializer,
    SampleQuerySerializer,
    SampleSetPageSerializer,
    SampleSetSerializer,
    run_rows,
)
from .sweeps import (
    EarlyStoppingSerializer,
    SweepBudgetSerializer,
    SweepCreateSerializer,
    SweepDetailSerializer,
    SweepFilterSerializer,
    SweepMemberSerializer,
    SweepSerializer,
    SweepValidationSerializer,
)
from .teams import (
    TEAM_COLUMNS,
    AuditEventSerializer,
    AuditFilterSerializer,
    MemberAddSerializer,
    MemberRoleSerializer,
    MemberSerializer,
    MeSerializer,
    QuotaSerializer,
    QuotaUpdateSerializer,
    SecretSerializer,
    SecretSetSerializer,
    TeamCreateSerializer,
    TeamSerializer,
    TeamUpdateSerializer,
    TokenCreatedSerializer,
    TokenCreateSerializer,
    TokenSerializer,
    me_answer,
)
