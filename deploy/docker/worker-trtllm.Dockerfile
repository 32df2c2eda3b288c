# syntax=docker/dockerfile:1.7
# The TensorRT-LLM variant of the Ray node image: the `trtllm` rollout backend.
#
#   docker build -f deploy/docker/worker-trtllm.Dockerfile -t paddock-worker:0.1.0-trtllm .
#
# It starts from NVIDIA's TensorRT-LLM release image (NGC), which brings CUDA, TensorRT,
# tensorrt_llm and the torch build that TensorRT-LLM was made against; nothing here replaces
# that torch. Choose TRTLLM_IMAGE as the release whose torch lies within the torch range of
# pyproject.toml: the build fails, naming both, when it does not. Pulling from nvcr.io may need
# `docker login nvcr.io` with an NGC API key.
#
# Run TensorRT-LLM on a cluster of its own (its own RayCluster, registered in Paddock with
# backends ["trtllm"] or ["trtllm", "torch"]): a job is scheduled on any node with free GPUs,
# so one cluster should not mix nodes with and without the engine.

ARG TRTLLM_IMAGE=nvcr.io/nvidia/tensorrt-llm/release:1.2.0
FROM ${TRTLLM_IMAGE}

ARG RAY_VERSION=2.60.0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

USER 0
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates wget procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/paddock
COPY pyproject.toml constraints-cpu.txt README.md ./
COPY deploy/docker/requirements.py deploy/docker/requirements.py
# torch and tensorrt_llm are held at the versions of the base image
RUN pip freeze | grep -iE '^(torch|tensorrt[-_]llm)==' > /tmp/held.txt \
    && python deploy/docker/requirements.py workers pyproject.toml --without torch \
       > /tmp/requirements.txt \
    && pip install -c /tmp/held.txt "ray[default]==${RAY_VERSION}" -r /tmp/requirements.txt
COPY platform/ platform/
COPY workers/ workers/
COPY paddock_client/ paddock_client/
RUN pip install --no-deps . \
    && rm -rf /opt/paddock/platform /opt/paddock/workers /opt/paddock/paddock_client \
       build ./*.egg-info \
    && if (pip check 2>&1 || true) | grep -iE '^paddock .*torch'; then \
         echo "the base image's torch is outside pyproject.toml's range: pick another TRTLLM_IMAGE"; \
         exit 1; \
       fi \
    && python -c "import tensorrt_llm, torch, ray, workers.job; print('tensorrt_llm', tensorrt_llm.__version__, 'torch', torch.__version__)"

RUN (userdel --remove ubuntu 2>/dev/null || true) \
    && groupadd --gid 1000 ray \
    && useradd --uid 1000 --gid 1000 --create-home --home-dir /home/ray --shell /bin/bash ray \
    && install -d -o 1000 -g 1000 /var/lib/paddock /srv/paddock/artifacts
ENV PADDOCK_HOME=/var/lib/paddock \
    HF_HOME=/var/lib/paddock/hf
WORKDIR /home/ray
USER 1000:1000
EXPOSE 6379 8265 10001 52365
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:52365/api/local_raylet_healthz"]
CMD ["ray", "start", "--head", "--block", "--dashboard-host=0.0.0.0", "--disable-usage-stats"]
