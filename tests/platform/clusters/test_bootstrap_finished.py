"""A job placed only after its run ended (aborted or failed while the job was PENDING in
Ray, its stop queued there) is refused at bootstrap: it gets no run token and no spec."""

import pytest

from paddock.clusters.bootstrap_tokens import bootstrap_exchange, bootstrap_token_for
from paddock.core.errors import DomainError
from paddock.experiments.models import Run, RunToken
from paddock.experiments.states import run_transition
from paddock.teams.models import Role
from tests.platform.conftest import launch

pytestmark = pytest.mark.usefixtures("quiet_hooks")


def test_a_finished_run_refuses_the_bootstrap_of_its_last_dispatch(world, client_as):
    reply = launch(client_as(world.users_a[Role.MEMBER]), world.team_a)
    run = Run.objects.get(pk=reply.json()["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1, cluster=world.cluster)
    run_transition(run=run, to_state="dispatching", dispatch=1)
    run_transition(run=run, to_state="starting", dispatch=1)
    run_transition(run=run, to_state="aborting")
    run_transition(run=run, to_state="aborted", reason="its Ray job had not started")
    raw = bootstrap_token_for(run_id=run.pk, dispatch=1)
    with pytest.raises(DomainError) as refused:
        bootstrap_exchange(run_id=run.pk, dispatch=1, raw=raw)
    assert (refused.value.code, refused.value.status) == ("run_finished", 409)
    assert not RunToken.objects.filter(run=run).exists()
