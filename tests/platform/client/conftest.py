"""Fixtures of the client's tests: a signed-in CLI against a live server, and a real
checkpoint directory (a PEFT adapter of the tiny model, with the optimizer and trainer
state beside it, as workers/loop/checkpoint.py writes one) in the artifact store."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from paddock.experiments.models import Checkpoint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from paddock_client.cli import main
from workers.loop.checkpoint import checkpoint_bytes


@dataclass
class Cli:
    url: str
    token: str
    capsys: object

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        """Run `paddock ARGV` in this process: (exit code, stdout, stderr)."""
        self.capsys.readouterr()
        code = main([str(a) for a in argv])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *argv: str):
        code, out, err = self(*argv, "-o", "json")
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def cli(world, live_server, monkeypatch, tmp_path, capsys) -> Cli:
    """`paddock` signed in (PADDOCK_URL/PADDOCK_TOKEN) as team A's admin."""
    _, secret = api_token_create(
        actor=world.actor(world.users_a[Role.ADMIN]), team=world.team_a, name="cli"
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PADDOCK_URL", live_server.url)
    monkeypatch.setenv("PADDOCK_TOKEN", secret)
    return Cli(live_server.url, secret, capsys)


@pytest.fixture
def store(settings, tmp_path) -> Path:
    root = tmp_path / "artifacts"
    root.mkdir()
    settings.PADDOCK_ARTIFACTS_URI = root.as_uri()
    return root


def tiny_base():
    from transformers import AutoModelForCausalLM

    from workers.models.tiny import tiny_model_dir

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir())


def adapter_checkpoint(directory: Path) -> dict[str, torch.Tensor]:
    """Write a checkpoint directory whose adapter/ is a real PEFT adapter of the tiny model
    (non-zero B, so it changes the model); the adapter's tensors as saved."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from workers.adapters.lora import save_adapter_dir

    torch.manual_seed(0)
    model = get_peft_model(tiny_base(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    save_adapter_dir(model, directory / "adapter", version=3)
    torch.save({"state": {}, "param_groups": []}, directory / "optimizer.pt")
    (directory / "trainer_state.json").write_text(json.dumps({"step": 4, "adapter_version": 3}))
    return load_file(str(directory / "adapter" / "adapter_model.safetensors"))


@pytest.fixture
def checkpointed(store, launched):
    """Team A's torch run with a real checkpoint at step 4 (and an older one at step 2)."""
    run_id = launched[0]["runs"][0]["id"]
    directory = store / "runs" / str(run_id) / "checkpoints" / "step-4"
    directory.mkdir(parents=True)
    tensors = adapter_checkpoint(directory)
    Checkpoint.objects.create(run_id=run_id, step=2, adapter_version=1, uri=directory.as_uri())
    latest = Checkpoint.objects.create(  # with the size a job reports (workers/loop/driver.py)
        run_id=run_id, step=4, adapter_version=3, uri=directory.as_uri(),
        size_bytes=checkpoint_bytes(directory),
    )  # fmt: skip
    return run_id, latest, tensors
