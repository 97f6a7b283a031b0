"""Workflow definition fingerprints on the HTTP worker plane (S8, PROTOCOL.md 16)."""

from __future__ import annotations

import structlog

from burrow.server.api_errors import ApiError
from burrow.server.deps import ServerState
from burrow.server.worker_models import RegisterWorker
from burrow.store.models import RunInfo, WorkerState
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


async def refuse_changed_definitions(
    state: ServerState, namespace: str, body: RegisterWorker
) -> None:
    """409 `workflow_definition_changed` when an active worker id registers other code for a type.

    A worker that runs other code is another worker: it registers under a new id (PROTOCOL.md 4.1).
    """
    reg = await state.store.worker_registration(worker_id=body.worker_id)
    if reg is None or reg.namespace != namespace or reg.state != WorkerState.ACTIVE:
        return
    changed = sorted(
        name
        for name, fingerprint in body.workflow_definition_fingerprints.items()
        if fingerprints.changed(reg.workflow_fingerprints.get(name), fingerprint)
    )
    if changed:
        raise ApiError(
            409,
            "workflow_definition_changed",
            f"worker {body.worker_id} is registered with other definitions of {changed};"
            " register the changed code under a new worker id",
            worker_id=body.worker_id,
            workflow_types=changed,
        )
