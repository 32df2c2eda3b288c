"""deploy/helm/paddock: the chart's files parse, every value and helper a template names
exists, and, where the Helm SDK is installed (`pip install helm-python-sdk`: Helm's own Go
engine, no binary), the templates render and pass `helm lint`. Without it the render checks
skip, and docs/deployment.md gives the manual `helm template` step."""

from __future__ import annotations

import json
import re

import pytest

from .conftest import CHART, REPO, load_yaml, load_yaml_all

TEMPLATES = sorted(p for p in (CHART / "templates").iterdir() if p.suffix in (".yaml", ".tpl"))
VALUES = {
    "secrets": {"secretKey": "k" * 50, "adminPassword": "first-password"},
    "database": {"url": "postgres://paddock:pw@db.example.com:5432/paddock"},
    "redis": {"url": "rediss://:pw@redis.example.com:6380/0"},
}


def test_chart_and_values_parse():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(load_yaml(CHART / "values.yaml")) <= set(schema["properties"])
    chart = load_yaml(CHART / "Chart.yaml")
    assert chart["apiVersion"] == "v2" and chart["name"] == "paddock"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    values = load_yaml(CHART / "values.yaml")
    for key in ("image", "secrets", "database", "redis", "ray", "web", "worker", "beat",
                "migrations", "ingress", "artifacts"):  # fmt: skip
        assert key in values, key


def _lookup(values: dict, dotted: str) -> bool:
    node = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_template_names_only_what_exists(path):
    text = path.read_text()
    assert text.count("{{") == text.count("}}"), "unbalanced {{ }}"
    values = load_yaml(CHART / "values.yaml")
    for dotted in re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text):
        assert _lookup(values, dotted.rstrip(".")), f"{path.name}: .Values.{dotted} is unset"
    defined = set()
    for tpl in TEMPLATES:
        defined |= set(re.findall(r'define "([^"]+)"', tpl.read_text()))
    for name in re.findall(r'include "([^"]+)"', text):
        assert name in defined, f"{path.name}: include {name!r} is never defined"


# --- rendered with Helm's engine ------------------------------------------------------------


@pytest.fixture(scope="module")
def helm():
    try:
        import helm_python
    except (ImportError, OSError) as exc:  # not installed, or its native library won't load
        pytest.skip(
            f"the Helm SDK is unavailable ({exc}); pip install helm-python-sdk, or run "
            "`helm lint` and `helm template` by hand as docs/deployment.md says"
        )
    return helm_python


def render(helm, values: dict) -> list[dict]:
    with helm.Chart.load(str(CHART)) as chart:
        out = chart.render(values, name="paddock", namespace="paddock", is_install=True)
    docs = []
    for path, text in out.items():
        if not path.endswith("NOTES.txt"):
            docs += load_yaml_all(text)
    return docs


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.fixture(scope="module")
def docs(helm):
    return render(helm, VALUES)


def test_renders_the_platform(docs):
    deployments = by_kind(docs, "Deployment")
    assert set(deployments) == {"paddock-web", "paddock-worker", "paddock-beat"}
    assert set(by_kind(docs, "Job")) == {"paddock-migrate"}
    assert set(by_kind(docs, "Service")) == {"paddock-web"}
    assert set(by_kind(docs, "Secret")) == {"paddock-env"}
    assert set(by_kind(docs, "ConfigMap")) == {"paddock-env"}
    assert set(by_kind(docs, "PersistentVolumeClaim")) == {"paddock-artifacts"}
    beat = deployments["paddock-beat"]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"


def _pods(docs):
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def test_every_pod_runs_as_non_root_with_the_environment(docs):
    for name, pod in _pods(docs):
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        (container,) = pod["containers"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
        refs = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
        assert refs == {"paddock-env"}, name
        token = [e for e in container["env"] if e["name"] == "RAY_AUTH_TOKEN"]
        assert token[0]["valueFrom"]["secretKeyRef"]["key"] == "auth_token", name


def test_config_and_secret_hold_paddocks_settings(docs):
    config = by_kind(docs, "ConfigMap")["paddock-env"]["data"]
    assert config["PADDOCK_PUBLIC_URL"] == "https://paddock.example.com"
    assert config["RAY_AUTH_MODE"] == "token"
    assert config["PADDOCK_DEBUG"] == "0"
    secret = by_kind(docs, "Secret")["paddock-env"]["stringData"]
    assert set(secret) == {
        "PADDOCK_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "PADDOCK_ADMIN_PASSWORD",
    }  # fmt: skip
    assert secret["DATABASE_URL"].startswith("postgres://")


def test_migrations_run_before_anything_else(docs):
    def weight(doc):
        notes = doc["metadata"].get("annotations", {})
        assert "pre-upgrade" in notes.get("helm.sh/hook", ""), doc["metadata"]["name"]
        return int(notes["helm.sh/hook-weight"])

    job = by_kind(docs, "Job")["paddock-migrate"]
    config = by_kind(docs, "ConfigMap")["paddock-env"]
    secret = by_kind(docs, "Secret")["paddock-env"]
    assert weight(config) < weight(job) and weight(secret) < weight(job)
    command = " ".join(job["spec"]["template"]["spec"]["containers"][0]["command"])
    assert "manage.py migrate --noinput" in command and "paddock_bootstrap" in command


def test_web_probes_send_an_allowed_host(docs):
    web = by_kind(docs, "Deployment")["paddock-web"]["spec"]["template"]["spec"]
    for probe in ("readinessProbe", "livenessProbe"):
        get = web["containers"][0][probe]["httpGet"]
        headers = {h["name"]: h["value"] for h in get["httpHeaders"]}
        assert get["path"] == "/healthz"
        assert headers == {"Host": "paddock.example.com", "X-Forwarded-Proto": "https"}


def test_ingress_passes_everything_to_web_with_websocket_timeouts(docs):
    ingress = by_kind(docs, "Ingress")["paddock"]
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/" and path["pathType"] == "Prefix"
    assert path["backend"]["service"]["name"] == "paddock-web"
    notes = ingress["metadata"]["annotations"]
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert ingress["spec"]["tls"][0]["hosts"] == ["paddock.example.com"]


def test_existing_secret_and_autoscaling(helm):
    docs = render(
        helm,
        {"secrets": {"existingSecret": "paddock-prod"},
         "web": {"autoscaling": {"enabled": True}}},
    )  # fmt: skip
    assert not by_kind(docs, "Secret")
    for name, pod in _pods(docs):
        refs = {next(iter(ref.values()))["name"] for ref in pod["containers"][0]["envFrom"]}
        assert "paddock-prod" in refs, name
    assert "replicas" not in by_kind(docs, "Deployment")["paddock-web"]["spec"]
    assert set(by_kind(docs, "HorizontalPodAutoscaler")) == {"paddock-web"}


def test_missing_database_url_is_refused(helm):
    values = {**VALUES, "database": {"url": ""}}
    with pytest.raises(Exception, match="database.url"):
        render(helm, values)


def test_helm_lint(helm):
    report = helm.lint(str(CHART), values=VALUES, strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


def test_chart_paths_match_the_images():
    """The chart runs what the platform image contains."""
    values = load_yaml(CHART / "values.yaml")
    dockerfile = (REPO / "deploy" / "docker" / "platform.Dockerfile").read_text()
    assert "/srv/paddock/artifacts" in dockerfile
    assert values["artifacts"]["mountPath"] == "/srv/paddock/artifacts"
    assert values["artifactsUri"] == "file://" + values["artifacts"]["mountPath"]
    assert "deploy/docker/healthcheck.py" in dockerfile


def test_ray_auth_off_and_extra_env(helm):
    extra = [{"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"}]
    docs = render(helm, {**VALUES, "ray": {"auth": {"enabled": False}}, "extraEnv": extra})
    assert "RAY_AUTH_MODE" not in by_kind(docs, "ConfigMap")["paddock-env"]["data"]
    for name, pod in _pods(docs):
        assert pod["containers"][0]["env"] == extra, name


def test_compose_and_chart_give_the_platform_the_same_variables(docs, compose):
    chart = set(by_kind(docs, "ConfigMap")["paddock-env"]["data"])
    chart |= set(by_kind(docs, "Secret")["paddock-env"]["stringData"])
    (_, pod), *_ = _pods(docs)
    chart |= {e["name"] for e in pod["containers"][0]["env"]}
    services = compose["services"]
    composed = set(services["web"]["environment"]) | set(services["migrate"]["environment"])
    assert chart == composed


def test_values_schema_refuses_typos_and_wrong_urls(helm):
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema(VALUES)
        for bad, where in (
            ({"web": {"replica": 3}}, "replica"),
            ({"image": {"repository": "r", "tag": "latest"}}, "/image/tag"),
            ({"database": {"url": "mysql://db/paddock"}}, "/database/url"),
            ({"publicUrl": "paddock.example.com"}, "/publicUrl"),
        ):
            with pytest.raises(Exception, match=where):
                chart.validate_schema({**VALUES, **bad})


def test_metrics_off_by_default(docs):
    assert not by_kind(docs, "ServiceMonitor")
    assert "PADDOCK_METRICS_TOKEN" not in by_kind(docs, "Secret")["paddock-env"]["stringData"]


def test_metrics_and_service_monitors(helm):
    metrics = {"enabled": True, "token": "scrape-token",
               "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}  # fmt: skip
    docs = render(helm, {**VALUES, "metrics": metrics})
    secret = by_kind(docs, "Secret")["paddock-env"]["stringData"]
    assert secret["PADDOCK_METRICS_TOKEN"] == "scrape-token"
    monitors = by_kind(docs, "ServiceMonitor")
    assert set(monitors) == {"paddock-web", "paddock-worker"}
    services = by_kind(docs, "Service")
    for name, monitor in monitors.items():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "prom"
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert endpoint["authorization"]["credentials"] == {
            "name": "paddock-env", "key": "PADDOCK_METRICS_TOKEN"}  # fmt: skip
        # the monitor's selector and port find exactly one Service's named port
        wanted = monitor["spec"]["selector"]["matchLabels"]
        chosen = [s for s in services.values()
                  if wanted.items() <= s["metadata"]["labels"].items()]  # fmt: skip
        assert len(chosen) == 1, name
        assert endpoint["port"] in [p["name"] for p in chosen[0]["spec"]["ports"]], name
    for name, pod in _pods(docs):  # every process of a pod writes to one emptyDir
        if name not in ("paddock-web", "paddock-worker"):
            continue  # beat and the migrations job record nothing
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PROMETHEUS_MULTIPROC_DIR"] == "/var/run/paddock-prometheus", name
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["prometheus"] == env["PROMETHEUS_MULTIPROC_DIR"], name
        assert {"name": "prometheus", "emptyDir": {}} in pod["volumes"], name
    worker = by_kind(docs, "Deployment")["paddock-worker"]["spec"]["template"]["spec"]
    (container,) = worker["containers"]
    assert {"name": "PADDOCK_WORKER_METRICS_PORT", "value": "9808"} in container["env"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9808}]
    with pytest.raises(Exception, match="metrics.token"):
        render(helm, {**VALUES, "metrics": {"enabled": True}})
