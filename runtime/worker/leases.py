"""The lease keeper: renews every lease this worker holds and reports the ones it lost (W7)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import structlog
from structlog.contextvars import bound_contextvars

from burrow.store import Store
from burrow.store import errors as store_errors
from burrow.store.models import Lease

log = structlog.get_logger("burrow.worker")


class LeaseKeeper:
    """Holds the leases of running tasks and renews them every third of the lease.

    Workflow and activity leases are renewed in one transaction. An activity lease the store no
    longer honours (expired and reclaimed elsewhere) runs its `on_lost` callback, which cancels
    the attempt: its outcome would be refused anyway (fencing). One whose outcome the store
    already recorded under that lease is not lost: the attempt's own write says so.

    It also knows when each held lease expires (on the event loop's clock, counted from before
    the claim or renewal that set it), so work in hand can retry through a store outage until then.
    """

    def __init__(self, *, store: Store, worker_id: str, lease: timedelta) -> None:
        self.store = store
        self.worker_id = worker_id
        self.lease = lease
        self._workflow: dict[str, Lease] = {}
        self._activity: dict[str, tuple[Lease, Callable[[], object]]] = {}
        self._expires: dict[str, float] = {}

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def hold_workflow(self, lease: Lease) -> None:
        """Renew this workflow task lease until it is released."""
        self._workflow[lease.task_id] = lease
        self._expires[lease.task_id] = self._now() + self.lease.total_seconds()

    def hold_activity(self, lease: Lease, on_lost: Callable[[], object]) -> None:
        """Renew this activity lease until it is released; `on_lost` if the store refuses it."""
        self._activity[lease.task_id] = (lease, on_lost)
        self._expires[lease.task_id] = self._now() + self.lease.total_seconds()

    def expires_at(self, task_id: str) -> float | None:
        """When the held lease of a task expires (event-loop time); None if not held."""
        return self._expires.get(task_id)

    def release(self, task_id: str) -> None:
        """Stop renewing a task's lease (it completed, failed or was handed back)."""
        self._workflow.pop(task_id, None)
        self._activity.pop(task_id, None)
        self._expires.pop(task_id, None)

    async def run(self) -> None:
        """Renew held leases forever, every third of the lease duration.

        During a store outage it retries every second (at most every third of the lease), so
        leases are renewed as soon as the store is back.
        """
        interval = self.lease.total_seconds() / 3
        pause = interval
        while True:
            await asyncio.sleep(pause)
            try:
                await self.renew_once()
                pause = interval
            except store_errors.StoreUnavailable as exc:
                log.warning("lease_renewal_unavailable", worker_id=self.worker_id, error=str(exc))
                pause = min(interval, 1.0)

    async def renew_once(self) -> None:
        """One renewal of every held lease; cancels activities whose lease was lost."""
        activity = {task_id: lease for task_id, (lease, _) in self._activity.items()}
        if not activity and not self._workflow:
            return
        started = self._now()
        renewal = await self.store.renew_leases(
            workflow=list(self._workflow.values()),
            activity=list(activity.values()),
            lease=self.lease,
        )
        for task_id in renewal.workflow | renewal.activity:
            if task_id in self._expires:  # still held here (not released while renewing)
                self._expires[task_id] = started + self.lease.total_seconds()
        for task_id, lease in activity.items():
            current = self._activity.get(task_id)
            if task_id in renewal.activity or current is None or current[0] != lease:
                continue  # renewed, or finished while the renewal ran
            if task_id in renewal.recorded:
                # Its outcome is written (a try whose reply was lost, or one that just
                # committed): not lost. The write in hand learns `already_recorded`.
                continue
            with bound_contextvars(task_id=task_id, run_id=lease.run_id, worker_id=self.worker_id):
                log.warning("activity_lease_lost")
            current[1]()
