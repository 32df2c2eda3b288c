"""The Ray executor: trainer and rollout actors in a placement group, adapter broadcast
through the object store, FSDP2 process groups. Chosen by `resources.executor: ray`."""

from .run import connect, run_on_ray

__all__ = ["connect", "run_on_ray"]
