"""One private local Ray instance for these tests (2 CPUs, no dashboard), shut down at the
end; never another cluster found on the machine."""

from __future__ import annotations

import os
import secrets

import pytest
import ray
from ray._private.authentication_test_utils import reset_auth_token_state


@pytest.fixture(scope="package")
def ray_local(tmp_path_factory):
    # A local ray.init() turns token authentication on and, unless told where the token is,
    # writes ~/.ray/auth_token, which every later `ray start --head` on the machine would
    # then enforce: keep this instance's token in a file of its own.
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    if saved["RAY_AUTH_MODE"] is None:
        token = tmp_path_factory.mktemp("ray-auth") / "auth_token"
        token.write_text(secrets.token_hex(32))
        os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    reset_auth_token_state()  # ray caches its config at import: make it read the env again
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_auth_token_state()


RAY = ["resources.executor=ray", "resources.trainer_cpus=0.5", "resources.rollout_cpus=0.5"]
