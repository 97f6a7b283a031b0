"""Poll idempotency by `poll_request_id` (PROTOCOL.md 2.5, 18.1).

The SDK resends a timed-out poll with the same body; the resend must get the task the first
poll leased, not lease another. The registry remembers which task each poll request leased,
for as long as a lease can last; the store decides whether that lease is still current.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from burrow.server.errors import ApiError
from burrow.store.models import TaskState
from burrow.store.server_queries import TaskLeaseState

PollKey = tuple[str, str, str, str, str]
"""(kind, namespace, task queue, worker id, poll request id)."""

MAX_ENTRIES = 10_000
RETRY_AFTER_SECONDS = 1


class HeldPolls:
    """How many long polls are held now, against a cap (PROTOCOL.md 2.4 backpressure)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    @contextlib.contextmanager
    def hold(self, *, kind: str, task_queue: str) -> Iterator[None]:
        """Hold one poll; 429 `long_poll_capacity_exhausted` (retryable) when at the cap."""
        if self.held >= self.limit:
            raise ApiError(
                429,
                "long_poll_capacity_exhausted",
                f"{self.held} long polls are held; retry shortly",
                task=None,
                poll_status="long_poll_capacity_exhausted",
                task_kind=f"{kind}_task",
                task_queue=task_queue,
                retryable=True,
                retry_after_seconds=RETRY_AFTER_SECONDS,
            )
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1


class PollRegistry:
    """Which task each recent poll request leased (bounded, oldest forgotten first)."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, ttl_seconds: float = 600.0) -> None:
        self._entries: OrderedDict[PollKey, tuple[str, dict[str, Any], float]] = OrderedDict()
        self._max_entries = max_entries
        self._ttl = ttl_seconds

    def leased(self, key: PollKey) -> tuple[str, dict[str, Any]] | None:
        """The task id and task payload this poll request leased before, if remembered."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        task_id, payload, at = entry
        if time.monotonic() - at > self._ttl:
            del self._entries[key]
            return None
        return task_id, payload

    def remember(self, key: PollKey, task_id: str, payload: dict[str, Any]) -> None:
        """Record that this poll request leased `task_id`, answered with `payload`."""
        self._entries[key] = (task_id, payload, time.monotonic())
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    async def redelivered(
        self,
        key: PollKey,
        read_lease: Callable[[str], Awaitable[TaskLeaseState | None]],
        attempt_field: str,
    ) -> dict[str, Any] | None:
        """The task this poll request already leased, while that lease is still current.

        The SDK resends a timed-out poll with the same `poll_request_id` (PROTOCOL.md 2.5);
        `attempt_field` names the payload's attempt, which the current lease must still carry.
        """
        remembered = self.leased(key)
        if remembered is None:
            return None
        task_id, payload = remembered
        lease = await read_lease(task_id)
        if (
            lease is None
            or lease.state != TaskState.LEASED
            or lease.lease_owner != key[3]
            or lease.attempt != payload[attempt_field]
            or (lease.lease_expires_at is not None and lease.lease_expires_at <= lease.now)
        ):
            return None
        return payload
