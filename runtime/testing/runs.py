"""Waiting for a run's result and reading its history, for assertions in tests (C5).

A test that waits on `handle.result()` alone learns only "timed out" when a run is stuck; these
helpers say why (the run's status and its open tasks with their last failures), and hand back
history as the typed event models the engine records, so tests assert on fields, not JSON.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from burrow.handle import WorkflowHandle
from burrow.protocol.events import Event, HistoryEvent
from burrow.store.models import RunDescription

R = TypeVar("R")
E = TypeVar("E", bound=Event)

DEFAULT_RESULT_TIMEOUT_SECONDS = 30.0


async def wait_for_result(
    handle: WorkflowHandle[R], *, timeout: timedelta | float = DEFAULT_RESULT_TIMEOUT_SECONDS
) -> R:
    """Wait for the run to close and return its result, typed as the workflow declares it.

    Args:
        handle: The run, e.g. from `burrow_client.start_workflow(MyWorkflow.run, ...)`.
        timeout: How long the run may take.

    Returns:
        The run's result.

    Raises:
        AssertionError: The run is still open after `timeout`; the message shows its status and
            open tasks (attempts, last failure), which usually says what is wrong.
        WorkflowFailureError: The run failed (as from `handle.result()`).
        WorkflowCancelledError: The run was cancelled.
    """
    try:
        return await handle.result(timeout=timeout)
    except TimeoutError:
        raise AssertionError(
            f"workflow {handle.workflow_id} did not close within {timeout}s"
            f" (is a worker serving its task queue?); {_summary(await handle.describe())}"
        ) from None


def _summary(description: RunDescription) -> str:
    run = description.run
    parts = [f"run {run.run_id} is {run.status} on queue {run.task_queue!r}"]
    task = description.workflow_task
    if task is not None:
        parts.append(
            f"workflow task {task.state} attempt {task.attempt}, last failure {task.last_failure}"
        )
    parts += [
        f"activity {a.activity_type} {a.state} attempt {a.attempt_number},"
        f" last failure {a.last_failure}"
        for a in description.activities
    ]
    return "; ".join(parts)


@dataclass(frozen=True)
class RunHistory:
    """A run's recorded events in order, with typed accessors.

    `events` are the records (sequence, recorded_at, workflow task); `of_type(ActivityCompleted)`
    gives the event models of one kind, typed as that kind.
    """

    events: Sequence[HistoryEvent]

    @property
    def event_types(self) -> list[str]:
        """The catalogue names of the events, in order (`["WorkflowStarted", ...]`)."""
        return [record.event_type for record in self.events]

    def of_type(self, kind: type[E]) -> list[E]:
        """The events of one model class (e.g. `ActivityCompleted`), in order."""
        return [record.event for record in self.events if isinstance(record.event, kind)]

    def __iter__(self) -> Iterator[HistoryEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)


async def read_history(handle: WorkflowHandle[R]) -> RunHistory:
    """The history of the handle's run (its latest run when the handle names none)."""
    return RunHistory(await handle.history())
