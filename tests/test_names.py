"""Every list of names agrees with workers/names.py: the spec's literals (as its JSON Schema
shows them to the launcher), the registries, the Django choices, the ingest contract and the
browser's generated unions. Import-time checks guard most of these already; this test also
covers what is read as text (the generated TypeScript)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import get_args

from paddock.experiments.models import Backend, DesiredState, RunState
from paddock.experiments.states import TERMINAL
from paddock.live.ingest import _PATHS
from paddock.ops.doctor import available_backends
from workers import names
from workers.events import StatusEvent
from workers.grpo import ADVANTAGES, AGGREGATIONS, IS_LEVELS, KL_ESTIMATORS
from workers.rollout.registry import BACKENDS as BACKEND_REGISTRY
from workers.spec import spec_json_schema

REPO = Path(__file__).resolve().parents[1]
API = REPO / "frontend" / "src" / "api"


def test_the_spec_offers_exactly_the_names():
    schema = spec_json_schema()
    algorithm = schema["$defs"]["AlgorithmSpec"]["properties"]
    assert tuple(algorithm["advantage"]["enum"]) == names.ADVANTAGES
    assert tuple(algorithm["loss_agg"]["enum"]) == names.LOSS_AGGS
    assert tuple(algorithm["kl_estimator"]["enum"]) == names.KL_ESTIMATORS
    assert tuple(algorithm["rollout_is"]["enum"]) == names.IS_LEVELS
    mapping = schema["properties"]["rollout"]["discriminator"]["mapping"]
    assert set(mapping) == set(names.BACKENDS)


def test_the_registries_hold_exactly_the_names():
    assert ADVANTAGES.names() == sorted(names.ADVANTAGES)
    assert AGGREGATIONS.names() == sorted(names.LOSS_AGGS)
    assert KL_ESTIMATORS.names() == sorted(names.KL_ESTIMATORS)
    assert IS_LEVELS.names() == sorted(names.IS_LEVELS)
    assert tuple(BACKEND_REGISTRY) == names.BACKENDS


def test_the_control_plane_uses_the_names():
    assert tuple(RunState.values) == names.RUN_STATES  # in order: the choices of a column
    assert tuple(DesiredState.values) == names.DESIRED_STATES
    assert tuple(Backend.values) == names.BACKENDS
    assert set(TERMINAL) == set(names.TERMINAL_RUN_STATES)
    assert get_args(StatusEvent.model_fields["state"].annotation) == names.REPORTED_STATES
    assert set(_PATHS) == set(names.REPORTED_STATES)
    everything = {name: {"ok": True} for name in ("torch", "transformers", "peft", "vllm",
                                                   "tensorrt_llm")}  # fmt: skip
    assert tuple(available_backends(everything)) == names.BACKENDS


def _union(source: str, name: str) -> tuple[str, ...]:
    match = re.search(rf"\b{name}: ((?:\"[a-z_]+\"(?: \| )?)+);", source)
    assert match, f"{name} not in schema.gen.ts"
    return tuple(re.findall(r'"([a-z_]+)"', match[1]))


def test_the_browser_unions_are_generated_from_the_names():
    schema = (API / "schema.gen.ts").read_text(encoding="utf-8")
    assert _union(schema, "BackendEnum") == names.BACKENDS
    assert _union(schema, "StateEnum") == names.RUN_STATES
    assert _union(schema, "DesiredStateEnum") == names.DESIRED_STATES
    spec = importlib.util.spec_from_file_location(
        "names_ts", REPO / "frontend" / "scripts" / "names_ts.py"
    )
    names_ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(names_ts)
    generated = (API / "names.gen.ts").read_text(encoding="utf-8")
    assert generated == names_ts.typescript(), "run frontend/scripts/api-types.sh"
    for const in ("BACKENDS", "RUN_STATES", "TERMINAL_RUN_STATES", "DESIRED_STATES"):
        block = re.search(rf"export const {const} = (\[[^\]]*\])", generated)[1]
        assert tuple(re.findall(r'"([a-z_]+)"', block)) == getattr(names, const)
    # and the app lists no backend or run state by hand where it could use them
    by_hand = [
        str(p.relative_to(REPO))
        for p in (REPO / "frontend" / "src").rglob("*.ts*")
        if not p.name.endswith((".gen.ts", ".test.ts", ".test.tsx"))
        and re.search(r'\[\s*"torch",\s*"vllm"|"succeeded",\s*"aborted",\s*"failed"', p.read_text())
    ]
    assert not by_hand, by_hand
