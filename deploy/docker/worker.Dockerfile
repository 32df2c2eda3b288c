# syntax=docker/dockerfile:1.7
# A Ray node for Paddock runs: Ray, torch, PEFT, transformers, vLLM and the `workers` package.
# The same image serves the head and the workers of a cluster (KubeRay, `ray up` or compose).
#
#   GPU (default; vLLM, whose wheel brings the CUDA build of torch it was made for):
#     docker build -f deploy/docker/worker.Dockerfile -t paddock-worker:0.1.0 .
#   CPU (the torch backend only; what deploy/compose.yaml builds):
#     docker build -f deploy/docker/worker.Dockerfile -t paddock-worker:0.1.0-cpu \
#       --build-arg BASE_IMAGE=ubuntu:24.04 --build-arg INSTALL_VLLM=0 \
#       --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu .
#   TensorRT-LLM: see worker-trtllm.Dockerfile beside this file.
#
# Build context: the repository root (worker.Dockerfile.dockerignore keeps it small).
#
# Versions. RAY_VERSION must equal the platform's Ray (constraints-cpu.txt): the platform talks
# to the cluster through Ray's Jobs client. The job itself gets the `workers` package from the
# platform (runtime_env py_modules), so the copy installed here serves `python -m workers.job`
# by hand and `paddock doctor`; the dependencies installed here are what the job imports.
# vLLM pins the torch it was built against: install it first and let it choose torch; the
# project's own requirements are then installed with that torch held (constraint).

ARG BASE_IMAGE=nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04
FROM ${BASE_IMAGE}

ARG RAY_VERSION=2.60.0
ARG INSTALL_VLLM=1
ARG VLLM_VERSION=0.32.0
# only used when INSTALL_VLLM=0 (with vLLM, torch is the one vLLM pins)
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu129

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH

# python3.12-dev and gcc stay in the image: Triton (vLLM's kernels) compiles a small C stub at
# run time. wget: KubeRay's default probes run it inside Ray containers.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       python3.12 python3.12-venv python3.12-dev gcc libc6-dev \
       ca-certificates wget procps \
    && rm -rf /var/lib/apt/lists/* \
    && python3.12 -m venv /opt/venv \
    && pip install --upgrade "pip>=25"

WORKDIR /opt/paddock
COPY pyproject.toml constraints-cpu.txt README.md ./
COPY deploy/docker/requirements.py deploy/docker/requirements.py
RUN if [ "$INSTALL_VLLM" = "1" ]; then \
        pip install "vllm==${VLLM_VERSION}" "ray[default]==${RAY_VERSION}"; \
    else \
        pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
        && pip install "ray[default]==${RAY_VERSION}"; \
    fi \
    && pip freeze | grep -iE '^(torch|ray)==' > /tmp/held.txt \
    && python deploy/docker/requirements.py workers pyproject.toml > /tmp/requirements.txt \
    && pip install -c /tmp/held.txt -r /tmp/requirements.txt

COPY platform/ platform/
COPY workers/ workers/
COPY paddock_client/ paddock_client/
# --no-deps: the dependencies are above; this adds the `workers` package and the CLI
RUN pip install --no-deps . \
    && rm -rf /opt/paddock/platform /opt/paddock/workers /opt/paddock/paddock_client \
       build ./*.egg-info \
    && python -c "import torch, transformers, peft, ray, workers.job; print('torch', torch.__version__, 'ray', ray.__version__)"

# uid 1000, as in the platform image: both write the shared artifact store
# (ubuntu:24.04 ships a user `ubuntu` with that uid: it goes)
RUN (userdel --remove ubuntu 2>/dev/null || true) \
    && groupadd --gid 1000 ray \
    && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/ray --shell /bin/bash ray \
    && install -d -o 1000 -g 1000 /var/lib/paddock /srv/paddock/artifacts
# PADDOCK_HOME: the jobs' cache (the tiny model, Hugging Face files under hf/)
ENV PADDOCK_HOME=/var/lib/paddock \
    HF_HOME=/var/lib/paddock/hf
WORKDIR /home/ray
USER 1000:1000
# 6379 GCS, 8265 dashboard and Jobs API, 10001 Ray client, 52365 dashboard agent (health)
EXPOSE 6379 8265 10001 52365
# a worker node answers here; the head also answers /api/gcs_healthz on 8265. Both are public
# endpoints even under RAY_AUTH_MODE=token.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:52365/api/local_raylet_healthz"]
CMD ["ray", "start", "--head", "--block", "--dashboard-host=0.0.0.0", "--disable-usage-stats"]
