"""What the run page shows of one run, read from the store in-process (issue 31).

One history read serves the timeline, the page of history rows and the received signal names;
the run, its open work, sticky binding, memo and search attributes come from `describe`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from burrow.errors import WorkflowNotFoundError
from burrow.server.control_routes import WAIT_REASONS, decoded, status_of
from burrow.store.history import OpenAttempt, StoredEvent
from burrow.store.models import ChildInfo, RunDescription, RunStatus
from burrow.store.workflow_views import ListedRun, RunPlace
from burrow.ui import timeline
from burrow.ui.access import UiCaller, UiRefused

HISTORY_PAGE = 200
SUMMARY_CHARS = 140
_SUMMARY_KEYS = (
    "activity_type",
    "attempt_number",
    "signal_name",
    "update_name",
    "child_workflow_type",
    "child_workflow_instance_id",
    "timer_id",
    "delay_seconds",
    "condition_key",
    "exception_type",
    "message",
    "reason",
    "child_status",
    "retry_backoff_seconds",
    "continued_to_run_id",
    "workflow_type",
)
MAX_CAUSES = 20


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One history table row: the event, a short summary, its payload for the expander."""

    sequence: int
    recorded_at: datetime
    event_type: str
    summary: str
    payload: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """A page of rows after `after_seq`; `next_after` when more follow."""

    rows: list[HistoryRow]
    after_seq: int
    next_after: int | None
    total: int


@dataclass(frozen=True, slots=True)
class RunView:
    """Everything the run page draws."""

    described: RunDescription
    place: RunPlace
    status: str
    wait_reason: str | None
    input: object
    result: object
    causes: list[dict[str, object]]
    timeline: timeline.Timeline
    history: HistoryPage
    chain: list[ListedRun]
    children: list[ChildInfo]
    signal_names: list[str]
    now: datetime
    attempts: dict[int, OpenAttempt]
    """Open activity attempts by step: heartbeat and session holder."""

    @property
    def running(self) -> bool:
        """Whether actions that need an open run apply."""
        return self.described.run.status == RunStatus.RUNNING


def summary(payload: Mapping[str, object]) -> str:
    """A one-line summary of an event's payload: its most telling fields."""
    parts = [f"{key}={payload[key]}" for key in _SUMMARY_KEYS if payload.get(key) is not None]
    text = " ".join(parts)
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def history_page(events: Sequence[StoredEvent], after_seq: int) -> HistoryPage:
    """The rows after `after_seq`, HISTORY_PAGE at most (events are in sequence order)."""
    start = next((n for n, e in enumerate(events) if e.sequence > after_seq), len(events))
    shown = events[start : start + HISTORY_PAGE]
    rows = [
        HistoryRow(e.sequence, e.recorded_at, e.event_type, summary(e.payload), e.payload)
        for e in shown
    ]
    more = start + HISTORY_PAGE < len(events)
    return HistoryPage(rows, after_seq, shown[-1].sequence if more and shown else None, len(events))


def cause_chain(failure: dict[str, object] | None) -> list[dict[str, object]]:
    """The failure and its causes, outermost first (each `cause` is a nested failure)."""
    chain: list[dict[str, object]] = []
    current: object = failure
    while isinstance(current, dict) and len(chain) < MAX_CAUSES:
        chain.append(current)
        current = current.get("cause")
    return chain


def run_uuid(run_id: str) -> str:
    """The run id, if it is a UUID; else the 404 page (no store read for junk)."""
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise UiRefused(404, "Run not found", f"no run {run_id!r} in this namespace") from None
    return run_id


async def load(caller: UiCaller, run_id: str, after_seq: int = 0) -> RunView:
    """The run of `run_id` in the caller's namespace.

    Raises:
        UiRefused: 404 for an unknown run or a run of another namespace.
    """
    missing = UiRefused(404, "Run not found", f"no run {run_id!r} in namespace {caller.namespace}")
    store = caller.state.store
    # One read of the stored rows (no model validation): a 5,000-event run stays fast.
    events = await store.read_stored_history(run_id=run_uuid(run_id))
    if not events or events[0].event_type != "WorkflowStarted":
        raise missing
    workflow_id = str(events[0].payload.get("workflow_instance_id") or "")
    try:
        described = await store.describe_workflow(
            namespace=caller.namespace, workflow_id=workflow_id, run_id=run_id
        )
    except WorkflowNotFoundError:
        raise missing from None
    run = described.run
    place = await store.run_place(run_id=run_id)
    now = datetime.now(UTC)
    attempts = {a.step_seq: a for a in await store.open_attempts(run_id=run_id)}
    chain = await store.workflow_runs(namespace=caller.namespace, workflow_id=run.workflow_id)
    names = sorted(
        {str(e.payload.get("signal_name")) for e in events if e.event_type == "SignalReceived"}
    )
    return RunView(
        described=described,
        place=place,
        status=status_of(run, place.open_state),
        wait_reason=WAIT_REASONS.get(place.wait_kind or ""),
        input=decoded(run.input),
        result=decoded(run.result),
        causes=cause_chain(run.failure),
        timeline=timeline.build(events, now=now, closed_at=run.closed_at),
        history=history_page(events, after_seq),
        chain=chain,
        children=described.children,
        signal_names=names,
        now=now,
        attempts=attempts,
    )


__all__ = [
    "HISTORY_PAGE",
    "HistoryPage",
    "HistoryRow",
    "RunView",
    "cause_chain",
    "history_page",
    "load",
    "run_uuid",
    "summary",
]
