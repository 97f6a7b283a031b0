"""`Client.create_schedule` and `ScheduleHandle` (issue 30) on a real store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from burrow import Client
from burrow.config import Settings
from burrow.errors import ScheduleAlreadyExists, ScheduleNotFound
from burrow.protocol.schedules import IntervalSpec, OverlapPolicy, ScheduleSpec
from burrow.store import Store
from burrow.store.schedule_models import FireOutcome, ScheduleStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def test_a_schedule_through_its_handle(database_url: str, store: Store) -> None:
    """issue 30: create, describe, pause with a note, resume, trigger, backfill, update, list,
    delete, through the native client."""
    async with Client(store, settings=Settings(database_url=database_url)) as client:
        await exercise(client, store)


async def exercise(client: Client, store: Store) -> None:
    spec = ScheduleSpec(intervals=[IntervalSpec(every="PT1H", offset="PT5M")])
    handle = await client.create_schedule(
        "hourly", "Flow", "c-17", spec=spec, task_queue="q", overlap_policy=OverlapPolicy.ALLOW_ALL
    )
    with pytest.raises(ScheduleAlreadyExists):
        await client.create_schedule("hourly", "Flow", spec=spec, task_queue="q")
    described = await handle.describe(upcoming=3)
    assert described.status is ScheduleStatus.ACTIVE
    assert [t.minute for t in described.next_fire_times] == [5, 5, 5]
    assert described.action.input == {"codec": "avro", "blob": described.action.input["blob"]}

    paused = await handle.pause("maintenance")
    assert (paused.status, paused.note) == (ScheduleStatus.PAUSED, "maintenance")
    assert (await handle.resume()).status is ScheduleStatus.ACTIVE

    fired = await handle.trigger()
    assert fired.outcome is FireOutcome.STARTED and fired.workflow_id.startswith("hourly-")
    run = await store.get_run(namespace="default", workflow_id=fired.workflow_id)
    assert run.run_id == fired.run_id

    filled = await handle.backfill(T0, T0 + timedelta(hours=2))
    assert [f.workflow_id for f in filled] == [
        "hourly-2026-01-01T00:05:00Z",
        "hourly-2026-01-01T01:05:00Z",
    ]
    updated = await handle.update(jitter=timedelta(seconds=30), max_runs=10, note="tuned")
    assert updated.policies.jitter_seconds == 30 and updated.remaining_actions == 7
    assert updated.overlap_policy is OverlapPolicy.ALLOW_ALL

    assert [x.schedule_id for x in await client.list_schedules()] == ["hourly"]
    assert await client.list_schedules(workflow_type="Other") == []
    await handle.delete()
    with pytest.raises(ScheduleNotFound):
        await client.get_schedule_handle("hourly").describe()
