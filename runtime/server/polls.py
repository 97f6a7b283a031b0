"""Held-poll capacity and poll idempotency by `poll_request_id` (PROTOCOL.md 2.4, 2.5, 18.1).

The SDK resends a timed-out poll with the same body; the resend must get the task the first
poll leased, not lease another. The registry remembers which task each poll request leased and
the answer less its payloads (history, arguments): a resend has those read from the store again,
so no leased task's payload stays in this process (400 leases of 1.3 MB inputs held 500 MB).
An entry goes once its lease is no longer current, when RESEND_WINDOW_SECONDS have passed, or
when MAX_ENTRIES newer ones push it out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass

from burrow.server.api_errors import ApiError
from burrow.store.models import TaskState
from burrow.store.server_queries import TaskLeaseState

PollKey = tuple[str, str, str, str, str]
"""(kind, namespace, task queue, worker id, poll request id)."""
Answer = dict[str, object]
"""A poll's `task` as sent."""

MAX_ENTRIES = 10_000
# The SDK resends within its HTTP timeout (the poll's timeout + 5 s, at most 65 s) and a few
# transport retries: an older entry is never asked for again.
RESEND_WINDOW_SECONDS = 120.0
RETRY_AFTER_SECONDS = 1
# Claims running at once: fewer than the store's pool (10 connections), so a claim waits for
# its turn here, where the wait is bounded by its poll's deadline (longpoll.in_time), rather
# than in the pool's queue, where it is not; and completions keep connections to run on.
CLAIMS_AT_ONCE = 8


QueueKey = tuple[str, str]
"""(namespace, task queue)."""


@dataclass(frozen=True, slots=True)
class QueuePolls:
    """One queue's held polls now, and its polls refused at the cap since the process started."""

    held: int
    refused: int


class HeldPolls:
    """Long polls held now against a cap (PROTOCOL.md 2.4 backpressure), and the claim slots.

    The cap is this process's, shared by every queue; the per-queue counts feed the task-queue
    view's throttling figures (M8). Refusals count from process start (not kept across restarts).
    """

    def __init__(self, limit: int, *, claims_at_once: int = CLAIMS_AT_ONCE) -> None:
        self.limit = limit
        self.held = 0
        self.claim_slots = asyncio.Semaphore(claims_at_once)
        self._held_by_queue: Counter[QueueKey] = Counter()
        self._refused_by_queue: Counter[QueueKey] = Counter()

    @contextlib.contextmanager
    def hold(self, *, kind: str, task_queue: str, namespace: str = "default") -> Iterator[None]:
        """Hold one poll; 429 `long_poll_capacity_exhausted` (retryable) when at the cap."""
        key = (namespace, task_queue)
        if self.held >= self.limit:
            self._refused_by_queue[key] += 1
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
        self._held_by_queue[key] += 1
        try:
            yield
        finally:
            self.held -= 1
            self._held_by_queue[key] -= 1
            if not self._held_by_queue[key]:
                del self._held_by_queue[key]

    def of(self, namespace: str, task_queue: str) -> QueuePolls:
        """One queue's figures (zeros for a queue never polled here)."""
        key = (namespace, task_queue)
        return QueuePolls(self._held_by_queue[key], self._refused_by_queue[key])

    def queues(self, namespace: str) -> dict[str, QueuePolls]:
        """The figures of every queue of `namespace` polled in this process, by queue."""
        names = {q for ns, q in (*self._held_by_queue, *self._refused_by_queue) if ns == namespace}
        return {name: self.of(namespace, name) for name in sorted(names)}


@dataclass(frozen=True, slots=True)
class Leased:
    """What a poll request leased: enough to answer its resend from the store."""

    task_id: str
    attempt: object
    """What the lease must still carry: the attempt number, or the activity attempt id."""
    answer: Answer
    """The answer as sent, less its payload fields."""
    history_through: int
    """The last history sequence the answer carried (0 when it carries none)."""
    at: float


ReadLease = Callable[[str], Awaitable[TaskLeaseState | None]]
Refill = Callable[[Leased], Awaitable[Answer | None]]


class PollRegistry:
    """Which task each recent poll request leased (bounded by count and age)."""

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        ttl_seconds: float = RESEND_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries: OrderedDict[PollKey, Leased] = OrderedDict()
        self._max_entries = max_entries
        self._ttl = ttl_seconds
        self._clock = clock

    def __len__(self) -> int:
        return len(self._entries)

    def remember(
        self,
        key: PollKey,
        *,
        task_id: str,
        attempt: object,
        answer: Answer,
        payloads: Collection[str],
        history_through: int = 0,
    ) -> None:
        """Record that this poll request leased `task_id`; `payloads` are left out of `answer`."""
        now = self._clock()
        kept = {name: value for name, value in answer.items() if name not in payloads}
        self._entries[key] = Leased(task_id, attempt, kept, history_through, now)
        self._entries.move_to_end(key)
        # Oldest first: forget the entries past the resend window, then any over the count.
        while self._entries:
            oldest = next(iter(self._entries.values()))
            if now - oldest.at <= self._ttl and len(self._entries) <= self._max_entries:
                break
            self._entries.popitem(last=False)

    def leased(self, key: PollKey) -> Leased | None:
        """What this poll request leased, if remembered and within the resend window."""
        entry = self._entries.get(key)
        if entry is not None and self._clock() - entry.at > self._ttl:
            del self._entries[key]
            return None
        return entry

    async def redelivered(
        self,
        key: PollKey,
        read_lease: ReadLease,
        current_attempt: Callable[[TaskLeaseState], object],
        refill: Refill,
    ) -> Answer | None:
        """The task this poll request already leased, while that lease is still current.

        The SDK resends a timed-out poll with the same `poll_request_id` (PROTOCOL.md 2.5).
        `current_attempt` reads the lease's attempt, which must be the one answered; `refill`
        reads the payloads again. A lease no longer current is forgotten.
        """
        entry = self.leased(key)
        if entry is None:
            return None
        lease = await read_lease(entry.task_id)
        if (
            lease is None
            or not _is_current(lease, worker_id=key[3])
            or current_attempt(lease) != entry.attempt
        ):
            self._entries.pop(key, None)
            return None
        return await refill(entry)


def _is_current(lease: TaskLeaseState, worker_id: str) -> bool:
    return (
        lease.state == TaskState.LEASED
        and lease.lease_owner == worker_id
        and (lease.lease_expires_at is None or lease.lease_expires_at > lease.now)
    )
