"""Ready notices: what a transaction made claimable, handed to a sink only after it commits.

The store knows nothing of AMQP (ARCHITECTURE.md): SQL functions record notices on the `Txn`
they are given (transactions.py), and `Transactions` passes them to the `after_commit` callback
the Store was built with, once the transaction has committed (broker invariant 1: publish after
commit). That callback is the one place that decides who hears of the work: a worker's
`ReadyRouter` (broker wake or local poke), a client's wake publisher. Work a transaction leased
to its own worker (eager dispatch) is retracted, so nobody is woken for it.

Beside ready work, a transaction records `RunChanged` notices for what clients wait on: a run
closed, an update completed, a query answered. They become result wakes (issue 12). A closed run's
notice carries its outcome as committed (`RunOutcome`), so a waiter that hears it need not read
the run back; Postgres stays the truth for every waiter that does not.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

import pydantic

from burrow.protocol.shapes import JsonObject

MAX_OUTCOME_BYTES = 32 * 1024
"""A larger outcome is left out of its run change: the waiter reads it from Postgres."""


@dataclass(frozen=True, slots=True)
class ReadyTask:
    """A task that became claimable (now, or at `available_at`)."""

    namespace: str
    connection: str
    queue: str
    kind: str
    task_id: str | None = None
    available_at: datetime | None = None
    sticky_worker_id: str | None = None
    """The worker the task is bound to while the binding holds (S4): its wake goes there."""


class Change(StrEnum):
    """What changed for the clients waiting on a key."""

    CLOSED = "closed"
    """The run closed (completed, failed, cancelled, terminated, continued as new)."""
    UPDATE = "update"
    """An update of the run completed or failed."""
    QUERY = "query"
    """A query task was answered."""


class RunOutcome(pydantic.BaseModel):
    """How a run closed, copied from the row its closing transaction committed."""

    model_config = pydantic.ConfigDict(frozen=True)

    status: str
    result: JsonObject | None = None
    failure: JsonObject | None = None
    continued_to_run_id: str | None = None


class RunChangeMessage(pydantic.BaseModel):
    """The body of a run change on the broker: what changed and, for a close, the outcome."""

    change: Change
    outcome: RunOutcome | None = None

    def encode(self) -> bytes:
        """JSON; the outcome is dropped when it would weigh more than MAX_OUTCOME_BYTES."""
        body = self.model_dump_json().encode()
        if self.outcome is not None and len(body) > MAX_OUTCOME_BYTES:
            body = self.model_copy(update={"outcome": None}).model_dump_json().encode()
        return body

    @classmethod
    def decode(cls, body: bytes) -> RunChangeMessage | None:
        """The message, or None for a body that is not one (it is still a wake)."""
        try:
            return cls.model_validate_json(body)
        except pydantic.ValidationError:
            return None


@dataclass(frozen=True, slots=True)
class RunChanged:
    """Something a client may be waiting on changed: `key` is a run id or a query task id."""

    namespace: str
    key: str
    change: Change
    outcome: RunOutcome | None = None
    """For a closed run: how it closed (the waiter need not read it back)."""
    notify_queue: str | None = None
    """The queue of the client that started the run: the change is routed to it too."""

    def message(self) -> bytes:
        """The broker body of this change."""
        return RunChangeMessage(change=self.change, outcome=self.outcome).encode()


Notice = ReadyTask | RunChanged


class WorkflowTaskRow(Protocol):
    """A row naming a ready workflow task and its sticky owner (`fragments.sticky_owner()`)."""

    namespace: str
    connection: str
    queue: str
    task_id: str
    sticky_owner: str | None


# The completion statements (tasks.py, fused.py) still record through this variable; the facade
# points it at the list its `Txn` collects into. Every other store function records on a `Txn`.
_pending: contextvars.ContextVar[list[Notice] | None] = contextvars.ContextVar(
    "burrow_ready_notices", default=None
)


def notify(
    namespace: str,
    connection: str,
    queue: str,
    kind: str,
    task_id: str | None = None,
    available_at: datetime | None = None,
    sticky_worker_id: str | None = None,
) -> None:
    """Record that the current transaction made a task ready (no-op outside a Store txn)."""
    pending = _pending.get()
    if pending is not None:
        pending.append(
            ReadyTask(namespace, connection, queue, kind, task_id, available_at, sticky_worker_id)
        )


def notify_run(
    namespace: str,
    key: str,
    change: Change,
    outcome: RunOutcome | None = None,
    notify_queue: str | None = None,
) -> None:
    """Record that the current transaction changed what waiters on `key` wait for."""
    pending = _pending.get()
    if pending is not None:
        pending.append(RunChanged(namespace, key, change, outcome, notify_queue))


def notify_workflow_task(row: WorkflowTaskRow, available_at: datetime | None = None) -> None:
    """Record a ready workflow task, announced to its sticky owner if it has one (S4, C1)."""
    notify(
        row.namespace,
        row.connection,
        row.queue,
        "workflow",
        row.task_id,
        available_at,
        sticky_worker_id=row.sticky_owner,
    )


def retract(task_ids: set[str]) -> None:
    """Drop notices for tasks the transaction itself leased (eager dispatch needs no wake)."""
    pending = _pending.get()
    if pending is not None:
        pending[:] = [
            n for n in pending if not isinstance(n, ReadyTask) or n.task_id not in task_ids
        ]


def pending() -> list[Notice]:
    """The list the current transaction collects into (a throwaway one outside a Store txn)."""
    notices = _pending.get()
    return [] if notices is None else notices


def collect(notices: list[Notice]) -> contextvars.Token[list[Notice] | None]:
    """Collect what tasks.py records into `notices`, until `stop`."""
    return _pending.set(notices)


def stop(token: contextvars.Token[list[Notice] | None]) -> None:
    """Stop collecting."""
    _pending.reset(token)
