"""A completion's effects as its commands are planned: events, rows, the close, the outcome.

Pure data (store/completion/plan.py fills it in); the statements in statements.py write it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypedDict

from burrow.codec import Payload
from burrow.protocol import commands as cmd
from burrow.protocol.events import Event
from burrow.protocol.shapes import JsonObject
from burrow.store import claims, ready
from burrow.store.children import StartedChild
from burrow.store.history import NewEvent
from burrow.store.message_streams import StreamCursor
from burrow.store.models import ClaimedActivityTask, FencedTask, RunRow, RunStatus
from burrow.store.references import FinishedUpdate
from burrow.store.transactions import Txn


@dataclass(slots=True)
class CompletionOutcome:
    """What a completion did, for its caller (who hears of ready work is decided by notices).

    The caller starts the activities leased to it eagerly and wakes its repair loop for the
    timers started; `workflow_task_created` and the closing fields are for diagnostics and tests.
    """

    workflow_task_created: bool = False
    timers_started: list[datetime] = field(default_factory=list)
    closed_status: RunStatus | None = None
    continued_run_id: str | None = None
    eager_activities: list[ClaimedActivityTask] = field(default_factory=list)
    last_event_seq: int = 0
    """The run's last history sequence once the completion's events are written."""
    last_step_seq: int = 0
    """The run's last step once the completion's commands are written."""
    task: FencedTask | None = None
    """The completed task, from the transactional form (which the server's calls take)."""
    close_policies_pending: bool = False
    """The run closed with children whose close policy the repair pass must now apply."""


class ActivityRow(TypedDict):
    """One scheduled activity: the `activity_tasks` columns a completion writes."""

    task_id: str
    run_id: str
    step_seq: int
    activity_type: str
    activity_execution_id: str
    activity_attempt_id: str
    namespace: str
    connection: str
    queue: str
    build_id: str | None
    arguments: Payload
    retry_policy: JsonObject
    schedule_to_start_seconds: float | None
    start_to_close_seconds: float | None
    schedule_to_close_seconds: float | None
    heartbeat_seconds: float | None
    schedule_to_close_deadline: datetime | None
    session_id: str | None
    worker_session: JsonObject | None


class TimerRow(TypedDict):
    """One started timer: the `timers` columns a completion writes."""

    run_id: str
    step_seq: int
    namespace: str
    fire_at: datetime
    delay_seconds: float


@dataclass(frozen=True, slots=True)
class Closed:
    """How a completion closes its run: the `runs` columns the finish sets."""

    status: RunStatus
    result: Payload | None = None
    failure: JsonObject | None = None
    continued_to_run_id: str | None = None


class NotAtPosition(Exception):
    """The completion could not be written in one statement; nothing was written.

    A stale lease, a run that moved, an event already recorded, or a command that needs the
    transactional path: that path decides what to report.
    """


@dataclass(slots=True)
class Plan:
    """One completion's effects, accumulated before they are written.

    Ready notices are recorded on `txn` as the commands are planned (no I/O: the caller's
    transaction delivers them only if it commits).
    """

    run: RunRow
    task_id: str
    now: datetime
    txn: Txn[object]
    update_task: bool = False
    events: list[NewEvent] = field(default_factory=list)
    outcome: CompletionOutcome = field(default_factory=CompletionOutcome)
    closed: Closed | None = None
    last_step: int = 0
    activity_rows: list[ActivityRow] = field(default_factory=list)
    timer_rows: list[TimerRow] = field(default_factory=list)
    stream_cursors: tuple[StreamCursor, ...] = ()
    """How far the workflow read its message streams; a continue-as-new carries them."""

    def record(self, event: Event, key: str) -> None:
        """Append one event with its once-only key (D3)."""
        self.events.append(NewEvent(event, key))

    def settle(self, last_event_seq: int, next_task: ready.WorkflowTaskRow) -> CompletionOutcome:
        """The outcome once the completion is written; announces the next task if it made one.

        `next_task` is the completion's last SELECT: its `task_id` is NULL when it made none.
        """
        self.outcome.last_event_seq = last_event_seq
        self.outcome.last_step_seq = self.last_step
        if next_task.task_id is not None:
            self.outcome.workflow_task_created = True
            self.txn.notify_workflow_task(next_task)
        return self.outcome


class InTransaction(Protocol):
    """The statements of their own that some commands need, run in the completion's transaction.

    Only the transactional path has them (transactional.py): a command that needs one does not
    fold into the one-statement completions (`plan.foldable`).
    """

    async def cancel_timer(self, plan: Plan, seq: int) -> float | None:
        """Cancel a pending timer started before: its delay, or None if it already fired."""

    async def check_signal(self, plan: Plan, command: cmd.SkipSignal, skipped_key: str) -> None:
        """Refuse a skip of a signal the run did not receive (InvalidCommandReference)."""

    async def finish_update(
        self, plan: Plan, command: cmd.CompleteUpdate | cmd.FailUpdate
    ) -> FinishedUpdate:
        """Record an accepted update's outcome."""

    async def continue_run(self, plan: Plan, command: cmd.ContinueAsNew) -> str:
        """Close the run as continued and create its successor; the new run's id."""

    async def start_child(
        self, plan: Plan, command: cmd.StartChildWorkflow, step: int
    ) -> StartedChild:
        """Create the child's first run (or find the running run of its id in the way)."""

    async def signal_child(
        self, plan: Plan, command: cmd.SignalChildWorkflow, signal_id: str
    ) -> tuple[str, bool]:
        """Signal the child of `command.child_sequence`: its workflow id, and if delivered."""

    async def cancel_child(self, plan: Plan, step: int) -> tuple[str, bool]:
        """Ask the child of `step` to cancel: its workflow id, and if the request was delivered."""

    async def queue_event(self, plan: Plan, event: Event, key: str) -> None:
        """Queue an event in the run's inbox: its next workflow task delivers it (and is made)."""

    async def stop_activity(self, plan: Plan, step: int) -> bool:
        """Ask the queued activity of `step` to stop; True while an attempt of it still runs.

        One that had not started is cancelled and its `ActivityCancelled` queued.
        InvalidCommandReference when that step scheduled no queued activity.
        """

    async def move_condition_timer(self, plan: Plan, old_step: int, new_step: int) -> bool:
        """Move a re-opened wait's timeout to its new step: False if it had none left."""

    async def satisfy_condition_wait(self, plan: Plan, step: int) -> None:
        """Cancel a satisfied wait's timeout (or drop its unseen firing)."""

    async def workflow_stream(self, plan: Plan, directive: cmd.WorkflowStreamDirective) -> None:
        """Append to or end a run output stream (workflow_streams.append / close)."""

    async def upsert_memo(self, plan: Plan, command: cmd.UpsertMemo) -> Payload:
        """Merge the patch into the run's memo: the memo after, in the patch's codec."""

    async def upsert_search_attributes(
        self, plan: Plan, command: cmd.UpsertSearchAttributes
    ) -> tuple[JsonObject, dict[str, str]]:
        """Set the run's named attributes: all it holds after, and the named ones' types."""


def eager_candidates(plan: Plan, eager: claims.EagerClaim | None) -> list[ActivityRow]:
    """The scheduled attempts an eager claim may take: on its queue, of its types, to its limit.

    None when the task closes its run: its work is cancelled with it.
    """
    if eager is None or plan.closed is not None:
        return []
    flt = eager.flt
    wanted = [
        row
        for row in plan.activity_rows
        if row["queue"] == flt.queue
        and row["namespace"] == flt.namespace
        and row["connection"] == flt.connection
        and row["activity_type"] in flt.types
        # M7: the claims' build rule (store/activity_claims.py).
        and (row["build_id"] is None or row["build_id"] == flt.build_id)
    ]
    return wanted[: eager.limit]
