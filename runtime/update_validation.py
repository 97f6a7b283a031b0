"""Update validators: an update is approved by its validator before it is accepted (SPEC M4b).

A worker that declares a validator for an update (a Burrow `@workflow.update(validator=...)`,
or an SDK worker's `update_validators` contract, PROTOCOL.md 6.5) is asked first: an update
validation task on the run's queue, leased like a query task, that the worker answers by
replaying the run read-only and running the validator. Approved, the update is accepted as
before; rejected, nothing is written to the run's history and the caller gets the rejection.
When no worker of the run's queue declares a validator for the update, it needs no approval.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from burrow.outcomes import OutcomeWaiter, query_done
from burrow.store import Store
from burrow.store.models import JsonDict, TaskState

VALIDATION_TIMEOUT_SECONDS = 10.0
REJECTED = "update_validator_rejected"
WORKER_FAILED = "update_validation_worker_failed"


class Verdict(StrEnum):
    """How a validation ended, as the caller sees it."""

    UNVALIDATED = "unvalidated"
    """No worker of the run's queue declares a validator for the update."""
    APPROVED = "approved"
    REJECTED = "rejected"
    """The validator refused the update (`failure` says why)."""
    WORKER_FAILED = "worker_failed"
    """The worker could not run the validator (`failure` says why)."""
    NOT_CLAIMED = "not_claimed"
    """No worker took the validation task in time."""
    TIMED_OUT = "timed_out"
    """A worker took it but did not answer in time."""


@dataclass(frozen=True, slots=True)
class Validation:
    """A validation's verdict; `failure` is the worker's record when it refused or failed."""

    verdict: Verdict
    task_id: str | None = None
    failure: JsonDict | None = None
    seconds: float = VALIDATION_TIMEOUT_SECONDS

    @property
    def allows(self) -> bool:
        """Whether the update may be accepted."""
        return self.verdict in (Verdict.UNVALIDATED, Verdict.APPROVED)

    @property
    def validation_errors(self) -> JsonDict | None:
        """The structured errors a validator reported with its rejection, if any."""
        cause = (self.failure or {}).get("cause")
        errors = cause.get("validation_errors") if isinstance(cause, dict) else None
        return errors if isinstance(errors, dict) else None


async def validate_update(
    store: Store,
    waiter: OutcomeWaiter,
    *,
    namespace: str,
    workflow_id: str,
    run_id: str | None,
    update_name: str,
    arguments: JsonDict,
    update_id: str | None = None,
    seconds: float = VALIDATION_TIMEOUT_SECONDS,
) -> Validation:
    """Ask the run's validator about an update and wait for its verdict, up to `seconds`.

    An update the run holds already (`update_id`) was approved before: it is not asked again.
    """
    task_id = await store.submit_update_validation(
        namespace=namespace,
        workflow_id=workflow_id,
        run_id=run_id,
        update_name=update_name,
        arguments=arguments,
        update_id=update_id,
        timeout=timedelta(seconds=seconds),
    )
    if task_id is None:
        return Validation(Verdict.UNVALIDATED)
    row = await waiter.wait_for(
        task_id, lambda: store.get_query(task_id=task_id), query_done, seconds
    )
    if row is None or not query_done(row):
        claimed = row is not None and row.state == TaskState.LEASED
        verdict = Verdict.TIMED_OUT if claimed else Verdict.NOT_CLAIMED
        return Validation(verdict, task_id, seconds=seconds)
    if row.state == TaskState.COMPLETED:
        return Validation(Verdict.APPROVED, task_id, seconds=seconds)
    failure = row.failure or {}
    verdict = Verdict.WORKER_FAILED if failure.get("reason") == WORKER_FAILED else Verdict.REJECTED
    return Validation(verdict, task_id, failure, seconds=seconds)
