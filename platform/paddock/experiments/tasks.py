"""Celery tasks of the experiments app: the beat's pass that judges the alarms of the runs
whose metrics moved (experiments/alarms.py)."""

from __future__ import annotations

from celery import shared_task

from .alarms import run_alarms_judge, runs_alarms_due


@shared_task
def runs_alarms_judge() -> int:
    """Judge every run due (at most a few hundred a pass; the next pass takes the rest)."""
    due = runs_alarms_due()
    for run_id in due:
        run_alarms_judge(run_id=run_id)
    return len(due)
