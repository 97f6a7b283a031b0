"""ActivityHandle: one standalone activity (`Client.start_activity`) to await or cancel.

The activity runs on an ordinary activity worker and is anchored by a host run of the same id
(store/standalone.py), so waiting is the host run's wait, with the activity's result type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from burrow.errors import WorkflowNotFoundError
from burrow.handle import WorkflowHandle
from burrow.store.standalone import StandaloneActivityInfo

if TYPE_CHECKING:
    from burrow.client import Client

R = TypeVar("R")


@dataclass
class _HostRunHandle(WorkflowHandle[R]):
    """The host run of a standalone activity: its result typed as the activity's."""

    result_hint: object = Any

    def _result_type(self) -> object:
        return self.result_hint


@dataclass
class ActivityHandle(Generic[R]):
    """A standalone activity (`Client.start_activity`); `result()` returns an `R`.

    The activity runs on an ordinary activity worker of its queue, anchored by a host run of
    the same id (PROTOCOL.md 17): waiting, cancelling and terminating are the host run's.
    """

    client: Client
    activity_id: str
    run_id: str | None = None
    """The host run; None: the latest run of the activity id."""
    activity_type: str = ""
    result_hint: object = field(default=Any, repr=False)
    _started_at: float | None = field(default=None, repr=False, compare=False)
    _notify_queue: str | None = field(default=None, repr=False, compare=False)

    def _host(self) -> _HostRunHandle[R]:
        return _HostRunHandle(
            self.client,
            self.activity_id,
            run_id=self.run_id,
            result_hint=self.result_hint,
            _started_at=self._started_at,
            _notify_queue=self._notify_queue,
        )

    async def describe(self) -> StandaloneActivityInfo:
        """The activity's status, attempts, result or failure, as the store has them now.

        Raises:
            WorkflowNotFoundError: no standalone activity has this id in the namespace.
        """
        found = await self.client.store.describe_activity(
            namespace=self.client.namespace, activity_id=self.activity_id
        )
        if found is None:
            raise WorkflowNotFoundError(
                namespace=self.client.namespace, workflow_id=self.activity_id
            )
        return found

    async def result(self, *, timeout: timedelta | float | None = None) -> R:
        """Wait for the activity to close and return its result.

        Raises:
            WorkflowFailureError: it failed for good (retries spent, non-retryable, or timed
                out); `cause` is the activity's error, rebuilt.
            WorkflowCancelledError: it was cancelled.
            WorkflowTerminatedError: it was terminated.
            TimeoutError: it is still open after `timeout`.
        """
        host = self._host()
        self._started_at = None  # the first wait's shortcut is used once
        return await host.result(timeout=timeout, follow_runs=False)

    async def cancel(self, *, reason: str = "") -> None:
        """Close the activity as cancelled now, as the HTTP control plane's cancel does.

        An attempt not yet claimed never runs; a running one is asked to stop (its worker
        learns at its next heartbeat) and its outcome is ignored.
        """
        await self.client.store.cancel_workflow_now(
            namespace=self.client.namespace,
            workflow_id=self.activity_id,
            run_id=self.run_id,
            reason=reason,
        )

    async def terminate(self, *, reason: str = "") -> None:
        """Close the activity now; a running attempt's result is then ignored."""
        await self._host().terminate(reason=reason)
