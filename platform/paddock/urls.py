from django.contrib import admin
from django.urls import include, path, re_path

from paddock.clusters.views import bootstrap, pool_bootstrap, pool_members
from paddock.live.views import ingest
from paddock.monitoring.views import metrics
from paddock.ops.views import healthz, livez, spa
from paddock.teams.admin_login import admin_login

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("livez", livez, name="livez"),
    # answered ahead of the host check by monitoring/middleware.py; this route is the same view
    path("metrics", metrics, name="prometheus-metrics"),
    path("admin/login/", admin_login, name="admin-login"),  # rate limited (before admin's own)
    path("admin/", admin.site.urls),
    path("api/v1/session/", include("paddock.teams.session_urls")),
    path("api/v1/runs/<int:run_id>/ingest", ingest, name="run-ingest"),
    path("api/v1/runs/<int:run_id>/bootstrap", bootstrap, name="run-bootstrap"),
    path("api/v1/pools/<int:pool_id>/bootstrap", pool_bootstrap, name="pool-bootstrap"),
    path("api/v1/pools/<int:pool_id>/members", pool_members, name="pool-members"),
    path("api/v1/", include("paddock.api.urls")),
    re_path(r"^(?!api/|admin/|static/|ws/).*$", spa, name="spa"),
]
