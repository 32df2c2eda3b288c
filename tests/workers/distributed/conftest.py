"""One private local Ray instance for the module's tests (2 CPUs, no dashboard), shut down at
the end; never another cluster found on the machine."""

from __future__ import annotations

import pytest
import ray


@pytest.fixture(scope="module")
def ray_local():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


RAY = ["resources.executor=ray", "resources.trainer_cpus=0.5", "resources.rollout_cpus=0.5"]
