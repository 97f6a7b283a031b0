"""Ready notices: what a transaction made claimable, handed to a sink only after it commits.

The store knows nothing of AMQP (ARCHITECTURE.md): SQL functions record notices on the `Txn`
they are given (transactions.py), and `Transactions` passes them to the `after_commit` callback
the Store was built with, once the transaction has committed (broker invariant 1: publish after
commit). That callback is the one place that decides who hears of the work: a worker's
`ReadyRouter` (broker wake or local poke), a client's wake publisher. Work a transaction leased
to its own worker (eager dispatch) is retracted, so nobody is woken for it.

Beside ready work, a transaction records `RunChanged` notices for what clients wait on: a run
closed, an update completed, a query answered. They become result wakes. A closed run's
notice carries its outcome as committed (`RunOutcome`), so a waiter that hears it need not read
the run back; Postgres stays the truth for every waiter that does not. `ClosePoliciesPending`
tells a sweeping process that a closed parent's close policies wait for its repair pass.
"""

from __future__ import annotations

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


@dataclass(frozen=True, slots=True)
class ClosePoliciesPending:
    """A run closed with children whose parent close policy the repair pass must now apply.

    Nothing to wake: the process that sweeps (`burrow server`) runs its next pass at once.
    """

    run_id: str


Notice = ReadyTask | RunChanged | ClosePoliciesPending


class WorkflowTaskRow(Protocol):
    """A row naming a ready workflow task and its sticky owner (`fragments.sticky_owner()`)."""

    namespace: str
    connection: str
    queue: str
    task_id: str
    sticky_owner: str | None
