"""One run's adapter on a policy's model: what its train step reads and advances.

A solo run's policy holds one adapter; a pool's policy one per member, all on one base
model. Everything a run's step needs beside the shared model is here, passed to the step as
an argument (`LoraPolicy.train_step(adapter, batch)`): its spec (LoRA, algorithm, train and
rollout settings), its parameters and optimizer, its random stream and its version.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ..spec import RunSpec
from .optimizer_graph import OptimizerGraph
from .version_check import AdapterHistory


@dataclass
class RngStream:
    """An adapter's own random stream (its LoRA dropout draws from it, whatever else ran in
    between): a CPU generator state and, on a GPU, that device's."""

    cpu: torch.Tensor
    cuda: torch.Tensor | None
    device: torch.device

    @classmethod
    def seeded(cls, seed: int, device: torch.device) -> RngStream:
        """The stream a process's global one is after `torch.manual_seed(seed)`."""
        cuda = None
        if device.type == "cuda":
            with torch.random.fork_rng(devices=[device]):
                torch.cuda.manual_seed(seed)
                cuda = torch.cuda.get_rng_state(device)
        return cls(torch.Generator().manual_seed(seed).get_state(), cuda, device)

    @contextlib.contextmanager
    def installed(self):
        """The process's global streams are this one for the duration (PEFT's dropout draws
        from them), then this one holds what was drawn; the global ones are put back."""
        on_gpu = self.cuda is not None
        with torch.random.fork_rng(devices=[self.device] if on_gpu else []):
            torch.set_rng_state(self.cpu)
            if on_gpu:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield
            self.cpu = torch.get_rng_state()
            if on_gpu:
                self.cuda = torch.cuda.get_rng_state(self.device)

    def generator(self) -> torch.Generator:
        """A generator at this stream's state on its device (row blocks draw from it);
        `advance` takes its state back once the step is done."""
        if self.cuda is not None:
            return torch.Generator(device=self.device).set_state(self.cuda)
        return torch.Generator().set_state(self.cpu)

    def advance(self, gen: torch.Generator) -> None:
        if self.cuda is not None:
            self.cuda = gen.get_state()
        else:
            self.cpu = gen.get_state()


@dataclass(eq=False)
class Adapter:
    name: str  # the PEFT adapter's name on the policy's model
    spec: RunSpec
    params: list[torch.nn.Parameter]
    index: dict[str, torch.Tensor]  # PEFT file key (no adapter name) → its parameter
    optimizer: torch.optim.Optimizer
    graph: OptimizerGraph | None  # clip + AdamW as one CUDA graph (optimizer_graph.py)
    rng: RngStream
    # the versions it published lately (the stale-token check's: version_check.py)
    history: AdapterHistory
    # +1 with every optimizer step: names the adapter an engine must acknowledge
    version: int = 0

    def zero_grads(self) -> None:
        """Before a step. The optimizer's graph keeps the gradients (views of one buffer)
        and zeroes them in place."""
        if self.graph is not None:
            self.graph.zero_grads()
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def optimizer_step(self) -> torch.Tensor:
        """Clip the gradients and step: the gradient norm before clipping."""
        if self.graph is not None:
            return self.graph.step()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.spec.train.grad_clip)
        self.optimizer.step()
        return norm
