"""A run as a real Ray job: examples/tiny-async.yaml (shortened) submitted with the Jobs API
to the session's local Ray head; the job's driver starts 1 trainer actor and 2 rollout actors
with fractional CPUs (the head has 2), the reward rises, the job SUCCEEDS."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from tests.conftest import REPO, wait_for
from workers.spec import load_spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RAY_JOB = [
    "resources.executor=ray",
    "resources.trainer_actors=1",
    "resources.trainer_cpus=0.5",
    "resources.rollout_replicas=2",
    "resources.rollout_cpus=0.5",
    "train.steps=40",
    "train.eval_every=0",
    "checkpoint.every=20",
]


def test_tiny_async_as_a_ray_job_with_actors(ray_head, tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient
    from ray.util.state import list_actors

    spec = load_spec(REPO / "examples" / "tiny-async.yaml", RAY_JOB)
    spec_file, out = tmp_path / "spec.json", tmp_path / "out"
    spec_file.write_text(json.dumps(spec.to_dict()))
    client = JobSubmissionClient(ray_head["jobs_address"])
    job = client.submit_job(
        entrypoint=f"python -m workers.job --spec {spec_file} --out {out}",
        runtime_env={
            "py_modules": [str(REPO / "workers")],
            # the session's model cache: the tiny model is built once per session
            "env_vars": {"PADDOCK_HOME": os.environ["PADDOCK_HOME"]},
        },
        entrypoint_num_cpus=0,  # the driver only waits; the actors hold the CPUs
    )
    try:
        done = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
        status = wait_for(lambda: (s := client.get_job_status(job)) in done and s, 300, "the job")
    finally:
        if client.get_job_status(job) not in done:
            client.stop_job(job)
    logs = client.get_job_logs(job)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    assert '{"state": "succeeded", "step": 40}' in logs
    # the job's actors ran on this cluster (the driver joined it, it did not start its own)
    ray_job_id = client.get_job_info(job).job_id
    actors = list_actors(address=ray_head["jobs_address"], filters=[("job_id", "=", ray_job_id)])
    classes = sorted(a.class_name for a in actors)
    assert classes == ["RolloutActor", "RolloutActor", "TrainerActor"]
    assert all(a.state == "DEAD" for a in actors)  # and the job took them down with it

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    reward = [r["reward/mean"] for r in rows if "reward/mean" in r]
    assert len(reward) == 40
    assert statistics.fmean(reward[-10:]) > statistics.fmean(reward[:10]) + 0.1
    assert rows[-1]["eval/accuracy"] > rows[0]["eval/accuracy"]
    assert all(r["time/weight_sync_s"] > 0 for r in rows[1:])
    assert (out / "checkpoints" / "step-40" / "adapter" / "adapter_model.safetensors").is_file()
    assert not any(Path(out).glob("checkpoints/.step-*"))
