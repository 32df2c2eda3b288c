"""What verl's and NeMo-RL's translations share beyond key-for-key rules: the GPU counts
turned into Paddock's resources, the loggers into its metric mirrors, and epochs into steps
where the dataset's size is known."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engine import Builder, as_int


@dataclass(frozen=True)
class Gpus:
    """A source's GPUs: in all, and those its engines have to themselves (0: the engines
    share the training GPUs, as verl's hybrid engine and NeMo-RL's colocated mode do)."""

    total: int
    generation: int = 0


def map_resources(b: Builder, gpus: Gpus, srcs: tuple[str, ...]) -> None:
    """Paddock's `resources` for the same number of GPUs.

    One GPU is shared by the trainer and the engine in one process, as in the source. More
    GPUs run on Ray: Paddock gives each engine replica GPUs of its own (it does not time-
    share a GPU between an FSDP rank and an engine), so a source that colocates them on all
    N GPUs becomes N/2 trainer ranks and N/2 engine replicas (the same GPU count, and the
    engines keep decoding while the trainer trains); a source with dedicated generation
    GPUs keeps its split. Tensor parallelism of the engines is listed separately."""
    total, gen = gpus.total, gpus.generation
    if total <= 0:
        return
    if total == 1:
        b.set("resources.trainer_gpus", 1, srcs[0])
        b.set("resources.rollout_gpus", 1, srcs[0])
        b.consume(*srcs)
        return
    if not 0 < gen < total:
        gen = total // 2
    train = total - gen
    for key, value in (
        ("resources.executor", "ray"),
        ("resources.trainer_gpus", train),
        ("resources.trainer_actors", train),
        ("resources.rollout_replicas", gen),
        ("resources.rollout_gpus", 1),
    ):
        b.set(key, value, srcs[0])
    b.consume(*srcs)


def map_wandb(b: Builder, project: Any, run_name: Any, srcs: tuple[str, ...]) -> None:
    """Both frameworks log to W&B online (with the key from the environment): so does the
    mirror (`online` needs WANDB_API_KEY in the job's environment, never in the spec)."""
    mirror: dict[str, Any] = {"project": str(project or "paddock"), "mode": "online"}
    if run_name:
        mirror["run_name"] = str(run_name)
    b.set("logging.wandb", mirror, srcs[0])
    b.consume(*srcs)


def map_tensorboard(b: Builder, srcs: tuple[str, ...]) -> None:
    # event files under the run's output directory (tensorboard/), where both write theirs
    b.set("logging.tensorboard", {}, srcs[0])
    b.consume(*srcs)


def epochs_to_steps(
    b: Builder,
    *,
    epochs_key: str,
    batch: int | None,
    rows: int | None,
    max_steps: int | None = None,
) -> None:
    """`train.steps` from the source's epochs: both frameworks drop the last partial batch
    (`drop_last=True`), so an epoch is ⌊rows / prompts per step⌋ steps; `max_steps`, when
    the source also bounds the steps, caps it as there. Without the dataset's size the
    epochs stay listed, with a note saying what would turn them into steps."""
    raw = b.value(epochs_key)
    if raw is None:
        return
    epochs = as_int(epochs_key, raw)
    if rows is None or not batch:
        b.note(
            epochs_key,
            "the dataset's size is unknown here: give it (`paddock spec import --dataset-rows "
            "N`, or pick an uploaded dataset in the launcher) to turn epochs into train.steps",
        )
        return
    per_epoch = rows // batch
    if per_epoch == 0:
        b.note(epochs_key, f"the dataset's {rows} rows do not fill one batch of {batch} prompts")
        return
    steps = per_epoch * epochs
    if max_steps is not None:
        steps = min(steps, max_steps)
    b.set("train.steps", steps, epochs_key)
    b.consume(epochs_key)
