"""A tiny model's build says what it does: its start, its progress with the time left, its
end, and a wait behind another process building the same model; a run on a fresh
PADDOCK_HOME logs its build before its first step."""

from __future__ import annotations

import asyncio
import fcntl
import threading

import pytest

from workers.events import LogEvent, MetricEvent
from workers.models import recipe_hash, tiny_model_dir
from workers.models.build_progress import BuildProgress, about, time_left
from workers.models.tiny import build_tiny_model
from workers.pool.driver import PoolDriver
from workers.spec import TinyModelSpec
from workers.train import train

SMALL = TinyModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                      warmup_steps=3, warmup_bias_steps=1)  # fmt: skip


def test_durations_read_as_people_say_them():
    assert [about(s) for s in (0.2, 40, 89, 90, 200, 5399, 5400, 9000)] == [
        "about 1 s", "about 40 s", "about 89 s", "about 2 min", "about 3 min", "about 90 min",
        "about 1.5 h", "about 2.5 h",
    ]  # fmt: skip
    assert time_left(elapsed=30, done=100, total=400) == 90
    assert time_left(elapsed=30, done=400, total=400) == 0
    with pytest.raises(ValueError, match="no step done"):
        time_left(elapsed=1, done=0, total=10)


def test_progress_says_the_share_done_and_the_time_left_at_most_once_an_interval():
    now = [0.0]
    lines: list[str] = []
    progress = BuildProgress("model: building x", 1000, lines.append, every_s=100,
                             clock=lambda: now[0])  # fmt: skip
    for step in range(1, 1001):  # a second a step
        now[0] = float(step)
        progress(step)
    # every 100 s, but not at the last step (the build's own end line says that)
    assert len(lines) == 9
    assert lines[0] == "model: building x: warm-up step 100 of 1000 (10 %), about 15 min left"
    assert lines[-1] == "model: building x: warm-up step 900 of 1000 (90 %), about 2 min left"


def test_the_warm_up_reports_each_step(tmp_path):
    done: list[int] = []
    build_tiny_model(SMALL, tmp_path / "m", on_step=done.append)
    assert done == [1, 2, 3] and (tmp_path / "m" / "config.json").is_file()


def test_a_build_behind_another_process_says_it_waits_then_builds(tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    name = f"tiny-{recipe_hash(SMALL)}"
    lines: list[str] = []
    waiting = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if "waiting" in line:
            waiting.set()

    with open(root / f"{name}.lock", "w") as held:  # another process's build, in progress
        fcntl.flock(held, fcntl.LOCK_EX)
        builder = threading.Thread(target=tiny_model_dir, args=(SMALL, tmp_path, log))
        builder.start()
        assert waiting.wait(60), lines
        assert lines == [f"model: another process is building {name}; waiting for it"]
    builder.join(120)  # the lock is free: it builds (the other build left nothing)
    assert lines[1].startswith(f"model: building {name} (the tiny arithmetic model, 3 warm-up")
    assert lines[2].startswith(f"model: built {name} in ") and len(lines) == 3
    lines.clear()
    assert tiny_model_dir(SMALL, tmp_path, log) == root / name and lines == []  # built: silent


@pytest.mark.parametrize("where", ["solo", "pool"])
def test_a_run_on_a_fresh_home_logs_the_build_before_its_first_step(
    make_spec, tmp_path, monkeypatch, where
):
    monkeypatch.setenv("PADDOCK_HOME", str(tmp_path / "home"))
    events: list = []
    spec = make_spec("train.steps=1", model={"tiny": SMALL.model_dump()})
    if where == "solo":
        train(spec, out_dir=tmp_path / "run", on_event=events.append, progress=False)
    else:  # a pool of one: the pool's first member hears of the shared model's build

        async def pooled():
            pool = PoolDriver()
            pool.admit("a", spec, tmp_path / "run", on_event=events.append)
            await pool.wait()
            await pool.close()

        asyncio.run(pooled())
    assert_built_before_the_first_step(events)


def assert_built_before_the_first_step(events: list, recipe: TinyModelSpec = SMALL) -> None:
    """The run's events say the model's build started and ended before any metric."""
    logs = [e.message for e in events if isinstance(e, LogEvent)]
    name = f"tiny-{recipe_hash(recipe)}"
    assert logs[0].startswith(f"model: building {name} ") and logs[1].startswith(
        f"model: built {name} in "
    )
    first_metric = next(i for i, e in enumerate(events) if isinstance(e, MetricEvent))
    built = next(
        i for i, e in enumerate(events) if isinstance(e, LogEvent) and "built" in e.message
    )
    assert built < first_metric
