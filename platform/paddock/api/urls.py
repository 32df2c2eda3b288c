"""/api/v1/ routes: no trailing slashes (`/api/v1/runs/7/metrics`), as docs/api.md spells them."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from paddock.api import (
    views_clusters,
    views_experiments,
    views_pools,
    views_runs,
    views_sweeps,
    views_teams,
)

router = SimpleRouter(trailing_slash=False)
router.register("teams", views_teams.TeamViewSet, basename="team")
router.register("experiments", views_experiments.ExperimentViewSet, basename="experiment")
router.register("configs", views_experiments.ConfigVersionViewSet, basename="config")
router.register("runs", views_runs.RunViewSet, basename="run")
router.register("clusters", views_clusters.ClusterViewSet, basename="cluster")
router.register("pools", views_pools.PoolViewSet, basename="pool")
router.register("sweeps", views_sweeps.SweepViewSet, basename="sweep")
router.register("datasets", views_experiments.DatasetViewSet, basename="dataset")

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # the split view serves its script as a file (?script=), so the page needs no inline
    # script and keeps the site's Content-Security-Policy (http/policy.py)
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
    path("me", views_teams.me, name="me"),
    path("metrics", views_runs.multi_metrics, name="metrics"),
    path("alarms", views_runs.multi_alarms, name="alarms"),
    path("spec/schema", views_experiments.spec_schema, name="spec-schema"),
    path("spec/import", views_experiments.spec_import, name="spec-import"),
    path("", include(router.urls)),
]
