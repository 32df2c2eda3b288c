"""The spec's `logging:` mirrors, for real: a tiny training run sends every metric row the
Emitter reports to a real MLflow tracking server process (sqlite store in tmp, read back
through MlflowClient), to TensorBoard event files (read back with tensorboard's
EventAccumulator) and to a W&B offline run (its .wandb file read back record by record);
each (step, key) reaches each sink exactly once. A sink that fails is a warning in the run's
log, never the end of the run; a run without `logging:` imports none of the libraries."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.serving import serving_on_a_free_port
from workers.loop.mirrors import MAX_FAILURES, Mirrors
from workers.train import train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on a free port, its sqlite store and artifacts in a tmp directory."""
    home = tmp_path_factory.mktemp("mlflow")

    def argv(port: int) -> list[str]:
        return [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1",
                "--port", str(port), "--workers", "1",
                "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
                "--default-artifact-root", str(home / "artifacts")]  # fmt: skip

    with serving_on_a_free_port(argv, ready_path="/health", what="the MLflow tracking server",
                                cwd=home, log=home / "server.log") as url:  # fmt: skip
        yield url


def wandb_history(run_dir: Path) -> list[dict]:
    """The history rows of a W&B offline run, read from its .wandb file: a LevelDB-style log
    (a 7-byte file header `:W&B`, 0xBEE1, version; 32 KiB blocks of records, each a 7-byte
    header of checksum, length, kind (full | first | middle | last) and its bytes), each
    record a `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0)
    block, pos, pieces, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if (length, kind) == (0, 0):
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pieces = chunk if kind in (1, 2) else pieces + chunk
        if kind in (1, 4):
            records.append(pieces)
    rows = []
    for raw in records:
        record = pb.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = record.history.item
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
    return rows


def _run(make_spec, out: Path, logging: dict, steps: int = 3):
    rows: list[tuple[int, dict[str, float]]] = []
    events: list = []
    spec = make_spec(f"train.steps={steps}", "train.eval_every=2", logging=logging)
    outcome = train(spec, out, progress=False, on_metrics=lambda s, v: rows.append((s, v)),
                    on_event=events.append)  # fmt: skip
    return outcome, rows, events


def _field(event, name):
    return event.get(name) if isinstance(event, dict) else getattr(event, name, None)


def _warnings(events) -> list[str]:
    return [_field(e, "message") for e in events
            if _field(e, "type") == "log" and _field(e, "level") == "warning"]  # fmt: skip


def test_every_metric_reaches_mlflow_tensorboard_and_wandb_once(
    make_spec, tmp_path, mlflow_server, monkeypatch
):
    from mlflow.tracking import MlflowClient

    # the egress policy refuses loopback unless the operator allows it (docs/security.md)
    monkeypatch.setenv("PADDOCK_EGRESS_ALLOW_NETWORKS", "127.0.0.1/32")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    logging = {"tensorboard": {"dir": "tb"},
               "mlflow": {"tracking_uri": mlflow_server, "experiment": "mirrors-test"},
               "wandb": {"project": "paddock-test", "mode": "offline"}}  # fmt: skip
    outcome, rows, events = _run(make_spec, out, logging)
    assert outcome.state == "succeeded"
    assert not any("metric mirror" in m for m in _warnings(events)), _warnings(events)
    # what the Emitter wrote: its hook's rows, and metrics.jsonl line for line
    want = Counter((step, key) for step, values in rows for key in values)
    assert want and max(want.values()) == 1  # each (step, key) once, so "once" is checkable
    values = {(step, key): v for step, vs in rows for key, v in vs.items()}
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert Counter((d["step"], k) for d in lines for k in d if k not in ("step", "time")) == want
    assert {"reward/mean", "eval/accuracy", "loss/policy"} <= {k for _, k in want}

    # TensorBoard: the event files of OUT/tb (float32 scalars)
    tb = EventAccumulator(str(out / "tb"), size_guidance={"scalars": 0})
    tb.Reload()
    got = Counter((e.step, tag) for tag in tb.Tags()["scalars"] for e in tb.Scalars(tag))
    assert got == want
    for tag in tb.Tags()["scalars"]:
        for e in tb.Scalars(tag):
            assert e.value == pytest.approx(values[(e.step, tag)], rel=1e-6, abs=1e-30)

    # MLflow: one finished run in the experiment, every point at its step, values exact
    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("mirrors-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == out.name and run.info.status == "FINISHED"
    assert json.loads(run.data.tags["paddock.spec.train"])["steps"] == 3
    got = Counter()
    for key in {k for _, k in want}:
        for metric in client.get_metric_history(run.info.run_id, key):
            got[(metric.step, key)] += 1
            assert metric.value == values[(metric.step, key)]
    assert got == want

    # W&B offline: the run directory under OUT/wandb, history rows by step
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    got = Counter()
    for row in wandb_history(run_dir):
        for key, value in row.items():
            if not key.startswith("_"):
                got[(row["_step"], key)] += 1
                assert value == pytest.approx(values[(row["_step"], key)], rel=1e-12)
    assert got == want


def test_a_failing_sink_is_a_warning_and_the_run_goes_on(make_spec, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tb").write_text("a file where the directory should be")
    outcome, rows, events = _run(make_spec, tmp_path / "run", {"tensorboard": {"dir": "tb"}})
    assert outcome.state == "succeeded" and rows
    warnings = [m for m in _warnings(events) if m.startswith("metric mirror tensorboard")]
    assert len(warnings) == 1 and "open failed" in warnings[0], _warnings(events)
    # said before the final status, which the platform takes as the run's last event
    kinds = [(_field(e, "type"), _field(e, "state") or _field(e, "message")) for e in events]
    assert kinds.index(("log", warnings[0])) < kinds.index(("status", "succeeded"))


def test_a_tracking_server_the_egress_policy_refuses_is_a_warning(make_spec, tmp_path):
    logging = {"mlflow": {"tracking_uri": "http://169.254.169.254:8080", "experiment": "x"}}
    outcome, rows, events = _run(make_spec, tmp_path / "run", logging)
    assert outcome.state == "succeeded" and rows
    (warning,) = [m for m in _warnings(events) if m.startswith("metric mirror mlflow")]
    assert "open failed" in warning and "cloud metadata address" in warning


def test_without_logging_no_mirror_library_is_imported(make_spec, tmp_path):
    spec = make_spec("train.steps=1")
    code = (
        "import json, sys\n"
        "from workers.train import train\n"
        f"train(json.loads({json.dumps(json.dumps(spec))}), {str(tmp_path)!r}, progress=False)\n"
        "names = ('mlflow', 'wandb', 'tensorboard', 'torch.utils.tensorboard')\n"
        "print(json.dumps(sorted(n for n in names if n in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


class _Flaky:
    name = "flaky"

    def __init__(self, fail_from: int):
        self.fail_from, self.rows, self.closed = fail_from, [], False

    def open(self) -> None:
        pass

    def log(self, step, wall_time, values) -> None:
        if step >= self.fail_from:
            raise ConnectionError(f"server gone at step {step}")
        self.rows.append((step, values))

    def close(self) -> None:
        self.closed = True


def test_a_sink_failing_in_a_row_is_turned_off_and_the_others_go_on():
    flaky, steady = _Flaky(fail_from=3), _Flaky(fail_from=10**9)
    steady.name = "steady"
    mirrors, warned = Mirrors([flaky, steady]), []
    mirrors.warn = warned.append
    for step in range(20):
        mirrors.metric(step, {"kl": float(step)})
    mirrors.close()
    assert [s for s, _ in flaky.rows] == [0, 1, 2] and not flaky.closed
    assert [s for s, _ in steady.rows] == list(range(20)) and steady.closed
    assert len(warned) == 2  # the first failure, and the one that turned it off
    assert "step 3" in warned[0] and "retrying" in warned[0]
    assert f"turned off after {MAX_FAILURES} failures in a row" in warned[1]
    mirrors.metric(21, {"kl": 1.0})  # after close: nothing, no error
    assert len(steady.rows) == 20
