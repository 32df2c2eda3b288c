"""One GPU, two workloads: how an async run's in-process trainer and torch engine share it.

Both sides run in threads of one process (the trainer's step in `asyncio.to_thread`, the
engine's decode in its own) and issue their kernels on CUDA streams of their own, so the GPU
can run them side by side. What decides how well is the block scheduler: a kernel's thread
blocks go to SMs as SMs free up, and blocks of the kernel that came first go first, so a
decode step (a chain of small memory-bound kernels) can wait behind a train matmul that
fills every SM, and the other way round. `resources.gpu_share` says how the two share:

- `streams`: each side its own stream, at the same priority (the hardware's own order);
- `engine_first` / `trainer_first`: that side's stream at the highest priority the device
  has, the other's at the lowest: the scheduler hands freed SMs to its waiting blocks first
  (no preemption of running blocks);
- `split`: the SMs split in two with CUDA green contexts (through NVIDIA's `cuda-bindings`
  package): the engine's stream runs on `resources.engine_sm_share` of them, the
  trainer's on the rest. Neither waits for the other's blocks; they still share memory
  bandwidth and L2, and a side that has nothing to do leaves its SMs idle.

`split` is the default: at G ≈ T on one H200 (docs/performance.md, "Async on one GPU")
it gave 1.23-1.44x sync per step (1.30x re-measured on a fresh machine) where `streams`
gave 1.03-1.17x at first and 0.88x, a loss, when re-measured; 48 of the 132 SMs for the
engine (`engine_sm_share` 0.36) was best of 32-64.

Only async runs share (a sync run runs one side at a time, on the whole GPU), and only
where trainer and engine are on the same GPU in one process. `plan_share` is the pure part
(which stream gets which priority and how many SMs), `open_share` makes the streams; the
loop's `StreamExecutor` (loop/executor.py) issues the train steps on the trainer's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .policy.policy import LoraPolicy
from .rollout.torch_engine.engine import TorchEngine

SHARE_MODES = ("streams", "engine_first", "trainer_first", "split")
# Hopper splits SMs in groups of 8 (a green context's smallest share; CUDA rounds up to it)
SM_GRANULE = 8


@dataclass(frozen=True)
class SharePlan:
    """Streams for one GPU's two sides. Priorities are CUDA's (lower is served first);
    SM counts are None without a split (the whole GPU)."""

    mode: str
    engine_priority: int
    trainer_priority: int
    engine_sms: int | None = None
    trainer_sms: int | None = None


def plan_share(
    mode: str, engine_share: float, sm_count: int, priority_range: tuple[int, int] = (0, -1)
) -> SharePlan:
    """The plan for `mode` on a GPU of `sm_count` SMs whose stream priorities run from
    `priority_range` = (least, greatest) (CUDA's order: greatest is the smaller number).
    A split gives the engine `engine_share` of the SMs, rounded to the granule, and each
    side at least one granule."""
    if mode not in SHARE_MODES:
        raise ValueError(f"unknown gpu_share {mode!r}; known: {', '.join(SHARE_MODES)}")
    least, greatest = priority_range
    if mode == "engine_first":
        return SharePlan(mode, engine_priority=greatest, trainer_priority=least)
    if mode == "trainer_first":
        return SharePlan(mode, engine_priority=least, trainer_priority=greatest)
    if mode == "streams":
        return SharePlan(mode, engine_priority=least, trainer_priority=least)
    if sm_count < 2 * SM_GRANULE:
        raise ValueError(f"gpu_share split: {sm_count} SMs cannot be split in two")
    granules = round(engine_share * sm_count / SM_GRANULE)
    engine = min(max(granules, 1), sm_count // SM_GRANULE - 1) * SM_GRANULE
    return SharePlan(mode, least, least, engine_sms=engine, trainer_sms=sm_count - engine)


class GreenContexts:
    """A split's driver objects: its green contexts and the stream made on each, which
    the driver keeps until they are destroyed (each run would leak a pair otherwise).
    `close` waits for the streams' work, then destroys streams and contexts; it runs once,
    whatever the number of calls. `alive` counts the contexts alive in this process."""

    alive = 0

    def __init__(self, driver, contexts: list, streams: list):
        self._driver, self._contexts, self._streams = driver, contexts, streams
        GreenContexts.alive += len(contexts)

    def close(self) -> None:
        contexts, streams = self._contexts, self._streams
        self._contexts, self._streams = [], []
        d, results = self._driver, []
        for raw in streams:  # each stream's work done, then the stream, then the contexts
            results += [d.cuStreamSynchronize(raw), d.cuStreamDestroy(raw)]
        for green in contexts:  # every one destroyed, whatever failed before
            GreenContexts.alive -= 1
            results.append(d.cuGreenCtxDestroy(green))
        for result in results:  # the first failure, once everything was tried
            _check(d, result)


def _check(driver, result):
    """A cuda-bindings call's result: its outputs, or a RuntimeError for an error code."""
    err, *out = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"resources.gpu_share: split: CUDA driver error {err}")
    return out[0] if len(out) == 1 else out


@dataclass
class GpuShare:
    """The two streams of a plan (and, for a split, the green contexts they belong to,
    which must outlive them until `close`); `note` says what was made, for the run's log,
    and `level` is "warning" where a split could not be made."""

    plan: SharePlan
    trainer: torch.cuda.Stream
    engine: torch.cuda.Stream
    note: str = ""
    level: str = "debug"
    green: GreenContexts | None = None

    def close(self) -> None:
        """At the run's end, after the last kernel of either side: free the split's green
        contexts. Idempotent; nothing to do without a split."""
        if self.green is not None:
            self.green.close()


def open_share(plan: SharePlan, device: torch.device) -> GpuShare:
    """Make the plan's streams on `device` (a CUDA device). A split that this machine cannot
    make (no cuda-bindings, a driver without green contexts) falls back to `streams`, with
    a warning in `note`: the run goes on, slower."""
    if plan.engine_sms is not None:
        try:
            share = _green_share(plan, device)
        except (ImportError, AttributeError, RuntimeError) as exc:
            streams = plan_share("streams", 0.0, 0)
            share = _streams(streams, device)
            share.note = f"resources.gpu_share: split unavailable, using streams ({exc})"
            share.level = "warning"
            return share
        p = share.plan
        share.note = f"gpu_share split: engine on {p.engine_sms} SMs, trainer on {p.trainer_sms}"
        return share
    share = _streams(plan, device)
    share.note = f"gpu_share {plan.mode}: priorities engine {plan.engine_priority}, trainer "
    share.note += f"{plan.trainer_priority}"
    return share


def _streams(plan: SharePlan, device: torch.device) -> GpuShare:
    return GpuShare(
        plan,
        trainer=torch.cuda.Stream(device, priority=plan.trainer_priority),
        engine=torch.cuda.Stream(device, priority=plan.engine_priority),
    )


def _green_share(plan: SharePlan, device: torch.device) -> GpuShare:
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise RuntimeError(
            "resources.gpu_share: split needs NVIDIA's cuda-bindings package "
            f"(pip install cuda-bindings): {exc}"
        ) from exc

    torch.zeros(1, device=device)  # the primary context exists before the driver calls
    index = device.index if device.index is not None else torch.cuda.current_device()
    green, sms = make_green_contexts(driver, index, plan)
    try:
        streams = [torch.cuda.ExternalStream(int(raw), device=device) for raw in green._streams]
    except BaseException:
        green.close()
        raise
    actual = SharePlan(plan.mode, plan.engine_priority, plan.trainer_priority, *sms)
    return GpuShare(actual, trainer=streams[1], engine=streams[0], green=green)


def make_green_contexts(driver, index: int, plan: SharePlan) -> tuple[GreenContexts, tuple]:
    """The split's two green contexts on device `index` through `driver` (cuda-bindings'
    driver module), each with one stream: (contexts, (engine SMs, trainer SMs)). The
    engine's comes first. Whatever was made before a failing call is destroyed."""
    dev = _check(driver, driver.cuDeviceGet(index))
    sm_type = driver.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
    whole = _check(driver, driver.cuDeviceGetDevResource(dev, sm_type))
    # one split call: its group and its remainder are disjoint sets of SMs
    split = driver.cuDevSmResourceSplitByCount(1, whole, 0, plan.engine_sms)
    groups, _, rest = _check(driver, split)
    made = GreenContexts(driver, [], [])
    try:
        for part, priority in ((groups[0], plan.engine_priority), (rest, plan.trainer_priority)):
            desc = _check(driver, driver.cuDevResourceGenerateDesc([part], 1))
            flags = driver.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM
            green = _check(driver, driver.cuGreenCtxCreate(desc, dev, flags))
            made._contexts.append(green)
            GreenContexts.alive += 1
            non_blocking = driver.CUstream_flags.CU_STREAM_NON_BLOCKING
            raw = _check(driver, driver.cuGreenCtxStreamCreate(green, non_blocking, priority))
            made._streams.append(raw)
    except BaseException:
        made.close()
        raise
    return made, (groups[0].sm.smCount, rest.sm.smCount)


def share_for(spec, trainer: torch.device, engine: torch.device) -> SharePlan | None:
    """The plan an in-process run uses, or None where nothing is shared: a sync run, the
    engine in a child process or on another device, or no GPU."""
    r = spec.resources
    if not spec.async_.enabled or r.engine_process or trainer != engine:
        return None
    if trainer.type != "cuda":
        return None
    if spec.rollout.backend != "torch":  # another engine keeps its own streams
        return None
    sms = torch.cuda.get_device_properties(trainer).multi_processor_count
    # (least, greatest): torch.cuda.Stream clamps a priority to its pools, -1 the high one
    return plan_share(r.gpu_share, r.engine_sm_share, sms, (0, -1))


def warm_before_overlap(spec, policy: LoraPolicy, backend, share: GpuShare | None) -> bool:
    """Compile every graph of the trainer (`train.compile`) and of the torch engine
    (`rollout.compile`) now, one side after the other, before the async driver runs them in
    two threads: torch.compile is not thread-safe (while one thread traces, FX's tracing
    state is process-wide, and the other thread's compiled call fails). Each side warms up
    on its own stream of `share`. True where anything was compiled."""
    if not spec.async_.enabled:
        return False  # one side at a time: each compiles on its first call
    with _on(share.trainer if share is not None else None):
        warmed = policy.warm_compiled()
    if isinstance(backend, TorchEngine):  # other engines compile in a process of their own
        with _on(share.engine if share is not None else None):
            warmed = backend.warm_compiled(spec.rollout.temperature) or warmed
    if warmed and share is not None:  # a green context's stream: wait on it by name
        share.trainer.synchronize()
        share.engine.synchronize()
    return warmed


def _on(stream: torch.cuda.Stream | None):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
