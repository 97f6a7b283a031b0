"""Which failed histories a redrive can continue (the Durable Workflow package's
FailedRunRedrivePlan, PROTOCOL.md 17): a history of activity steps 1..n whose step n failed and
whose earlier steps completed; any other names the reason it cannot be continued."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from burrow.protocol import events as ev
from burrow.store.workflow_commands import CommandRefused, redrive_plan

RUN = "85c632cf-bfbb-4669-a7d4-09e38cfeebf0"
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def _step(event_type: str, step: int, **extra: Any) -> tuple[str, dict[str, Any]]:
    common = {"activity_execution_id": f"{RUN}:{step}", "activity_type": "greet", "sequence": step}
    attempt = {"activity_attempt_id": f"a{step}", "attempt_number": 1}
    if event_type == "ActivityScheduled":
        spec = {"activity_type": "greet", "queue": "q1", "arguments": {"codec": "avro", "blob": ""}}
        return event_type, {**common, "workflow_task_id": "t", "activity": spec, **extra}
    if event_type == "ActivityCompleted":
        return event_type, {**common, **attempt, "result": "x", "payload_codec": "avro", **extra}
    return event_type, {**common, **attempt, "exception_type": "E", "message": "no", **extra}


STARTED = (
    "WorkflowStarted",
    {"workflow_type": "greeter", "workflow_instance_id": "wf", "workflow_run_id": RUN},
)
FAILED = ("WorkflowFailed", {"exception_type": "E", "message": "no"})


def _history(*records: tuple[str, dict[str, Any]]) -> list[ev.HistoryEvent]:
    return [
        ev.HistoryEvent.from_record(
            run_id=RUN, sequence=n, event_type=kind, payload=payload, recorded_at=WHEN
        )
        for n, (kind, payload) in enumerate(records, start=1)
    ]


def test_the_completed_steps_before_the_failed_one_are_reused() -> None:
    """Steps 1-2 completed, step 3 failed: the plan resumes at 3 with 1-2's schedule and result."""
    plan = redrive_plan(
        RUN,
        _history(
            STARTED,
            *(
                _step(kind, n)
                for n in (1, 2)
                for kind in ("ActivityScheduled", "ActivityCompleted")
            ),
            _step("ActivityScheduled", 3),
            _step("ActivityFailed", 3),
            FAILED,
        ),
    )
    assert plan.resume_step == 3
    assert [(r.event_type, r.event.to_json()["sequence"]) for r in plan.reused] == [
        ("ActivityScheduled", 1),
        ("ActivityCompleted", 1),
        ("ActivityScheduled", 2),
        ("ActivityCompleted", 2),
    ]


@pytest.mark.parametrize(
    ("records", "reason"),
    [
        ([STARTED, FAILED], "unrecorded_failure_boundary"),
        (
            [STARTED, _step("ActivityScheduled", 1), _step("ActivityCompleted", 1), FAILED],
            "unrecorded_failure_boundary",
        ),
        (
            [STARTED, _step("ActivityScheduled", 2), _step("ActivityFailed", 2), FAILED],
            "activity_sequence_gap",
        ),
        (
            [
                STARTED,
                _step("ActivityScheduled", 1),
                _step("ActivityScheduled", 2),
                _step("ActivityFailed", 2),
                FAILED,
            ],
            "incomplete_activity_prefix",
        ),
        (
            [
                STARTED,
                _step("ActivityScheduled", 1, execution_mode="local", local_activity=True),
                _step("ActivityFailed", 1),
                FAILED,
            ],
            "unsupported_local_activity",
        ),
        (
            [
                STARTED,
                ("SideEffectRecorded", {"sequence": 1, "result": "x", "payload_codec": "avro"}),
                FAILED,
            ],
            "unsupported_history",
        ),
        (
            [STARTED, _step("ActivityScheduled", 1), _step("ActivityFailed", 1)],
            "missing_terminal_history",
        ),
    ],
)
def test_other_histories_are_refused_with_a_reason(
    records: list[tuple[str, dict[str, Any]]], reason: str
) -> None:
    """Each history a redrive cannot continue names why, as the reference's plan does."""
    with pytest.raises(CommandRefused) as refused:
        redrive_plan(RUN, _history(*records))
    assert refused.value.reason == reason
