"""`pip install paddock` without extras, as a user on a laptop gets it: a clean virtual
environment with the client's real dependencies and nothing else (no torch, no Django), and
its `paddock` command driving a live `paddock up` through a whole run: a token made the
browser's way, login, launch, watch, pause, resume, abort, export, and the adapter download
that `peft` loads (here, in the suite's environment, where peft is).

`paddock up` runs from the suite's environment (the `all` install) on embedded defaults, as
the README's `make up` does; the run is a real `python -m workers.job` training the tiny
model on its Ray head. The light environment is built once per session (about a minute: pip
resolves requests, pydantic, PyYAML, typer and rich from the index or its cache)."""

from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tomllib
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import requests
import torch
import yaml
from safetensors.torch import load_file

from tests.conftest import REPO, free_port, wait_for
from tests.integration.test_dispatch import FAST_SPEC

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SOURCES = ("pyproject.toml", "README.md", "paddock_client", "workers", "platform")


@pytest.fixture(scope="session")
def light_bin(tmp_path_factory) -> Path:
    """bin/ of a fresh venv holding `pip install <this repository>` with no extras."""
    root = tmp_path_factory.mktemp("light-client")
    src = root / "src"  # a copy: pip builds in the source tree, the shared checkout stays clean
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check", "-c", str(REPO / "constraints-cpu.txt"),
           str(src)]  # fmt: skip
    done = subprocess.run(pip, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin"


def light_env(home: Path) -> dict[str, str]:
    # nothing of the suite's environment: no PYTHONPATH, no Django settings, no token
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_CONFIG_HOME": str(home / "cfg"),
            "LANG": "C.UTF-8", "TERM": "dumb"}  # fmt: skip


def run_light(bin_dir: Path, home: Path, *argv, check: bool = True):
    done = subprocess.run(
        [str(bin_dir / "paddock"), *map(str, argv)], env=light_env(home), cwd=home,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, f"paddock {' '.join(map(str, argv))}: {done.stderr}"
    return done


def test_the_light_install_has_the_cli_and_neither_torch_nor_django(light_bin, tmp_path):
    python = str(light_bin / "python")
    for module in ("torch", "django", "ray", "transformers"):
        probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"{module} is importable in the light install"
    version = run_light(light_bin, tmp_path, "--version")
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert version.stdout.strip() == f"paddock {declared}"
    up = run_light(light_bin, tmp_path, "up", check=False)
    assert up.returncode == 2 and "pip install 'paddock[all]'" in up.stderr
    train = run_light(light_bin, tmp_path, "train", "x.yaml", check=False)
    assert train.returncode == 2 and "pip install 'paddock[workers]'" in train.stderr
    doctor = run_light(light_bin, tmp_path, "doctor", check=False)
    assert doctor.returncode == 2 and "pip install 'paddock[platform]'" in doctor.stderr
    # the spec verbs are light: pydantic and PyYAML
    spec = tmp_path / "s.yaml"
    spec.write_text("train:\n  steps: 0\n")
    invalid = run_light(light_bin, tmp_path, "spec", "validate", spec, check=False)
    assert invalid.returncode == 1 and "train.steps" in invalid.stderr
    verl = REPO / "tests" / "platform" / "client" / "fixtures" / "verl_grpo_lora.yaml"
    imported = run_light(light_bin, tmp_path, "spec", "import", "--from", "verl", verl)
    assert "lora:" in imported.stdout and "not mapped" in imported.stderr


@contextmanager
def paddock_up(home: Path, password: str):
    """`paddock up --no-demo` of the suite's environment (the `all` install), on embedded
    defaults under `home` (SQLite, a bundled Redis, its own Ray head), as a user runs it;
    Ctrl-C at the end, and no process of it left behind."""
    port = free_port()
    suite_only = ("DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "DJANGO_SETTINGS_MODULE")
    env = {k: v for k, v in os.environ.items() if k not in suite_only}
    env.update(PADDOCK_HOME=str(home), PADDOCK_ADMIN_PASSWORD=password)
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "paddock"), "up", "--no-demo", "--port", str(port)],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, text=True,
    )  # fmt: skip
    family: dict[int, psutil.Process] = {}
    url = f"http://127.0.0.1:{port}"

    def healthy():
        assert proc.poll() is None, f"paddock up exited early:\n{proc.stdout.read()}"
        for child in psutil.Process(proc.pid).children(recursive=True):
            family.setdefault(child.pid, child)
        try:
            parts = requests.get(f"{url}/healthz", timeout=5).json()["components"]
        except (requests.RequestException, ValueError, KeyError):
            return False
        return all(part["ok"] for part in parts.values())

    try:
        wait_for(healthy, 300, "paddock up to report every component healthy", 1.0)
        yield url
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        for child in family.values():
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                child.kill()


def token_from_the_browser_path(url: str, password: str) -> str:
    """What a new user does in the browser app, over its own endpoints: sign in as the
    admin, create a team, create an API token on the team's page."""
    browser = requests.Session()
    csrf = browser.get(f"{url}/api/v1/session/csrf", timeout=10).cookies["csrftoken"]
    headers = {"X-CSRFToken": csrf, "Origin": url, "Referer": f"{url}/"}

    def post(path, body):
        reply = browser.post(f"{url}{path}", json=body, headers=headers, timeout=30)
        assert reply.status_code in (200, 201), reply.text
        return reply.json()

    post("/api/v1/session/login", {"username": "admin", "password": password})
    headers["X-CSRFToken"] = browser.cookies["csrftoken"]  # rotated at login
    team = post("/api/v1/teams", {"name": "Laptop", "slug": "laptop"})
    return post(f"/api/v1/teams/{team['id']}/tokens", {"name": "laptop"})["token"]


def test_a_run_from_the_light_cli_on_paddock_up(light_bin, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from workers.models.tiny import tiny_model_dir
    from workers.spec import parse_spec

    home, password = tmp_path / "home", secrets.token_urlsafe(12)

    def paddock(*argv, check=True):
        return run_light(light_bin, tmp_path, *argv, check=check)

    def run_json(run_id):
        return json.loads(paddock("runs", "get", run_id, "-o", "json").stdout)

    def until(run_id, what, predicate, timeout=300):  # a loaded CI machine: the job's start
        def check():
            run = run_json(run_id)
            return run if predicate(run) else None

        return wait_for(check, timeout, f"run {run_id}: {what}", 1.0)

    with paddock_up(home, password) as url:
        secret = token_from_the_browser_path(url, password)
        login = paddock("login", "--url", url, "--token", secret)
        assert "laptop (owner)" in login.stdout
        spec = {**FAST_SPEC, "train": {**FAST_SPEC["train"], "steps": 400}}
        spec_file = tmp_path / "light.yaml"
        spec_file.write_text(yaml.safe_dump(spec))
        launched = paddock("experiments", "launch", spec_file, "--backends", "torch")
        assert "experiment" in launched.stdout
        (run,) = json.loads(paddock("runs", "list", "-o", "json").stdout)
        run_id = run["id"]
        try:
            until(run_id, "running past step 2",
                  lambda r: r["state"] == "running" and r["step"] >= 2)  # fmt: skip
            assert "paused" in paddock("runs", "pause", run_id).stdout
            paused = until(run_id, "paused", lambda r: r["state"] == "paused", 180)
            checkpoints = json.loads(paddock("checkpoints", "list", run_id, "-o", "json").stdout)
            assert [c["step"] for c in checkpoints] == [paused["step"]]
            paddock("runs", "resume", run_id)
            until(run_id, "training again", lambda r: r["state"] == "running"
                  and r["step"] > paused["step"], 180)  # fmt: skip
            logs = paddock("runs", "logs", run_id).stdout
            assert "pausing → paused" in logs and "resuming → running" in logs
        finally:
            paddock("runs", "abort", run_id, check=False)
        until(run_id, "aborted", lambda r: r["state"] == "aborted", 180)

        # the export holds every point the platform stored, at full resolution
        exported = tmp_path / "run.csv"
        paddock("runs", "export", run_id, "--format", "csv", "-o", exported)
        with open(exported, newline="") as fh:
            rows = {(r["key"], int(r["step"]), float(r["value"])) for r in csv.DictReader(fh)}
        with sqlite3.connect(home / "paddock.sqlite3") as db:
            stored = set(db.execute(
                "SELECT key, step, value FROM experiments_metricpoint WHERE run_id = ?", (run_id,)
            ))  # fmt: skip
        assert rows == stored and any(key == "reward/mean" for key, _, _ in rows)

        # the pause checkpoint's adapter, downloaded by the light CLI, loads in peft as it is
        adapter = tmp_path / "adapter"
        paddock("checkpoints", "download", run_id, checkpoints[0]["id"], "-o", adapter)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(adapter))
    assert not (adapter / "optimizer.pt").exists()
    on_store = load_file(str(Path(checkpoints[0]["uri"].removeprefix("file://")) / "adapter" /
                             "adapter_model.safetensors"))  # fmt: skip
    downloaded = load_file(str(adapter / "adapter_model.safetensors"))
    assert downloaded.keys() == on_store.keys()
    assert all(torch.equal(downloaded[k], on_store[k]) for k in on_store)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir(parse_spec(spec).model.tiny))
    model = PeftModel.from_pretrained(base, str(adapter))
    loaded = [n for n, _ in model.named_parameters() if "lora_" in n]
    assert len(loaded) == len(on_store) > 0
