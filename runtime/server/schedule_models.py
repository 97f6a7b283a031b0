"""Request bodies of the schedule routes and the response shapes (issue 30).

The bodies follow the reference's validation rules (`ScheduleController::storeRules` and
`updateRules`): an unknown overlap policy, a jitter over an hour, `max_runs` below 1 or a note
over 1,000 characters is a 422 `validation_failed` naming the field. A spec that parses but
cannot work (a bad cron expression, time zone or duration) is refused by the schedule core's own
models, with the same 422 shape. The response shapes carry both what the SDK's `Client` reads
(`status`, `fires_count`, `next_fire_at`, `latest_workflow_instance_id`, ...) and the reference's
`state` / `info` blocks and list-item fields (`paused`, `next_fire`, `last_fire`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from burrow.protocol import visibility_values
from burrow.protocol.schedules import ScheduleAction, ScheduleSpec
from burrow.server.worker_models import Envelope
from burrow.store.schedule_models import (
    FireOutcome,
    ScheduleDescription,
    ScheduleFire,
    ScheduleSummary,
)

MAX_MEMO_BYTES = visibility_values.MAX_MEMO_BYTES
"""PROTOCOL.md `limits.max_memo_bytes`: a larger memo is 422 `memo_too_large`."""
DEFAULT_TASK_QUEUE = "default"
"""The queue a fire starts on when the action names none."""

OverlapName = Literal[
    "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"
]
Note = Annotated[str | None, Field(default=None, max_length=1000)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class IntervalBody(_Body):
    """`spec.intervals[]`: `{every, offset?}`, ISO 8601 durations."""

    every: str = Field(min_length=1, max_length=64)
    offset: str | None = Field(default=None, max_length=64)


class SpecBody(_Body):
    """`spec`: cron expressions and intervals in a time zone (the SDK's `ScheduleSpec`)."""

    cron_expressions: list[str] | None = None
    intervals: list[IntervalBody] | None = None
    timezone: str | None = Field(default=None, max_length=64)
    start_at: str | None = None
    end_at: str | None = None

    def spec(self) -> ScheduleSpec:
        """The schedule core's spec (InvalidScheduleSpec: one that cannot work)."""
        return ScheduleSpec.model_validate(self.model_dump(exclude_none=True))


class ActionBody(_Body):
    """`action`: the workflow start each fire makes (the SDK's `ScheduleAction`)."""

    workflow_type: str | None = Field(default=None, min_length=1, max_length=255)
    task_queue: str | None = Field(default=None, min_length=1, max_length=255)
    input: Envelope | None = None
    execution_timeout_seconds: int | None = Field(default=None, ge=1)
    run_timeout_seconds: int | None = Field(default=None, ge=1)
    workflow_execution_timeout: int | None = Field(default=None, ge=1)
    workflow_run_timeout: int | None = Field(default=None, ge=1)

    def given(self) -> dict[str, Any]:
        """The fields given, named as the schedule core names them."""
        fields: dict[str, Any] = {
            "workflow_type": self.workflow_type,
            "task_queue": self.task_queue,
            "input": None if self.input is None else self.input.model_dump(),
            "execution_timeout_seconds": self.execution_timeout_seconds
            or self.workflow_execution_timeout,
            "run_timeout_seconds": self.run_timeout_seconds or self.workflow_run_timeout,
        }
        return {name: value for name, value in fields.items() if value is not None}

    def action(self, current: ScheduleAction | None = None) -> ScheduleAction:
        """The action: these fields over `current`'s (an update merges, as the reference does)."""
        base: dict[str, Any] = {"task_queue": DEFAULT_TASK_QUEUE}
        if current is not None:
            base = current.model_dump()
        return ScheduleAction.model_validate({**base, **self.given()})


class NewScheduleBody(_Body):
    """`POST /api/schedules`."""

    schedule_id: str | None = Field(default=None, min_length=1, max_length=128)
    spec: SpecBody
    action: ActionBody
    overlap_policy: OverlapName | None = None
    jitter_seconds: int | None = Field(default=None, ge=0, le=3600)
    max_runs: int | None = Field(default=None, ge=1)
    memo: dict[str, Any] | None = None
    search_attributes: dict[str, Any] | None = None
    paused: bool | None = None
    note: Note = None


class ScheduleUpdateBody(_Body):
    """`PUT /api/schedules/{id}`: the fields given change, the others stay."""

    spec: SpecBody | None = None
    action: ActionBody | None = None
    overlap_policy: OverlapName | None = None
    jitter_seconds: int | None = Field(default=None, ge=0, le=3600)
    max_runs: int | None = Field(default=None, ge=1)
    memo: dict[str, Any] | None = None
    search_attributes: dict[str, Any] | None = None
    note: Note = None


class NoteBody(_Body):
    """`POST .../pause` and `.../resume`."""

    note: Note = None


class TriggerBody(_Body):
    """`POST .../trigger`: an overlap policy for this fire only."""

    overlap_policy: OverlapName | None = None


class BackfillBody(_Body):
    """`POST .../backfill`: every fire time in `[start_time, end_time)`."""

    start_time: str = Field(min_length=1)
    end_time: str = Field(min_length=1)
    overlap_policy: OverlapName | None = None


def _time(value: object) -> str | None:
    return None if value is None else str(value)


def summary_body(summary: ScheduleSummary) -> dict[str, Any]:
    """A schedule as `GET /api/schedules` lists it (and the base of its description)."""
    dumped = summary.model_dump(mode="json")
    policies = summary.policies
    paused = summary.paused_at is not None
    return {
        "schedule_id": summary.schedule_id,
        "namespace": summary.namespace,
        "status": summary.status.value,
        "workflow_type": summary.action.workflow_type,
        "paused": paused,
        "spec": summary.spec.model_dump(mode="json", exclude_none=True),
        "action": summary.action.model_dump(mode="json", exclude_none=True),
        "overlap_policy": policies.overlap_policy.value,
        "catchup_window_seconds": policies.catchup_window_seconds,
        "jitter_seconds": policies.jitter_seconds,
        "max_runs": policies.max_runs,
        "remaining_actions": summary.remaining_actions,
        "note": summary.note,
        "memo": summary.memo,
        "search_attributes": summary.search_attributes,
        "fires_count": summary.fires_count,
        "failures_count": summary.failures_count,
        "next_fire_at": dumped["next_fire_at"],
        "next_fire": dumped["next_fire_at"],
        "last_fired_at": dumped["last_fired_at"],
        "last_fire": dumped["last_fired_at"],
        "latest_workflow_instance_id": summary.latest_workflow_id,
        "latest_run_id": summary.latest_run_id,
        "paused_at": dumped["paused_at"],
        "created_at": dumped["created_at"],
        "updated_at": dumped["updated_at"],
    }


def fire_body(fire: ScheduleFire) -> dict[str, Any]:
    """One fire as the description's `info.recent_actions` and a backfill's `results` show it."""
    body: dict[str, Any] = {
        "fire_time": fire.fire_at.isoformat().replace("+00:00", "Z"),
        "kind": fire.kind.value,
        "outcome": fire.outcome.value,
        "workflow_id": fire.workflow_id,
        "run_id": fire.run_id,
        "reason": fire.reason,
    }
    return {name: value for name, value in body.items() if value is not None}


def description_body(description: ScheduleDescription) -> dict[str, Any]:
    """`GET /api/schedules/{id}`: the summary, the reference's `state` and `info`, next fires."""
    body = summary_body(description)
    skips = [f for f in description.recent_fires if f.outcome is FireOutcome.SKIPPED]
    last_skip = skips[0] if skips else None
    body["state"] = {
        "status": description.status.value,
        "paused": body["paused"],
        "note": description.note,
    }
    body["info"] = {
        "fires_count": description.fires_count,
        "failures_count": description.failures_count,
        "skipped_trigger_count": description.skipped_count,
        "missed_count": description.missed_count,
        "buffered_count": description.buffered_count,
        "last_skip_reason": None if last_skip is None else last_skip.reason,
        "last_skipped_at": None if last_skip is None else _time(last_skip.fire_at.isoformat()),
        "next_fire_times": [
            t.isoformat().replace("+00:00", "Z") for t in description.next_fire_times
        ],
        "recent_actions": [fire_body(f) for f in description.recent_fires],
    }
    return body


def trigger_body(fire: ScheduleFire) -> dict[str, Any]:
    """`POST .../trigger`: the reference's outcomes `triggered`, `buffered`, `skipped`, `failed`."""
    ids = {"schedule_id": fire.schedule_id}
    match fire.outcome:
        case FireOutcome.STARTED:
            return {
                **ids,
                "outcome": "triggered",
                "workflow_id": fire.workflow_id,
                "run_id": fire.run_id,
            }
        case FireOutcome.BUFFERED:
            return {**ids, "outcome": "buffered", "workflow_id": fire.workflow_id}
        case FireOutcome.ALREADY_FIRED:
            reason = f"this second's fire ({fire.workflow_id}) was taken already"
            return {**ids, "outcome": "skipped", "reason": reason}
        case FireOutcome.FAILED:
            return {**ids, "outcome": "failed", "reason": fire.reason}
    return {**ids, "outcome": "skipped", "reason": fire.reason}
