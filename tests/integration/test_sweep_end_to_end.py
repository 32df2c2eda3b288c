"""A sweep end to end with real parts: uvicorn (job doors, ingest), a Celery worker with beat
(dispatch, reconcile, the sweeps' tick), a local Ray head of 2 CPUs, PostgreSQL, and the real
pool job training the members' adapters on one tiny base model.

Four short members, two at a time in the sweep's own pool, under a rule no member can pass
(best reward/mean ≥ 2 by step 2): each member is stopped early, through a pause (a
checkpoint) then an abort, its slot freed and the next member launched. Judged by the
events (member states, audit log, checkpoints), never by how long anything took."""

from __future__ import annotations

import pytest

from paddock.clusters.models import Pool, PoolMember
from paddock.experiments.models import Checkpoint, Run
from paddock.sweeps.models import Sweep, SweepMember
from paddock.sweeps.services import sweep_create
from paddock.teams.access import actor_for
from paddock.teams.models import AuditEvent
from tests.conftest import wait_for
from tests.integration.test_dispatch import (
    FAST_SPEC,
    member_on_local_cluster,
    stack,  # noqa: F401  (the module's fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
# long enough that no member can finish before the rule stops it
SPEC = {**FAST_SPEC, "train": {**FAST_SPEC["train"], "steps": 300}}


def test_a_sweep_stops_every_member_early_and_launches_the_next_in_its_slot(stack):  # noqa: F811
    team, user = member_on_local_cluster(stack)
    result = sweep_create(
        actor=actor_for(user=user), team=team, name="sweep e2e", spec=SPEC, method="grid",
        params={"train.lr": [1e-3, 3e-3], "seed": [0, 1]}, parallel=2,
        early_stopping={"rule": "threshold", "min_steps": 2, "threshold": 2.0},
    )  # fmt: skip
    sweep = result.sweep

    def finished():
        sweep.refresh_from_db()
        return sweep.state == "finished"

    try:
        wait_for(finished, 420, "the sweep to finish", 1.0)
    except TimeoutError as exc:
        seen = [(m.index, m.state, m.reason, m.run and (m.run.state, m.run.queued_reason,
                 m.run.error[-300:])) for m in sweep.members.select_related("run")]  # fmt: skip
        raise AssertionError(f"{exc}: {seen}") from None
    members = list(SweepMember.objects.filter(sweep=sweep).select_related("run").order_by("index"))
    assert [m.state for m in members] == ["stopped"] * 4, [(m.state, m.reason) for m in members]
    for m in members:
        assert m.run.state == "aborted" and m.stopped_step >= 2
        assert m.reason.startswith("reward/mean: threshold at step")
        # paused before the abort: the pause's checkpoint, at the step it stopped at or after
        assert Checkpoint.objects.filter(run=m.run, step__gte=m.stopped_step).exists()
        audit = AuditEvent.objects.filter(target_type="run", target_id=str(m.run_id))
        assert list(audit.filter(action__in=["run.pause", "run.abort"]).order_by("id")
                    .values_list("action", flat=True)) == ["run.pause", "run.abort"]  # fmt: skip
    # two at a time: the third and fourth members launched only after a stop freed a slot
    events = list(AuditEvent.objects.filter(target_type="sweep", target_id=str(sweep.pk))
                  .order_by("id").values_list("action", "data"))  # fmt: skip
    order = [(a, d.get("member")) for a, d in events if a in ("sweep.member_launch",
                                                             "sweep.member_stop")]  # fmt: skip
    assert order[:2] == [("sweep.member_launch", 0), ("sweep.member_launch", 1)]
    for late in (2, 3):
        launched_at = order.index(("sweep.member_launch", late))
        stops_before = sum(a == "sweep.member_stop" for a, _ in order[:launched_at])
        assert stops_before >= late - 1, order
    assert events[-1][0] == "sweep.finish"
    # every member ran in the sweep's own pool, on one base model
    pools = set(PoolMember.objects.filter(run__in=[m.run for m in members])
                .values_list("pool_id", flat=True))  # fmt: skip
    assert [p.name for p in Pool.objects.filter(pk__in=pools)] == [f"sweep-{sweep.pk}"]
    assert Run.objects.filter(experiment=sweep.experiment).count() == 4
    assert Sweep.objects.get(pk=sweep.pk).end_reason == "every member ran"
