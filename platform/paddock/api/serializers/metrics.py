"""Metric series: the query of one run or several, the series, an export."""

from __future__ import annotations

from rest_framework import serializers

from paddock.experiments.metrics import MAX_POINTS_LIMIT, X_AXES
from paddock.experiments.metrics_export import FORMATS as EXPORT_FORMATS

from .common import MAX_ID, Id

MAX_COMPARED_RUNS = 50  # an experiment's runs: 3 backends × up to 16 seeds


class MetricsQuerySerializer(serializers.Serializer):
    keys = serializers.CharField(required=False, help_text="comma-separated; default: all")
    max_points = serializers.IntegerField(min_value=2, max_value=MAX_POINTS_LIMIT, default=1000)
    x = serializers.ChoiceField(choices=X_AXES, default="step")
    x_min = serializers.FloatField(
        required=False, min_value=-1e300, max_value=1e300,
        help_text="only points with x ≥ x_min (a zoom: finer buckets over the window)",
    )  # fmt: skip
    x_max = serializers.FloatField(
        required=False, min_value=-1e300, max_value=1e300, help_text="only points with x ≤ x_max"
    )
    sample = serializers.ChoiceField(
        choices=("minmax", "stride"), default="minmax",
        help_text="minmax: the lowest and highest point per bucket (reads every point, keeps "
        "spikes); stride: evenly spaced steps by index probes (fast, for a first frame; "
        "count is null)",
    )  # fmt: skip

    def validate(self, attrs: dict) -> dict:
        lo, hi = attrs.get("x_min"), attrs.get("x_max")
        if lo is not None and hi is not None and lo > hi:
            raise serializers.ValidationError({"x_max": "must be ≥ x_min"})
        windowed = lo is not None or hi is not None
        if attrs.get("sample") == "stride" and windowed and attrs.get("x") != "step":
            raise serializers.ValidationError({"sample": "stride takes a window on x=step only"})
        return attrs

    def validate_keys(self, value: str) -> list[str]:
        keys = list(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))
        if len(keys) > 50:
            raise serializers.ValidationError("at most 50 keys")
        return keys


class MetricsExportQuerySerializer(serializers.Serializer):
    # `format` is this endpoint's own parameter: the view's content negotiation ignores it
    format = serializers.ChoiceField(choices=EXPORT_FORMATS, default="csv")
    keys = serializers.CharField(required=False, help_text="comma-separated; default: all")

    def validate_keys(self, value: str) -> list[str]:
        keys = list(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))
        if len(keys) > 1000:
            raise serializers.ValidationError("at most 1000 keys")
        return keys


class ComparedRunsQuerySerializer(serializers.Serializer):
    """The runs of a comparison: named one by one, or every run of an experiment."""

    runs = serializers.CharField(
        required=False,
        help_text=f"comma-separated run ids (at most {MAX_COMPARED_RUNS}); or `experiment`",
    )
    experiment = Id(required=False, help_text="every run of this experiment, oldest first")

    def validate(self, attrs: dict) -> dict:
        attrs = super().validate(attrs)
        if ("runs" in attrs) == ("experiment" in attrs):
            raise serializers.ValidationError({"runs": "give runs or experiment (one of them)"})
        return attrs

    def validate_runs(self, value: str) -> list[int]:
        try:
            ids = list(dict.fromkeys(int(v) for v in value.split(",") if v.strip()))
        except ValueError:
            raise serializers.ValidationError("comma-separated run ids") from None
        if not ids or len(ids) > MAX_COMPARED_RUNS or not all(1 <= i <= MAX_ID for i in ids):
            raise serializers.ValidationError(f"1 to {MAX_COMPARED_RUNS} run ids")
        return ids


class MultiMetricsQuerySerializer(ComparedRunsQuerySerializer, MetricsQuerySerializer):
    keys = serializers.CharField(help_text="comma-separated metric keys")


class SeriesSerializer(serializers.Serializer):
    key = serializers.CharField()
    x = serializers.ListField(child=serializers.FloatField())
    y = serializers.ListField(child=serializers.FloatField(allow_null=True))
    step = serializers.ListField(child=serializers.IntegerField())
    count = serializers.IntegerField(
        allow_null=True, help_text="points stored before downsampling (null with sample=stride)"
    )
    downsampled = serializers.BooleanField(allow_null=True)


class RunMetricsSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    x = serializers.CharField()
    series = SeriesSerializer(many=True)


class MultiMetricsSerializer(serializers.Serializer):
    x = serializers.CharField()
    runs = RunMetricsSerializer(many=True)
