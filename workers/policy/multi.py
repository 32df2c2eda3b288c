"""One trainer process, one base model in memory, many runs' LoRA adapters.

Each run is a named PEFT adapter on the shared model with its own optimizer (and its
state), torch RNG stream, step counter and adapter version. A step for run A activates A's
adapter (PEFT's `set_adapter`: only A's LoRA layers take part in the forward, only A's
parameters require grad), then runs the single-run GRPO step of `LoraPolicy` with A's spec,
parameters and optimizer bound to it: the same code as a run alone, so A's update is the one
a solo `LoraPolicy` computes for the same batch, seed and starting state. Nothing of another
run moves: its parameters get no gradient and its optimizer is not stepped.

What must match between runs (checked at admission): what the base model and the host
policy fix (model path, dtype, activation checkpointing, compile). What may differ: LoRA
rank, alpha, dropout and target modules, the algorithm, learning rate and other train
settings, the rollout temperature and lengths the loss normalises by.

Adapters are exported (`adapter_update`, `save`) in the format of a run alone: PEFT file
keys without the adapter's name, so a pooled run's checkpoint resumes a solo run and the
engines load its directories as they are (rollout/adapter_files.py).
"""

from __future__ import annotations

import contextlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft.utils import get_peft_model_state_dict

from ..pool.key import trainer_key
from ..rollout.adapter_files import peft_config
from ..rollout.base import AdapterUpdate
from ..spec import RunSpec
from . import lora as lora_io
from .batch import TrainBatch
from .policy import LoraPolicy

STATE_FILE = "run_state.json"


@dataclass
class RunAdapter:
    """One run's training state beside the shared base model."""

    run_id: str
    adapter: str  # the PEFT adapter's name in the shared model
    spec: RunSpec
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    rng: torch.Tensor  # this run's torch CPU generator state
    cuda_rng: torch.Tensor | None = None
    adapter_version: int = 0
    step: int = 0
    index: dict[str, torch.Tensor] = field(default_factory=dict)  # PEFT file key → parameter


class MultiLoraTrainer:
    """Runs' adapters on one `LoraPolicy`'s model. The host policy's own adapter
    (`default`, from `base_spec`) is a placeholder that no run trains."""

    def __init__(
        self, base_spec: RunSpec, model_dir: str | Path, device: torch.device | None = None
    ):
        self.base_spec = base_spec
        self.model_dir = str(model_dir)
        self.policy = LoraPolicy(base_spec, model_dir, device)
        self.device = self.policy.device
        self.model = self.policy.model
        self.runs: dict[str, RunAdapter] = {}
        self._names = 0
        # the host's own binding, restored after each run's step
        self._host = (
            self.policy.spec,
            self.policy.params,
            self.policy.optimizer,
            self.policy.adapter_version,
        )
        for p in self.policy.params:  # the placeholder never trains
            p.requires_grad_(False)

    # ---------------------------------------------------------------- admission

    def add_run(self, run_id: str, spec: RunSpec) -> RunAdapter:
        """A fresh adapter for the run, initialised as a run alone initialises its own (the
        run's seed draws the A matrices; B starts at zero)."""
        if run_id in self.runs:
            raise ValueError(f"trainer pool: run {run_id!r} is already in the pool")
        mine, host = trainer_key(spec), trainer_key(self.base_spec)  # the pool key's part
        differ = [k for k in host if mine[k] != host[k]]
        if differ:
            raise ValueError(
                f"trainer pool: run {run_id!r} differs from the pool in {', '.join(differ)}: "
                "runs of one trainer share the base model and its setup"
            )
        name = f"pool{self._names}"  # PEFT module keys: no dots, nothing like "lora_"
        self._names += 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            self.model.add_adapter(name, lora_io.lora_config(spec.lora))
        index = get_peft_model_state_dict(self.model, adapter_name=name)
        params = [p for n, p in self.model.named_parameters() if f".{name}." in n]
        for p in params:
            p.requires_grad_(False)  # trainable only while its run's step runs
        t = spec.train
        optimizer = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay, betas=t.betas)
        gen = torch.Generator().manual_seed(spec.seed)
        cuda_rng = None
        if self.device.type == "cuda":
            with torch.random.fork_rng(devices=[self.device]):
                torch.cuda.manual_seed(spec.seed)
                cuda_rng = torch.cuda.get_rng_state(self.device)
        run = RunAdapter(run_id, name, spec, params, optimizer, gen.get_state(), cuda_rng)
        run.index = index
        self.runs[run_id] = run
        return run

    def remove_run(self, run_id: str) -> None:
        """Drop the run's adapter and optimizer (checkpoint it first)."""
        run = self._run(run_id)
        self.model.delete_adapter(run.adapter)
        del self.runs[run_id]

    # ---------------------------------------------------------------- the step

    def train_step(self, run_id: str, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step of `run_id`'s adapter on `batch` (its own samples)."""
        run = self._run(run_id)
        with self._bound(run), self._own_rng(run):
            metrics = self.policy.train_step(batch)
            run.adapter_version = self.policy.adapter_version
        run.step += 1
        return metrics

    @contextlib.contextmanager
    def _bound(self, run: RunAdapter):
        """The host policy steps `run`'s adapter: its spec, parameters, optimizer, version."""
        p = self.policy
        self.model.set_adapter(run.adapter)  # makes its parameters trainable
        p.spec, p.params, p.optimizer, p.adapter_version = (
            run.spec,
            run.params,
            run.optimizer,
            run.adapter_version,
        )
        try:
            yield
        finally:
            for param in run.params:
                param.requires_grad_(False)
                param.grad = None
            p.spec, p.params, p.optimizer, p.adapter_version = self._host

    @contextlib.contextmanager
    def _own_rng(self, run: RunAdapter):
        """The run's own random stream (LoRA dropout), whatever ran in between."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(run.rng)
            if run.cuda_rng is not None:
                torch.cuda.set_rng_state(run.cuda_rng, self.device)
            yield
            run.rng = torch.get_rng_state()
            if run.cuda_rng is not None:
                run.cuda_rng = torch.cuda.get_rng_state(self.device)

    # ---------------------------------------------------------------- adapters out and in

    def adapter_tensors(self, run_id: str) -> dict[str, torch.Tensor]:
        """The run's adapter as CPU tensors under PEFT's file keys (a copy)."""
        return lora_io.move_tensors(self._run(run_id).index, torch.device("cpu"))

    @contextlib.contextmanager
    def active(self, run_id: str):
        """The shared model computing with `run_id`'s adapter (an eval forward, the
        handshake's probe); no parameter of the run is trainable meanwhile."""
        run = self._run(run_id)
        self.model.set_adapter(run.adapter)
        for param in run.params:
            param.requires_grad_(False)
        yield self.model

    def adapter_update(self, run_id: str, with_probe: bool = True) -> AdapterUpdate:
        """The run's adapter as an engine loads it, labelled with its version, with the
        version handshake's probe computed under this run's adapter."""
        from ..loop.executor import adapter_probe  # the loop imports the policy

        run = self._run(run_id)
        probe = None
        if with_probe:
            with self.active(run_id) as model:
                probe = adapter_probe(model, len(self.policy.tokenizer))
        return AdapterUpdate(run.adapter_version, tensors=self.adapter_tensors(run_id), probe=probe)

    def load_adapter_tensors(self, run_id: str, tensors: dict[str, torch.Tensor], version: int):
        run = self._run(run_id)
        lora_io.copy_into(run.index, tensors, f"run {run_id!r}: ")
        run.adapter_version = version

    # ---------------------------------------------------------------- checkpoints

    def save(self, run_id: str, out: str | Path) -> Path:
        """The run's checkpoint in a run alone's layout (adapter/, optimizer.pt, rng.pt) plus
        its step counter: a pooled run resumes alone from it, and the reverse."""
        run = self._run(run_id)
        out = Path(out)
        adapter = out / "adapter"
        adapter.mkdir(parents=True, exist_ok=True)
        lora_io.write_adapter_file(
            self.adapter_tensors(run_id), adapter / "adapter_model.safetensors"
        )
        config = peft_config(run.spec.lora, self.model_dir)
        config["lora_dropout"] = run.spec.lora.dropout
        (adapter / "adapter_config.json").write_text(json.dumps(config))
        (adapter / lora_io.VERSION_FILE).write_text(
            json.dumps({"adapter_version": run.adapter_version})
        )
        torch.save(run.optimizer.state_dict(), out / "optimizer.pt")
        rng = {"torch": run.rng, "python": random.getstate()}
        if run.cuda_rng is not None:
            rng["cuda"] = [run.cuda_rng]
        torch.save(rng, out / "rng.pt")
        (out / STATE_FILE).write_text(json.dumps({"step": run.step, "run_id": run_id}))
        return out

    def load(self, run_id: str, src: str | Path) -> None:
        """Restore the run's adapter, optimizer state, RNG and step from `save`'s layout."""
        run = self._run(run_id)
        src = Path(src)
        tensors, version = lora_io.read_adapter_dir(src / "adapter")
        self.load_adapter_tensors(run_id, tensors, version)
        run.optimizer.load_state_dict(torch.load(src / "optimizer.pt", weights_only=True))
        # tensors, ints and tuples only (save() writes no numpy state): no pickle needed
        rng = torch.load(src / "rng.pt", weights_only=True)
        run.rng = rng["torch"]
        if run.cuda_rng is not None and rng.get("cuda"):
            run.cuda_rng = rng["cuda"][0]
        state = src / STATE_FILE
        run.step = json.loads(state.read_text())["step"] if state.is_file() else version

    def _run(self, run_id: str) -> RunAdapter:
        run = self.runs.get(run_id)
        if run is None:
            known = ", ".join(sorted(self.runs)) or "none"
            raise KeyError(f"trainer pool: no run {run_id!r} (runs: {known})")
        return run
