"""Django settings. Everything variable comes from the environment (see environment.py and
docs/configuration.md); nothing here is a secret."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

from workers.egress import EgressPolicy

from .environment import (
    celery_broker_url,
    cidrs_from,
    read_environment,
    redis_db,
    secret_key,
)

ENV = read_environment()
REPO_ROOT = Path(__file__).resolve().parents[2]
PADDOCK_HOME = ENV.home
PADDOCK_PUBLIC_URL = ENV.public_url
PADDOCK_ARTIFACTS_URI = ENV.artifacts_uri
# Where a spec's model.path and data paths may point (experiments/spec_paths.py)
PADDOCK_MODEL_ROOTS = os.environ.get("PADDOCK_MODEL_ROOTS", str(ENV.home / "models")).split(":")
# a root holding {team} is one per team (/srv/data/{team}: team 7 reads /srv/data/7), one
# without it is shared by every team (workers/path_guard.py)
PADDOCK_DATA_ROOTS = os.environ.get("PADDOCK_DATA_ROOTS", str(ENV.home / "data" / "{team}")).split(
    ":"
)
# where a spec's logging.tensorboard.dir may point besides the run's own output (none: only there)
PADDOCK_LOG_ROOTS = [r for r in os.environ.get("PADDOCK_LOG_ROOTS", "").split(":") if r]
# What a spec's URLs may reach (workers/egress.py): launch checks them against it, and dispatch
# hands the same PADDOCK_EGRESS_* variables to every job, whose clients keep it
PADDOCK_EGRESS = EgressPolicy.from_env()
# Networks (CIDRs) a team's admins may register clusters in through the API (clusters/
# approval.py); empty: only staff and the operator register clusters
PADDOCK_CLUSTER_NETWORKS = cidrs_from(
    "PADDOCK_CLUSTER_NETWORKS", os.environ.get("PADDOCK_CLUSTER_NETWORKS", "")
)
# every user's quota over all their teams (teams/models.py UserQuota; staff change one user's
# in the admin): creating teams does not multiply what a user may run
PADDOCK_USER_MAX_CONCURRENT_RUNS = int(os.environ.get("PADDOCK_USER_MAX_CONCURRENT_RUNS", "8"))
PADDOCK_USER_MAX_GPUS = float(os.environ.get("PADDOCK_USER_MAX_GPUS", "16"))
PADDOCK_USER_MAX_QUEUED_RUNS = int(os.environ.get("PADDOCK_USER_MAX_QUEUED_RUNS", "100"))
# the largest dataset upload: refused while it arrives, never read into memory
PADDOCK_MAX_DATASET_BYTES = int(os.environ.get("PADDOCK_MAX_DATASET_BYTES", str(256 * 2**20)))
# the operator's spec limits (workers/spec.py reads the variable itself); handed to every job
PADDOCK_SPEC_LIMITS = os.environ.get("PADDOCK_SPEC_LIMITS", "")
# a finished run's ingest token still acknowledges a retried batch for this long, then dies
PADDOCK_RUN_TOKEN_GRACE_S = int(os.environ.get("PADDOCK_RUN_TOKEN_GRACE_S", "300"))
# a run still `starting` this long after its dispatch fails (its Ray job is stopped)
PADDOCK_START_TIMEOUT_S = float(os.environ.get("PADDOCK_START_TIMEOUT_S", "900"))
# runs a new pool hosts at most, unless its cluster declares capacity.pool_runs (docs/pools.md)
PADDOCK_POOL_CAPACITY = int(os.environ.get("PADDOCK_POOL_CAPACITY", "4"))
# an aborted run's job has this long to stop on its own before the Jobs API stops it
PADDOCK_ABORT_GRACE_S = float(os.environ.get("PADDOCK_ABORT_GRACE_S", "30"))
# the hot reads' statements prepared on their connection (core/fixed_sql.py); off behind a
# pooler that drops prepared statements (PgBouncer in transaction mode before 1.21)
_prepared = os.environ.get("PADDOCK_PREPARED_STATEMENTS", "true").strip().lower()
PADDOCK_PREPARED_STATEMENTS = _prepared not in ("0", "false", "no", "off")
# the bearer token of a Prometheus scrape of /metrics; unset: loopback, unproxied only
PADDOCK_METRICS_TOKEN = os.environ.get("PADDOCK_METRICS_TOKEN", "")
# requests a minute one API token may make (http/limits.py); 0: no limit
PADDOCK_API_RATE_LIMIT = int(os.environ.get("PADDOCK_API_RATE_LIMIT", "1200"))
# the longest an API token may live, in days: one made without an expiry gets this one
PADDOCK_TOKEN_MAX_DAYS = int(os.environ.get("PADDOCK_TOKEN_MAX_DAYS", "365"))
# Peers whose X-Forwarded-For is believed (addresses or CIDRs; http/client_address.py)
PADDOCK_TRUSTED_PROXIES = cidrs_from(
    "PADDOCK_TRUSTED_PROXIES", os.environ.get("PADDOCK_TRUSTED_PROXIES", "")
)
RAY_ADDRESS = ENV.ray_address
REDIS_URL = ENV.redis_url

SECRET_KEY = secret_key(ENV.home)
DEBUG = ENV.debug
ALLOWED_HOSTS = ENV.allowed_hosts
CSRF_TRUSTED_ORIGINS = [
    origin for origin in (ENV.public_url,) if origin.startswith(("http://", "https://"))
]
CSRF_FAILURE_VIEW = "paddock.core.csrf.csrf_failure"  # the API's JSON error, not HTML

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served from here (no CDN)
    "channels",
    "paddock.core",
    "paddock.http",
    "paddock.teams",
    "paddock.experiments",
    "paddock.clusters",
    "paddock.live",
    "paddock.sweeps",
    "paddock.api",
    "paddock.ops",
]

MIDDLEWARE = [
    "paddock.monitoring.middleware.RequestMetricsMiddleware",  # outermost: times it all
    # the request policy (http/policy.py): hosts, https, security headers
    "paddock.http.middleware.FrontDoorMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
# Django's SecurityMiddleware and XFrameOptionsMiddleware are not in the chain: their rules
# are http/policy.py's, applied by FrontDoorMiddleware, whose own check (paddock.E001)
# replaces these two
SILENCED_SYSTEM_CHECKS = ["security.W001", "security.W002"]

ROOT_URLCONF = "paddock.urls"
ASGI_APPLICATION = "paddock.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def _database(url: str) -> dict:
    config = dj_database_url.parse(url, conn_max_age=0, conn_health_checks=True)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # The ASGI server, the Celery worker and beat share this file: WAL lets readers run
        # beside the writer, IMMEDIATE transactions take the write lock up front so two
        # writers queue (timeout) instead of failing with "database is locked" mid-way.
        config["OPTIONS"] = {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    elif config["ENGINE"] == "django.db.backends.postgresql":
        # A pool, not a connection per request: opening a PostgreSQL connection costs more
        # than a whole ingest batch. (Persistent connections are unsafe under ASGI; Django's
        # psycopg pool is the supported way.)
        config["CONN_MAX_AGE"] = 0
        config["CONN_HEALTH_CHECKS"] = False
        config.setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": 8, "timeout": 30}
    return config


DATABASES = {"default": _database(ENV.database_url)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = ENV.home / "static"
STATIC_ROOT.mkdir(exist_ok=True)
FRONTEND_DIST = REPO_ROOT / "frontend" / "dist"
STATICFILES_DIRS = [p for p in (FRONTEND_DIST / "assets",) if p.is_dir()]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_IMMUTABLE_FILE_TEST = r"^/static/.+-[A-Za-z0-9_-]{8}\.(js|css)$"

# --- Celery (broker: Redis; the embedded mode runs a bundled Redis on a unix socket) ---
CELERY_BROKER_URL = celery_broker_url(ENV.redis_url)
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-task leaves the task to be redelivered
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Redis redelivers an unacknowledged task after this long; reconcile covers a lost dispatch
# sooner (DISPATCH_STUCK_S), and every task here is short and safe to run twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(ENV.home / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "run-reconcile": {"task": "paddock.clusters.tasks.run_reconcile", "schedule": 3.0},
    "cluster-health": {"task": "paddock.clusters.tasks.cluster_health", "schedule": 15.0},
    "sweeps-tick": {"task": "paddock.sweeps.tasks.sweeps_tick", "schedule": 3.0},
    "alarms-judge": {"task": "paddock.experiments.tasks.runs_alarms_judge", "schedule": 3.0},
}

# --- Channels: a layer that a Celery task in another process can reach, in both modes ---
# Redis pub/sub rather than channels_redis' list layer: the layer carries broadcasts only
# (group_send of run.batch and run.state), and pub/sub sends one message per group to each
# server process, which hands it to its own consumers, instead of one Redis message per
# viewer (each a copy of a 35 KB batch). bench/live_latency.py, side by side: server CPU
# per batch 7.5-8.5 vs 8.1-11.2 ms with 50 viewers, 9.9-10.2 vs 11.2-13.3 ms with 200.
# Pub/sub channels ignore Redis's database number, so the prefix carries it: two
# deployments on one Redis server in different databases do not hear each other.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [ENV.redis_url],
            "prefix": f"paddock.db{redis_db(ENV.redis_url)}",
        },
    }
}

# --- Cache: Redis, shared by every process (the rate limits of http/limits.py count here) ---
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": ENV.redis_url,
        "KEY_PREFIX": "paddock",
    }
}

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Bearer first: an anonymous request then gets 401 with WWW-Authenticate, not 403
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "paddock.api.authentication.BearerTokenAuthentication",
        "paddock.api.authentication.SessionCsrfAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "EXCEPTION_HANDLER": "paddock.api.exceptions.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # core/jsonbody.py's limits (depth, surrogates, NUL, numbers) on every JSON body
    "DEFAULT_PARSER_CLASSES": ["paddock.api.parsers.BoundedJSONParser"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Paddock API",
    "DESCRIPTION": "Asynchronous LoRA GRPO training, managed: teams, experiments, runs, metrics.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "RoleEnum": "paddock.teams.models.Role",
        "StateEnum": "paddock.experiments.models.RunState",
        # one name for the backends' union, whether a serializer or a model of workers/ has it
        "BackendEnum": "paddock.experiments.models.Backend",
        "PreflightModeEnum": "paddock.experiments.preflight.MODES",
        "SweepStateEnum": "paddock.sweeps.models.SweepState",
        "SweepMethodEnum": "paddock.sweeps.models.SweepMethod",
        "SweepMemberStateEnum": "paddock.sweeps.models.MemberState",
    },
    # Swagger UI from drf-spectacular-sidecar's static files, not a third-party CDN
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Security: production-safe unless PADDOCK_DEBUG is set or the URL is plain http ---
_https = ENV.public_url.startswith("https://")
SESSION_COOKIE_SECURE = _https
CSRF_COOKIE_SECURE = _https
SECURE_SSL_REDIRECT = _https and not DEBUG
SECURE_REDIRECT_EXEMPT = [r"^livez$", r"^healthz$"]  # probes speak plain HTTP inside
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = 31536000 if _https else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = _https
SECURE_HSTS_PRELOAD = _https
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
DATA_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
