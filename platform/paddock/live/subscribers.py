"""What the live stream does on the experiments app's events (experiments/hooks.py) and the
teams app's (teams/signals.py), subscribed in LiveConfig.ready(): the run's viewers see
every state and desired state and every change of the run's alarms, and a stream whose
credentials stopped working closes."""

from __future__ import annotations

from paddock.experiments.hooks import Event, subscribe
from paddock.teams.signals import access_revoked

from .broadcast import broadcast_access_changed, broadcast_alarms, broadcast_state


def run_state_changed(run_id: int, state: str) -> None:
    broadcast_state(run_id)


def run_control_requested(run_id: int, desired_state: str) -> None:
    broadcast_state(run_id)  # viewers see the new desired state even before state moves


def run_alarms_changed(run_id: int) -> None:
    broadcast_alarms(run_id)


def run_reason_changed(run_id: int) -> None:
    broadcast_state(run_id)  # a state message's detail is what a queued run waits for


def credentials_revoked(sender, *, token_ids, user_ids, session_keys, **_) -> None:
    broadcast_access_changed(token_ids=token_ids, user_ids=user_ids, session_keys=session_keys)


def connect() -> None:
    access_revoked.connect(credentials_revoked, dispatch_uid="paddock-live-access")
    subscribe(Event.RUN_STATE_CHANGED, run_state_changed)
    subscribe(Event.RUN_CONTROL_REQUESTED, run_control_requested)
    subscribe(Event.RUN_ALARMS_CHANGED, run_alarms_changed)
    subscribe(Event.RUN_REASON_CHANGED, run_reason_changed)
