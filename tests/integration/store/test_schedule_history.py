"""A schedule's audit stream in the store (issue 30: "describe with ... recent actions"; the
reference's `GET /api/schedules/{id}/history`): every lifecycle change and every fire, the
repair pass's included, numbered per schedule without gaps or repeats, kept after a delete,
pruned to the latest events."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from burrow.protocol.schedules import IntervalSpec, OverlapPolicy, ScheduleSpec
from burrow.store import Store, schedule_fires, schedule_history
from burrow.store.schedule_models import ScheduleUpdate
from tests.integration.store.test_schedules import create, due_since
from tests.support.store import NS


async def kinds(store: Store, schedule_id: str = "nightly", **page: int) -> list[str]:
    found = await store.schedule_history(namespace=NS, schedule_id=schedule_id, **page)
    assert found is not None
    return [event.event_type.value for event in found.events]


async def test_every_change_and_fire_is_an_event_in_order(store: Store) -> None:
    """Created, paused, resumed, updated, fired by the repair pass, triggered, backfilled,
    deleted: one event each (a fire as Triggered or TriggerSkipped), sequences 1..n."""
    ids = {"namespace": NS, "schedule_id": "nightly"}
    await create(store, overlap_policy=OverlapPolicy.SKIP)
    await store.pause_schedule(**ids, note="why")
    await store.resume_schedule(**ids)
    await store.update_schedule(**ids, update=ScheduleUpdate(note="n", jitter_seconds=0))
    await due_since(store, 2)
    assert await store.transactions.run(lambda txn: schedule_fires.fire_due_schedules(txn)) >= 3
    start = datetime(2026, 1, 1, tzinfo=UTC)
    await store.backfill_schedule(**ids, start=start, end=start.replace(second=2))
    await store.delete_schedule(**ids)

    page = await store.schedule_history(**ids)
    assert page is not None and not page.has_more
    assert [e.sequence for e in page.events] == list(range(1, len(page.events) + 1))
    types = [e.event_type.value for e in page.events]
    assert types[:4] == ["ScheduleCreated", "SchedulePaused", "ScheduleResumed", "ScheduleUpdated"]
    assert types[-1] == "ScheduleDeleted"
    fires = page.events[4:-1]
    # The repair pass: the first due second starts a run, the others are skipped (still open).
    assert [e.payload["kind"] for e in fires][:3] == ["scheduled"] * 3
    assert fires[0].event_type.value == "ScheduleTriggered" and fires[0].run_id is not None
    assert {e.event_type.value for e in fires[1:3]} == {"ScheduleTriggerSkipped"}
    assert [e.payload["kind"] for e in fires[-2:]] == ["backfill", "backfill"]
    assert page.events[3].payload == {"fields": ["jitter_seconds", "note"]}


async def test_a_missing_id_has_no_stream_and_a_recreated_one_continues(store: Store) -> None:
    """None for an id that never existed; a schedule created again after a delete continues
    its numbering; paging after a sequence."""
    assert await store.schedule_history(namespace=NS, schedule_id="never") is None
    await create(store)
    await store.delete_schedule(namespace=NS, schedule_id="nightly")
    await create(store)
    assert await kinds(store) == ["ScheduleCreated", "ScheduleDeleted", "ScheduleCreated"]
    assert await kinds(store, after_sequence=1, limit=1) == ["ScheduleDeleted"]
    page = await store.schedule_history(namespace=NS, schedule_id="nightly", limit=2)
    assert page is not None and page.has_more and page.next_cursor == 2


async def test_concurrent_changes_never_take_a_sequence_twice(store: Store) -> None:
    """Pauses, resumes and triggers at once: each holds the schedule's lock, so the stream has
    one event per change, numbered without gaps."""
    ids = {"namespace": NS, "schedule_id": "nightly"}
    await create(store, spec=ScheduleSpec(intervals=[IntervalSpec(every="PT1H")]))
    calls = [store.pause_schedule(**ids) for _ in range(5)]
    calls += [store.resume_schedule(**ids) for _ in range(5)]
    await asyncio.gather(*calls, store.trigger_schedule(**ids))
    page = await store.schedule_history(**ids)
    assert page is not None
    assert [e.sequence for e in page.events] == list(range(1, 13))


async def test_old_events_are_pruned(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The latest KEEP_EVENTS events of a schedule are kept (pruned every PRUNE_EVERY)."""
    monkeypatch.setattr(schedule_history, "KEEP_EVENTS", 4)
    monkeypatch.setattr(schedule_history, "PRUNE_EVERY", 2)
    ids = {"namespace": NS, "schedule_id": "nightly"}
    await create(store)
    for _ in range(4):
        await store.pause_schedule(**ids)
        await store.resume_schedule(**ids)
    page = await store.schedule_history(**ids)
    assert page is not None
    assert [e.sequence for e in page.events] == [5, 6, 7, 8, 9]  # 1-4 went at 8
