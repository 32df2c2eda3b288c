"""The Ray executor, chosen by `resources.executor: ray` (`train()` then calls `run_on_ray`
instead of `run_training`; both run the same Driver).

- fleet.py: one placement group (`trainer_actors` bundles of `trainer_cpus` and
  trainer_gpus / trainer_actors GPUs, then `rollout_replicas` bundles of `rollout_cpus` and
  `rollout_gpus`), the actors in it, `ActorDied` naming the actor that is gone.
- actors.py: TrainerActor (one rank: LoraPolicy, or ShardedLoraPolicy under FSDP2 with
  several ranks) and RolloutActor (one engine from `make_backend`).
- proxies.py: RayTrainerExecutor and RayRolloutBackend, what the driver holds; the adapter
  goes through the object store once per version and every rollout actor acknowledges it.
- process_group.py: the trainer ranks' torch.distributed group (NCCL on GPU, gloo on CPU).
- run.py: `run_on_ray` (join the job's cluster, start the fleet, run, restart from the last
  checkpoint up to `resources.max_restarts` when an actor dies).
- torchrun_train.py: a whole run without Ray on one multi-GPU host: the trainer ranks under
  `torch.distributed.run`, rank 0 driving, engine replicas in child processes.
Every trainer rank runs the loop's own executor (`LocalExecutor`): the policy's strategy
says which rank writes a checkpoint's files (workers/loop/checkpoint.py).

Ray is imported by run.py, fleet.py, actors.py and proxies.py only, which `train()` imports
only for `resources.executor: ray`, so the trainer ranks run under torchrun where Ray is not
installed (torchrun_train.py; bench/gpu/standalone.py, the FSDP2 trainer alone on a
synthetic batch, measures throughput and equivalence across world sizes).
"""
