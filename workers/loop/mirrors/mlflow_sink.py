"""MLflow: one MLflow run per Paddock run output (a dispatch, under the platform), in the
spec's experiment on a tracking server; each metric row one `log_batch` call, the spec's
sections as the run's tags. Needs `mlflow-skinny` (the client) where the job runs.

The tracking URI is the user's: it is checked against the run's egress policy when the sink
opens (workers/egress.py: every address its name resolves to), and a failure names the
server's host and MLflow's error code, never the reply's body (MLflow's own messages quote
it, and a warning is shown to the run's whole team)."""

from __future__ import annotations

import json

from ...egress import EgressPolicy
from ...spec import MlflowLogSpec

MAX_BATCH = 1000  # metrics per log_batch request: MLflow's own limit
MAX_TAG = 5000  # characters of a tag value MLflow stores


class MlflowSink:
    name = "mlflow"

    def __init__(self, spec: MlflowLogSpec, run_name: str, config: dict, egress: EgressPolicy):
        self.spec, self.run_name, self.config = spec, run_name, config
        self.egress, self.host = egress, ""
        self._client = None
        self._run_id: str | None = None

    def open(self) -> None:
        target = self.egress.check_url(self.spec.tracking_uri)
        self.egress.resolve(target.host, target.port)
        self.host = target.host
        try:
            self._open()
        except Exception as exc:
            raise self._quiet(exc) from None

    def _quiet(self, exc: Exception) -> RuntimeError:
        code = getattr(exc, "error_code", None)
        return RuntimeError(
            f"MLflow at {self.host}: {type(exc).__name__}" + (f" ({code})" if code else "")
        )

    def _open(self) -> None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.spec.tracking_uri)
        experiment = client.get_experiment_by_name(self.spec.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else client.create_experiment(self.spec.experiment)
        )
        tags = {"paddock.source": "paddock"}
        for section, value in self.config.items():  # `algorithm`, `train`, …: searchable
            tags[f"paddock.spec.{section}"] = json.dumps(value, sort_keys=True)[:MAX_TAG]
        run = client.create_run(experiment_id, run_name=self.run_name, tags=tags)
        self._client, self._run_id = client, run.info.run_id

    def log(self, step: int, wall_time: float, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(key, value, int(wall_time * 1000), step) for key, value in values.items()]
        try:
            for i in range(0, len(metrics), MAX_BATCH):
                self._client.log_batch(self._run_id, metrics=metrics[i : i + MAX_BATCH])
        except Exception as exc:
            raise self._quiet(exc) from None

    def close(self) -> None:
        self._client.set_terminated(self._run_id)
