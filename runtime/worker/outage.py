"""Riding out a store outage with work in hand: retry while the lease still holds (issue 13).

A completion, failure or result that meets `StoreUnavailable` is not dropped: the worker still
owns the task until its lease expires, so it retries with a short backoff and the work lands within
about a second of Postgres coming back. Once the lease is gone the task belongs to whoever reclaims
it, and retrying would only be refused by fencing, so the last error is raised.

A retry after a commit whose reply was lost is safe: fencing refuses it, and the durable state
already holds the outcome. Such a refusal is raised as `StaleAfterRetry`, so the log says the
outcome is unconfirmed rather than that the lease was lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from burrow.store import errors as store_errors

log = structlog.get_logger("burrow.worker")
T = TypeVar("T")

FIRST_RETRY_SECONDS = 0.1
MAX_RETRY_SECONDS = 1.0


class StaleAfterRetry(store_errors.StaleLease):
    """Refused as stale on a retry: the try whose reply was lost may well have committed."""


async def while_leased(
    call: Callable[[], Awaitable[T]],
    *,
    deadline: Callable[[], float | None],
    what: str,
) -> T:
    """Run `call`, retrying on `StoreUnavailable` until `deadline()` (event-loop time) passes.

    Args:
        call: The store call; it must be safe to repeat (fenced by the lease token).
        deadline: When the held lease expires, read again before every retry (renewals move it);
            None once the lease is no longer held.
        what: What is being retried, for the log.
    """
    loop = asyncio.get_running_loop()
    delay, attempt = FIRST_RETRY_SECONDS, 1
    while True:
        try:
            return await call()
        except store_errors.StaleLease as exc:
            if attempt == 1:
                raise
            raise StaleAfterRetry(**exc.ids) from exc
        except store_errors.StoreUnavailable as exc:
            expires = deadline()
            left = None if expires is None else expires - loop.time()
            if left is None or left <= 0:
                raise
            pause = min(delay, left)
            log.warning(
                "store_unavailable_retrying",
                what=what,
                attempt=attempt,
                retry_in_seconds=round(pause, 3),
                lease_left_seconds=round(left, 1),
                error=str(exc),
            )
            await asyncio.sleep(pause)
            delay, attempt = min(delay * 2, MAX_RETRY_SECONDS), attempt + 1
