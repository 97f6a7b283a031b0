"""A store transaction: its connection and the ready notices it records.

Store functions take a `Txn` and record what they made claimable on it; the facade hands the
notices to its `after_commit` sink only once the transaction committed (broker invariant 1).
Nothing travels through a context variable, so a function that is given no `Txn` cannot record
a notice that nobody will deliver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from burrow.store.ready import Change, Notice, ReadyTask, RunChanged, RunOutcome, WorkflowTaskRow

C_co = TypeVar("C_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Txn(Generic[C_co]):
    """One transaction (or one autocommitted statement) and what it made ready."""

    conn: C_co
    notices: list[Notice] = field(default_factory=list)

    def notify(
        self,
        namespace: str,
        connection: str,
        queue: str,
        kind: str,
        task_id: str | None = None,
        available_at: datetime | None = None,
        sticky_worker_id: str | None = None,
    ) -> None:
        """Record that this transaction made a task ready."""
        self.notices.append(
            ReadyTask(namespace, connection, queue, kind, task_id, available_at, sticky_worker_id)
        )

    def notify_run(
        self,
        namespace: str,
        key: str,
        change: Change,
        outcome: RunOutcome | None = None,
        notify_queue: str | None = None,
    ) -> None:
        """Record that this transaction changed what waiters on `key` wait for."""
        self.notices.append(RunChanged(namespace, key, change, outcome, notify_queue))

    def notify_workflow_task(
        self, row: WorkflowTaskRow, available_at: datetime | None = None
    ) -> None:
        """Record a ready workflow task, announced to its sticky owner if it has one (S4, C1)."""
        self.notify(
            row.namespace,
            row.connection,
            row.queue,
            "workflow",
            row.task_id,
            available_at,
            sticky_worker_id=row.sticky_owner,
        )

    def retract(self, task_ids: set[str]) -> None:
        """Drop notices for tasks this transaction itself leased (eager dispatch needs no wake)."""
        self.notices[:] = [
            n for n in self.notices if not isinstance(n, ReadyTask) or n.task_id not in task_ids
        ]

    def checkpoint(self) -> int:
        """How many notices were recorded so far (for `discard_after`)."""
        return len(self.notices)

    def discard_after(self, mark: int) -> None:
        """Drop what was recorded after `checkpoint()` returned `mark`: a savepoint rolled back."""
        del self.notices[mark:]
