"""Workflow definition fingerprints on the HTTP worker plane (S8, PROTOCOL.md 16)."""

from __future__ import annotations

import structlog

from burrow.store.models import RunInfo
from burrow.store.server_queries import WorkerRegistration
from burrow.workflow import fingerprints

log = structlog.get_logger("burrow.server")


def definition_changed(reg: WorkerRegistration, run: RunInfo) -> bool:
    """Whether the worker registered another fingerprint for the run's type than it recorded.

    Such a claim is answered `workflow_definition_changed: true` with a cold-replay directive.
    """
    current = reg.workflow_fingerprints.get(run.workflow_type)
    recorded = run.workflow_definition_fingerprint
    if not fingerprints.changed(recorded, current):
        return False
    log.warning(
        "workflow definition changed",
        namespace=run.namespace,
        run_id=run.run_id,
        worker_id=reg.worker_id,
        workflow_type=run.workflow_type,
        recorded_fingerprint=recorded,
        worker_fingerprint=current,
    )
    return True
