"""Worker sessions in workflow code: options, wire snapshot, the command replay emits (W4)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from burrow import App, activity, codec, workflow
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.shapes import SessionSpec
from burrow.replay.instance import RunContext
from burrow.store.models import HistoryEvent
from burrow.testing.helpers import replay_history

GPU = "gpu:nvidia-l4"
RUN = RunContext(
    run_id="00000000-0000-4000-8000-000000000001",
    workflow_id="render-1",
    workflow_type="Render",
    namespace="default",
    task_queue="main",
    input=dict(codec.encode(["video-1"])),
)


@activity.defn
async def render_frames(video_id: str) -> str:
    return f"/frames/{video_id}"


@activity.defn
async def assemble(path: str) -> str:
    return f"{path}/manifest"


@workflow.defn(name="Render")
class Render:
    @workflow.run
    async def run(self, video_id: str) -> str:
        session = workflow.worker_session(
            "gpu-render",
            workflow.WorkerSessionOptions(
                queue="gpu-activities", requirements=[GPU], lease_seconds=60, ttl_seconds=600
            ),
        )
        frames = await session.activity(render_frames, video_id)
        return await session.activity(assemble, frames, queue="gpu-other")


@workflow.defn(name="RenderElsewhere")
class RenderElsewhere:
    @workflow.run
    async def run(self, video_id: str) -> str:
        session = workflow.worker_session("gpu-render")
        return await session.activity(render_frames, video_id, queue="gpu-other")


APP = App(
    task_queue="main", workflows=[Render, RenderElsewhere], activities=[render_frames, assemble]
)


def _started() -> list[HistoryEvent]:
    started = ev.WorkflowStarted(
        workflow_type="Render", workflow_run_id=RUN.run_id, workflow_instance_id=RUN.workflow_id
    )
    return [
        HistoryEvent(
            run_id=RUN.run_id,
            sequence=1,
            event=started,
            recorded_at=datetime.now(UTC),
            workflow_task_id="00000000-0000-4000-8000-000000000002",
        )
    ]


def test_w4_the_snapshot_has_the_protocol_shape_and_defaults() -> None:
    options = workflow.WorkerSessionOptions(queue="gpu-activities", requirements=[GPU])
    assert options.snapshot("gpu-render").to_json() == {
        "session_id": "gpu-render",
        "queue": "gpu-activities",
        "requirements": [GPU],
        "lease_seconds": 120,
        "ttl_seconds": 1800,
        "max_concurrent_activities": 1,
        "create_if_missing": True,
        "allow_reacquire_after_failure": True,
    }


@pytest.mark.parametrize(
    ("session_id", "options", "field"),
    [
        ("", {}, "session_id"),
        ("s", {"lease_seconds": 0}, "lease_seconds"),
        ("s", {"ttl_seconds": -1}, "ttl_seconds"),
        ("s", {"max_concurrent_activities": 0}, "max_concurrent_activities"),
        ("s", {"requirements": [" "]}, "requirements"),
    ],
)
def test_w4_invalid_session_options_raise_value_error_naming_the_field(
    session_id: str, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        workflow.worker_session(session_id, workflow.WorkerSessionOptions(**options))


def test_w4_schedule_activity_carries_worker_session_on_the_wire() -> None:
    wire = {
        "type": "schedule_activity",
        "activity_type": "media.render-frames",
        "queue": "gpu-activities",
        "arguments": dict(codec.encode(["v"])),
        "worker_session": {
            "session_id": "gpu-render",
            "queue": "gpu-activities",
            "requirements": [GPU],
            "lease_seconds": 120,
            "ttl_seconds": 1800,
            "max_concurrent_activities": 1,
            "create_if_missing": True,
            "allow_reacquire_after_failure": True,
        },
    }
    parsed = cmd.parse_command(wire)
    assert isinstance(parsed, cmd.ScheduleActivity)
    assert parsed.worker_session == SessionSpec(
        session_id="gpu-render", queue="gpu-activities", requirements=[GPU]
    )
    assert parsed.to_json()["worker_session"] == wire["worker_session"]
    with pytest.raises(cmd.InvalidCommand):
        cmd.parse_command({**wire, "worker_session": {"session_id": "x", "color": "red"}})


def test_w4_session_activities_replay_to_commands_with_the_snapshot() -> None:
    [first] = replay_history(APP, RUN, _started())
    assert isinstance(first, cmd.ScheduleActivity)
    assert first.activity_type == "render_frames"
    assert first.queue == "gpu-activities"  # the session's queue routes it
    assert first.worker_session == SessionSpec(
        session_id="gpu-render",
        queue="gpu-activities",
        requirements=[GPU],
        lease_seconds=60,
        ttl_seconds=600,
    )


def test_w4_a_call_s_queue_overrides_the_session_s() -> None:
    elsewhere = dataclasses.replace(RUN, workflow_type="RenderElsewhere")
    [command] = replay_history(APP, elsewhere, _started())
    assert isinstance(command, cmd.ScheduleActivity)
    assert command.queue == "gpu-other"
    assert command.worker_session == SessionSpec(session_id="gpu-render")
