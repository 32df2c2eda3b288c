from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse

from paddock.http.policy import request_scrape_allowed

from .health import health_report


def livez(request: HttpRequest) -> JsonResponse:
    """Liveness: this process answers. Nothing else is checked, so an orchestrator never
    restarts the web tier because a dependency (Ray, Celery) is down."""
    return JsonResponse({"status": "ok"})


def healthz(request: HttpRequest) -> JsonResponse:
    """200 while the server can reach its database (so it can serve); `?strict=1` answers
    503 unless every component is healthy. The body says `ok` or `degraded`, and names each
    component's state (addresses, versions, host names) only to an operator: a staff
    session, or a caller the Prometheus scrape's rule admits (the metrics token, or this
    machine: `paddock up`, the container's health check)."""
    report = health_report()
    down = not report["components"]["database"]["ok"]
    if request.GET.get("strict") in ("1", "true"):
        down = report["status"] != "ok"
    if not _operator(request):
        report = {"status": report["status"]}
    return JsonResponse(report, status=503 if down else 200)


def _operator(request: HttpRequest) -> bool:
    return getattr(request.user, "is_staff", False) or request_scrape_allowed(request)


def spa(request: HttpRequest) -> HttpResponse:
    """The browser app: frontend/dist/index.html for every client-side route."""
    index = settings.FRONTEND_DIST / "index.html"
    if index.is_file():
        return FileResponse(index.open("rb"), content_type="text/html")
    return HttpResponse(
        "<!doctype html><title>Paddock</title><h1>Paddock</h1>"
        "<p>The browser app is not built. Run <code>make up</code>, which builds it, or use "
        "the API at <a href='/api/v1/docs/'>/api/v1/docs/</a>.</p>",
        content_type="text/html",
    )
