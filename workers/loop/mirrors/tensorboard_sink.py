"""TensorBoard: scalars in event files of a directory (torch's SummaryWriter, which needs the
`tensorboard` package), one scalar per metric key, at the step and wall time it was reported."""

from __future__ import annotations

from pathlib import Path


class TensorboardSink:
    name = "tensorboard"

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self._writer = None

    def open(self) -> None:
        from torch.utils.tensorboard import SummaryWriter  # imports tensorboard

        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(str(self.log_dir), flush_secs=10)

    def log(self, step: int, wall_time: float, values: dict[str, float]) -> None:
        for key, value in values.items():
            self._writer.add_scalar(key, value, global_step=step, walltime=wall_time)

    def close(self) -> None:
        self._writer.close()
