"""Typed rows and answers of the schedule store (issue 30)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from burrow.protocol.schedules import (
    OverlapPolicy,
    ScheduleAction,
    SchedulePolicies,
    ScheduleSpec,
)

__all__ = [
    "FireKind",
    "FireOutcome",
    "NewSchedule",
    "ScheduleDescription",
    "ScheduleEvent",
    "ScheduleEventType",
    "ScheduleFire",
    "ScheduleHistoryPage",
    "ScheduleStatus",
    "ScheduleSummary",
    "ScheduleUpdate",
]


class FireKind(StrEnum):
    """What made a fire: its spec, a trigger, or a backfill."""

    SCHEDULED = "scheduled"
    TRIGGER = "trigger"
    BACKFILL = "backfill"


class FireOutcome(StrEnum):
    """What a fire did (`already_fired`: its fire time was taken before; nothing was done)."""

    STARTED = "started"
    BUFFERED = "buffered"
    SKIPPED = "skipped"
    FAILED = "failed"
    ALREADY_FIRED = "already_fired"


class ScheduleStatus(StrEnum):
    """`completed`: no fire time is left (past `end_at`, or `max_runs` started)."""

    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"


class NewSchedule(BaseModel):
    """A schedule to create; built (and so validated) before any transaction begins."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    schedule_id: str = Field(min_length=1, max_length=128)
    spec: ScheduleSpec
    action: ScheduleAction
    policies: SchedulePolicies = SchedulePolicies()
    memo: dict[str, Any] | None = None
    search_attributes: dict[str, Any] | None = None
    paused: bool = False
    note: str | None = Field(default=None, max_length=1000)


class ScheduleUpdate(BaseModel):
    """Fields to change; None leaves a field as it is. A new spec recomputes the next fire."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: ScheduleSpec | None = None
    action: ScheduleAction | None = None
    overlap_policy: OverlapPolicy | None = None
    catchup_window_seconds: int | None = None
    jitter_seconds: int | None = None
    max_runs: int | None = None
    memo: dict[str, Any] | None = None
    search_attributes: dict[str, Any] | None = None
    note: str | None = Field(default=None, max_length=1000)

    def policies(self, current: SchedulePolicies) -> SchedulePolicies | None:
        """`current` with the policy fields given; None when none is.

        Raises:
            InvalidScheduleSpec: the merged policies cannot work.
        """
        names = ("overlap_policy", "catchup_window_seconds", "jitter_seconds", "max_runs")
        given = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        if not given:
            return None
        return SchedulePolicies.model_validate({**current.model_dump(), **given})


class ScheduleFire(BaseModel):
    """One fire time of a schedule and what it did."""

    model_config = ConfigDict(frozen=True)

    schedule_id: str
    fire_at: datetime
    kind: FireKind
    outcome: FireOutcome
    workflow_id: str
    run_id: str | None = None
    reason: str | None = None


class ScheduleSummary(BaseModel):
    """A schedule as listed: its state and counters, without upcoming or recent fires."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    schedule_id: str
    status: ScheduleStatus
    spec: ScheduleSpec
    action: ScheduleAction
    policies: SchedulePolicies
    memo: dict[str, Any] | None
    search_attributes: dict[str, Any] | None = None
    note: str | None
    paused_at: datetime | None
    next_fire_at: datetime | None
    fires_count: int
    skipped_count: int
    """Fires not started because of the overlap policy or `max_runs`."""
    missed_count: int
    """Fire times found due later than the catch-up window allows: counted, not started."""
    failures_count: int
    buffered_count: int
    last_fired_at: datetime | None
    latest_workflow_id: str | None
    latest_run_id: str | None
    created_at: datetime
    updated_at: datetime

    @property
    def overlap_policy(self) -> OverlapPolicy:
        """The schedule's overlap policy."""
        return self.policies.overlap_policy

    @property
    def remaining_actions(self) -> int | None:
        """Runs left before `max_runs`; None without a limit."""
        limit = self.policies.max_runs
        return None if limit is None else max(0, limit - self.fires_count)


class ScheduleDescription(ScheduleSummary):
    """`describe`: the summary with the next fire times and the latest fires."""

    next_fire_times: list[datetime]
    recent_fires: list[ScheduleFire]


class ScheduleEventType(StrEnum):
    """The kinds of a schedule's audit events (the reference server's names)."""

    CREATED = "ScheduleCreated"
    PAUSED = "SchedulePaused"
    RESUMED = "ScheduleResumed"
    UPDATED = "ScheduleUpdated"
    TRIGGERED = "ScheduleTriggered"
    """A fire (by the spec, a trigger or a backfill) started a run."""
    TRIGGER_SKIPPED = "ScheduleTriggerSkipped"
    """A fire started none: skipped, buffered or failed (`payload.outcome` says which)."""
    DELETED = "ScheduleDeleted"


class ScheduleEvent(BaseModel):
    """One entry of a schedule's audit stream; `sequence` counts from 1 per schedule id."""

    model_config = ConfigDict(frozen=True)

    id: str
    sequence: int
    event_type: ScheduleEventType
    payload: dict[str, Any]
    workflow_id: str | None
    run_id: str | None
    recorded_at: datetime


class ScheduleHistoryPage(BaseModel):
    """Events after a sequence, oldest first; `has_more` when the limit cut the page."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    schedule_id: str
    events: list[ScheduleEvent]
    has_more: bool

    @property
    def next_cursor(self) -> int | None:
        """The `after_sequence` of the next page; None on the last."""
        return self.events[-1].sequence if self.has_more and self.events else None
