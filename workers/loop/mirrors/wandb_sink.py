"""Weights & Biases: one W&B run per Paddock run output, offline (a run directory under the
output, `wandb/offline-run-…`, for `wandb sync`) or online (WANDB_API_KEY in the job's
environment). Each metric row is logged at its step; the spec is the run's config. W&B's
own console capture, system statistics and code saving are off: the job's log is
Paddock's."""

from __future__ import annotations

from pathlib import Path

from ...spec import WandbLogSpec


class WandbSink:
    name = "wandb"

    def __init__(self, spec: WandbLogSpec, run_name: str, out_dir: Path, config: dict):
        self.spec, self.run_name, self.out_dir, self.config = spec, run_name, out_dir, config
        self._run = None

    def open(self) -> None:
        import wandb

        settings = wandb.Settings(
            console="off", disable_git=True, save_code=False, x_disable_stats=True, silent=True
        )
        self._run = wandb.init(
            project=self.spec.project,
            entity=self.spec.entity,
            mode=self.spec.mode,
            name=self.run_name,
            dir=str(self.out_dir),
            config=self.config,
            settings=settings,
            reinit="create_new",  # a second run in one process (tests, pools) is its own
        )

    def log(self, step: int, wall_time: float, values: dict[str, float]) -> None:
        # W&B's step only moves forward: a row at the current step joins that step's row
        self._run.log(values, step=step)

    def close(self) -> None:
        self._run.finish()
