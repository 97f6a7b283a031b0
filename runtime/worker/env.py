"""What task processing may use of its worker: a narrow, explicit environment."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from burrow.app import App
from burrow.store import Store
from burrow.store.claims import EagerClaim
from burrow.store.models import ClaimedActivityTask, ClaimedWorkflowTask, Lease
from burrow.worker.outage import while_leased
from burrow.worker.slots import Slots
from burrow.worker.sticky_cache import StickyCache

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TaskEnv:
    """The store, app, identity, slots and job starters `workflow_tasks`/`activity_tasks` use.

    Nothing here publishes or pokes: work a completion makes ready reaches other workers (or
    this one) through the store's ready notices, routed after commit (worker/router.py).
    """

    store: Store
    app: App
    worker_id: str
    task_queue: str
    lease: timedelta
    max_payload_bytes: int
    executor: Executor
    workflow_slots: Slots
    activity_slots: Slots
    eager_claim: Callable[[Iterable[str], int], EagerClaim]
    start_workflow_task: Callable[[ClaimedWorkflowTask], None]
    start_activity_task: Callable[[ClaimedActivityTask], None]
    is_stopping: Callable[[], bool]
    sticky_cache: StickyCache
    sticky_ttl: timedelta | None
    """How long a completion binds its run to this worker (S4); None: sticky routing is off."""
    build_id: str | None
    lease_expires_at: Callable[[str], float | None]
    """When this worker's lease on a task expires (event-loop time); None once not held."""

    def while_leased(
        self, lease: Lease, call: Callable[[], Awaitable[T]], what: str
    ) -> Awaitable[T]:
        """The store call, retried through an outage while this worker's lease holds (issue 13)."""
        return while_leased(call, deadline=lambda: self.lease_expires_at(lease.task_id), what=what)
