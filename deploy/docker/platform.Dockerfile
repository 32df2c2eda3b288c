# syntax=docker/dockerfile:1.7
# The Paddock control plane: Django (ASGI, uvicorn), Celery worker and beat, the built browser
# app. One image, three commands (see deploy/compose.yaml and the Helm chart). No torch.
#
#   docker build -f deploy/docker/platform.Dockerfile -t paddock-platform:0.1.0 .
#
# Build context: the repository root. BuildKit reads platform.Dockerfile.dockerignore beside
# this file, so node_modules, .venv and the like never enter the context.
#
# Why no torch: the control plane never imports it, but pyproject.toml lists torch
# in its main dependencies today. deploy/docker/requirements.py prints the platform's
# requirements: `paddock[platform]` once the proposed split of pyproject.toml into
# `[platform]` and `[workers]` extras lands, and until then the main list less the data-plane
# packages. It refuses outright to hand torch or an engine to this image. The project itself
# is then installed with --no-deps, so nothing can pull torch back in.
#
# Layout: the sources stay at /app in the repository's layout (manage.py, platform/, workers/,
# examples/, frontend/dist), because settings.FRONTEND_DIST and dispatch's WORKERS_DIR (the
# `workers` package shipped to Ray jobs as a py_module) are found relative to the sources.

ARG NODE_IMAGE=node:22.20.0-bookworm-slim
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- 1. the browser app -------------------------------------------------------------------
FROM ${NODE_IMAGE} AS frontend
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY frontend/ ./
RUN npm run build

# --- 2. the Python environment (a venv, copied whole into the runtime stage) -------------------
FROM ${PYTHON_IMAGE} AS python
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /app
COPY pyproject.toml constraints-cpu.txt README.md ./
COPY deploy/docker/requirements.py deploy/docker/requirements.py
# dependencies first (a layer that survives source edits), pinned by constraints-cpu.txt
RUN python deploy/docker/requirements.py platform pyproject.toml > /tmp/requirements.txt \
    && pip install -c constraints-cpu.txt -r /tmp/requirements.txt \
    && python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
COPY manage.py ./
COPY platform/ platform/
COPY workers/ workers/
COPY paddock_client/ paddock_client/
# editable, without dependencies: gives the `paddock` CLI (paddock doctor) and the package
# metadata, while the code runs from /app
RUN pip install --no-deps -e . && rm -rf /app/*.egg-info

# --- 3. runtime -------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="paddock-platform" \
      org.opencontainers.image.description="Paddock control plane: Django ASGI, Celery, the web app" \
      org.opencontainers.image.licenses="Apache-2.0"
# uid/gid 1000: the same as the `ray` user of the worker image, so both sides can write the
# shared artifact volume (PADDOCK_ARTIFACTS_URI=file:///srv/paddock/artifacts)
RUN groupadd --gid 1000 paddock \
    && useradd --uid 1000 --gid 1000 --home-dir /var/lib/paddock --no-create-home \
       --shell /usr/sbin/nologin paddock \
    && install -d -o 1000 -g 1000 -m 0750 /var/lib/paddock \
    && install -d -o 1000 -g 1000 -m 0770 /srv/paddock/artifacts
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app/platform:/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=paddock.settings \
    PADDOCK_HOME=/var/lib/paddock \
    PADDOCK_ARTIFACTS_URI=file:///srv/paddock/artifacts
WORKDIR /app
COPY --from=python /opt/venv /opt/venv
COPY --from=python /app /app
COPY examples/ examples/
COPY --from=frontend /src/frontend/dist frontend/dist
COPY deploy/docker/healthcheck.py deploy/docker/healthcheck.py
# numeric, so that Kubernetes can verify runAsNonRoot
USER 1000:1000
EXPOSE 8000
# /healthz answers 200 while the database answers; compose and Helm override this check for
# the worker and beat containers (`healthcheck.py worker|beat`).
HEALTHCHECK --interval=30s --timeout=10s --start-period=40s --retries=3 \
    CMD ["python", "/app/deploy/docker/healthcheck.py", "web"]
# The ASGI server. Worker: `celery -A paddock worker --loglevel=INFO`; beat:
# `celery -A paddock beat --loglevel=INFO`; migrations: `python manage.py migrate --noinput`.
# --no-proxy-headers: the platform itself believes X-Forwarded-For from PADDOCK_TRUSTED_PROXIES
# only (http/client_address.py); the scheme comes from X-Forwarded-Proto (SECURE_PROXY_SSL_HEADER).
CMD ["sh", "-c", "exec uvicorn paddock.asgi:application --host 0.0.0.0 --port 8000 --workers \"${PADDOCK_WEB_WORKERS:-1}\" --lifespan off --ws websockets-sansio --no-proxy-headers"]
