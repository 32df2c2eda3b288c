"""Adapter publication: the engine on the trainer's GPU, on a second GPU, in a child process.

    python3 bench/gpu/sync.py --reps 5

The trainer's LocalExecutor.adapter_update (with the handshake probe only if the engine
checks it), then the engine's load and acknowledgement, median of --reps, with the engine
on the trainer's GPU, on cuda:1, and on cuda:1 in a child process
(resources.engine_process). With one GPU the last two share the trainer's. Writes
sync.json under --out.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from common import base_spec, parser, run, time_adapter_sync


def part_sync(model_dir: Path, args, out: Path) -> dict:
    """Adapter publication with the engine on the trainer's GPU, on a second GPU, and on a
    second GPU in a child process (resources.engine_process)."""
    from workers.adapters.update import AdapterUpdate
    from workers.loop.executor import LocalExecutor
    from workers.policy import LoraPolicy
    from workers.rollout.engine_process import EngineProcess
    from workers.rollout.torch_engine import TorchBackend
    from workers.spec import parse_spec

    spec = parse_spec(base_spec(model_dir))
    gpus = torch.cuda.device_count()
    trainer_dev = torch.device("cuda:0" if gpus else "cpu")
    other = torch.device("cuda:1" if gpus > 1 else trainer_dev)
    executor = LocalExecutor(LoraPolicy(spec, model_dir, trainer_dev))
    res = {}
    engines = [
        ("engine on the trainer's GPU", lambda: TorchBackend(spec, model_dir, trainer_dev)),
        (f"engine on {other}", lambda: TorchBackend(spec, model_dir, other)),
        (f"engine process on {other}", lambda: EngineProcess(spec, model_dir, other)),
    ]
    for name, make in engines:
        backend = make()
        first = asyncio.run(executor.adapter_update(with_probe=False))
        asyncio.run(backend.load_adapter(AdapterUpdate(1, tensors=first.tensors)))
        res[name] = time_adapter_sync(executor, backend, args.reps)
        asyncio.run(backend.close())
        del backend
        r = res[name]
        print(
            f"{name:<36} publish {r['publish_s'] * 1e3:6.1f} ms  load+ack "
            f"{r['load_s'] * 1e3:6.1f} ms  total {(r['publish_s'] + r['load_s']) * 1e3:6.1f} ms",
            flush=True,
        )
    return res


def main() -> None:
    run(part_sync, parser(__doc__, "reps").parse_args())


if __name__ == "__main__":
    main()
