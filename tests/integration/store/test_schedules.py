"""Schedules in the store (issue 30): exactly-once fires under concurrent repair passes,
overlap policies, catch-up after downtime, pause/resume/trigger/backfill, refusals."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from burrow.errors import InvalidScheduleSpec, ScheduleAlreadyExists, ScheduleNotFound
from burrow.protocol.schedules import (
    IntervalSpec,
    OverlapPolicy,
    ScheduleAction,
    SchedulePolicies,
    ScheduleSpec,
    jitter_for,
)
from burrow.store import Store, schedule_fires
from burrow.store import schema as s
from burrow.store.schedule_models import (
    FireOutcome,
    NewSchedule,
    ScheduleStatus,
    ScheduleUpdate,
)
from tests.support.store import NS, QUEUE, blob, db_now, execute

ACTION = ScheduleAction(workflow_type="Flow", task_queue=QUEUE, input=blob())
EVERY_SECOND = ScheduleSpec(intervals=[IntervalSpec(every="PT1S")])
EVERY_MINUTE = ScheduleSpec(intervals=[IntervalSpec(every="PT1M")])
T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def create(
    store: Store,
    schedule_id: str = "nightly",
    spec: ScheduleSpec = EVERY_SECOND,
    **policies: Any,
) -> None:
    await store.create_schedule(
        NewSchedule(
            namespace=NS,
            schedule_id=schedule_id,
            spec=spec,
            action=ACTION,
            policies=SchedulePolicies(**policies),
        )
    )


async def due_since(store: Store, seconds: int, schedule_id: str = "nightly") -> datetime:
    """Move the schedule's next fire `seconds` into the past, as after downtime."""
    now = await db_now(store)
    at: datetime = now.replace(microsecond=0) - timedelta(seconds=seconds)
    await execute(
        store,
        "UPDATE schedules SET next_fire_at = :at, next_due_at = :at WHERE schedule_id = :id",
        at=at,
        id=schedule_id,
    )
    return at


async def table(store: Store, t: sa.Table) -> list[dict[str, Any]]:
    async with store.engine.connect() as conn:
        return [dict(r._mapping) for r in (await conn.execute(sa.select(t))).all()]


async def scheduled_runs(store: Store, schedule_id: str = "nightly") -> list[dict[str, Any]]:
    r = s.runs.c
    async with store.engine.connect() as conn:
        found = await conn.execute(
            sa.select(r.workflow_id, r.run_id, r.status, r.cancel_requested)
            .where(r.workflow_id.like(f"{schedule_id}-%"))
            .order_by(r.workflow_id)
        )
        return [dict(row._mapping) for row in found.all()]


async def everything(store: Store) -> tuple[list[dict[str, Any]], ...]:
    return (
        await table(store, s.schedules),
        await table(store, s.schedule_fires),
        await table(store, s.runs),
    )


async def test_create_describe_and_list_with_next_fire_times(store: Store) -> None:
    """issue 30: describe shows the next fire times; list pages by schedule id."""
    spec = ScheduleSpec(cron_expressions=["0 9 * * *"], timezone="Europe/Paris")
    await create(store, "b-daily", spec)
    await create(store, "a-second")
    described = await store.describe_schedule(namespace=NS, schedule_id="b-daily", upcoming=3)
    assert described.status is ScheduleStatus.ACTIVE
    assert len(described.next_fire_times) == 3
    assert described.next_fire_times[0] == described.next_fire_at
    assert all(t.astimezone(spec.zone).hour == 9 for t in described.next_fire_times)
    assert described.recent_fires == [] and described.fires_count == 0
    listed = await store.list_schedules(namespace=NS)
    assert [x.schedule_id for x in listed] == ["a-second", "b-daily"]
    page = await store.list_schedules(namespace=NS, after_schedule_id="a-second")
    assert [x.schedule_id for x in page] == ["b-daily"]
    assert await store.list_schedules(namespace="other") == []
    await store.pause_schedule(namespace=NS, schedule_id="b-daily")
    paused = await store.list_schedules(namespace=NS, status=ScheduleStatus.PAUSED)
    active = await store.list_schedules(namespace=NS, status=ScheduleStatus.ACTIVE)
    assert [x.schedule_id for x in paused] == ["b-daily"]
    assert [x.schedule_id for x in active] == ["a-second"]
    assert await store.list_schedules(namespace=NS, status=ScheduleStatus.COMPLETED) == []
    # The repair loop sleeps no later than the next fire (second resolution).
    swept = await store.sweep()
    first = await store.describe_schedule(namespace=NS, schedule_id="a-second")
    assert swept.next_timer_at is not None and first.next_fire_at is not None
    assert swept.next_timer_at <= first.next_fire_at


async def test_refusals_write_nothing(store: Store) -> None:
    """issue 30: already exists, not found and a bad backfill are typed; nothing is written."""
    await create(store)
    before = await everything(store)
    with pytest.raises(ScheduleAlreadyExists):
        await create(store, spec=EVERY_MINUTE)
    for call in (
        store.describe_schedule(namespace=NS, schedule_id="nope"),
        store.pause_schedule(namespace=NS, schedule_id="nope", note="n"),
        store.resume_schedule(namespace=NS, schedule_id="nope"),
        store.trigger_schedule(namespace=NS, schedule_id="nope"),
        store.update_schedule(namespace=NS, schedule_id="nope", update=ScheduleUpdate(note="x")),
        store.delete_schedule(namespace=NS, schedule_id="nope"),
        store.describe_schedule(namespace="other", schedule_id="nightly"),
    ):
        with pytest.raises(ScheduleNotFound):
            await call
    with pytest.raises(InvalidScheduleSpec):
        await store.backfill_schedule(namespace=NS, schedule_id="nightly", start=T0, end=T0)
    with pytest.raises(InvalidScheduleSpec):  # 86,400 fire times: more than one backfill takes
        await store.backfill_schedule(
            namespace=NS, schedule_id="nightly", start=T0, end=T0 + timedelta(days=1)
        )
    with pytest.raises(InvalidScheduleSpec):
        ScheduleUpdate.model_validate({"spec": {"cron_expressions": ["nope"]}})
    assert await everything(store) == before


async def test_concurrent_repair_passes_start_each_fire_time_once(store: Store) -> None:
    """issue 30: three sweeps and three claimers at once over due fires: one run per second."""
    await create(store, "a", overlap_policy=OverlapPolicy.ALLOW_ALL)
    await create(store, "b", overlap_policy=OverlapPolicy.ALLOW_ALL)
    first = await due_since(store, 20, "a")
    await due_since(store, 20, "b")

    async def claim() -> int:
        return await store.transactions.run(
            lambda txn: schedule_fires.fire_due_schedules(txn, limit=1)
        )

    await asyncio.gather(*(store.sweep() for _ in range(3)), *(claim() for _ in range(3)))
    await store.sweep()
    for name in ("a", "b"):
        started = await scheduled_runs(store, name)
        ids = [run["workflow_id"] for run in started]
        assert len(ids) == len(set(ids)) >= 21
        expected = [
            f"{name}-{first + timedelta(seconds=n):%Y-%m-%dT%H:%M:%SZ}" for n in range(len(ids))
        ]
        assert ids == expected  # every second once, none skipped, none twice
        described = await store.describe_schedule(namespace=NS, schedule_id=name)
        assert described.fires_count == len(ids)
        assert described.last_fired_at == first + timedelta(seconds=len(ids) - 1)
        assert described.next_fire_at is not None and described.next_fire_at > first


@pytest.mark.parametrize(
    ("policy", "outcomes"),
    [
        (OverlapPolicy.SKIP, ["started", "skipped", "skipped"]),
        (OverlapPolicy.BUFFER_ONE, ["started", "buffered", "skipped"]),
        (OverlapPolicy.BUFFER_ALL, ["started", "buffered", "buffered"]),
        (OverlapPolicy.CANCEL_OTHER, ["started", "buffered", "skipped"]),
        (OverlapPolicy.TERMINATE_OTHER, ["started", "started", "started"]),
        (OverlapPolicy.ALLOW_ALL, ["started", "started", "started"]),
    ],
)
async def test_overlap_policies(store: Store, policy: OverlapPolicy, outcomes: list[str]) -> None:
    """issue 30: each policy against the schedule's still-open previous run."""
    await create(store, spec=EVERY_MINUTE, overlap_policy=policy)
    fired = await store.backfill_schedule(
        namespace=NS, schedule_id="nightly", start=T0, end=T0 + timedelta(minutes=3)
    )
    assert [f.outcome.value for f in fired] == outcomes
    assert [f.workflow_id for f in fired] == [
        "nightly-2026-01-01T00:00:00Z",
        "nightly-2026-01-01T00:01:00Z",
        "nightly-2026-01-01T00:02:00Z",
    ]
    runs = await scheduled_runs(store)
    if policy is OverlapPolicy.TERMINATE_OTHER:
        assert [r["status"] for r in runs] == ["terminated", "terminated", "running"]
    if policy is OverlapPolicy.CANCEL_OTHER:
        assert runs[0]["cancel_requested"] is True
    if policy in (OverlapPolicy.BUFFER_ONE, OverlapPolicy.BUFFER_ALL, OverlapPolicy.CANCEL_OTHER):
        # The open run closes: the next pass starts the oldest waiting fire, and only it.
        await store.terminate_workflow(namespace=NS, workflow_id=fired[0].workflow_id)
        await store.sweep()
        runs = await scheduled_runs(store)
        assert [r["workflow_id"] for r in runs] == [fired[0].workflow_id, fired[1].workflow_id]
        described = await store.describe_schedule(namespace=NS, schedule_id="nightly")
        assert described.buffered_count == (1 if policy is OverlapPolicy.BUFFER_ALL else 0)
    described = await store.describe_schedule(namespace=NS, schedule_id="nightly")
    assert described.skipped_count == outcomes.count("skipped")


async def test_missed_fires_outside_the_catchup_window_are_counted(store: Store) -> None:
    """issue 30: after downtime, fires inside the window start; older ones are counted missed."""
    await create(store, overlap_policy=OverlapPolicy.ALLOW_ALL, catchup_window_seconds=5)
    await due_since(store, 30)
    result = await store.sweep()
    described = await store.describe_schedule(namespace=NS, schedule_id="nightly")
    started = len(await scheduled_runs(store))
    assert 5 <= started <= 8  # the window's seconds (and any that passed during the pass)
    assert 23 <= described.missed_count <= 26
    assert described.fires_count == started
    assert result.schedule_fires == started + described.missed_count


async def test_pause_resume_trigger_and_max_runs(store: Store) -> None:
    """issue 30: paused fires nothing; resume skips the paused time; trigger and max_runs."""
    await create(store, overlap_policy=OverlapPolicy.ALLOW_ALL, max_runs=3)
    paused = await store.pause_schedule(namespace=NS, schedule_id="nightly", note="deploy")
    assert paused.status is ScheduleStatus.PAUSED and paused.note == "deploy"
    await due_since(store, 10)
    await store.sweep()
    assert await scheduled_runs(store) == []
    now = await db_now(store)
    resumed = await store.resume_schedule(namespace=NS, schedule_id="nightly")
    assert resumed.status is ScheduleStatus.ACTIVE
    assert resumed.next_fire_at is not None and resumed.next_fire_at > now
    fired = await store.trigger_schedule(namespace=NS, schedule_id="nightly")
    assert fired.outcome is FireOutcome.STARTED and fired.kind.value == "trigger"
    assert fired.workflow_id == f"nightly-{fired.fire_at:%Y-%m-%dT%H:%M:%SZ}"
    await due_since(store, 10)
    await store.sweep()
    described = await store.describe_schedule(namespace=NS, schedule_id="nightly")
    assert described.fires_count == 3 and len(await scheduled_runs(store)) == 3
    assert described.status is ScheduleStatus.COMPLETED and described.next_fire_at is None
    assert described.remaining_actions == 0 and described.next_fire_times == []
    assert [f.outcome for f in described.recent_fires].count(FireOutcome.STARTED) == 3


async def test_backfill_update_and_delete(store: Store) -> None:
    """issue 30: a backfill fires each time once; update recomputes; delete keeps the runs."""
    await create(store, spec=EVERY_MINUTE, overlap_policy=OverlapPolicy.ALLOW_ALL)
    window = {"start": T0, "end": T0 + timedelta(minutes=2)}
    first = await store.backfill_schedule(namespace=NS, schedule_id="nightly", **window)
    again = await store.backfill_schedule(namespace=NS, schedule_id="nightly", **window)
    assert [f.outcome for f in first] == [FireOutcome.STARTED] * 2
    assert [f.outcome for f in again] == [FireOutcome.ALREADY_FIRED] * 2
    hourly = ScheduleSpec(cron_expressions=["@hourly"])
    updated = await store.update_schedule(
        namespace=NS, schedule_id="nightly", update=ScheduleUpdate(spec=hourly, note="slower")
    )
    assert updated.next_fire_at is not None and updated.next_fire_at.minute == 0
    assert updated.note == "slower" and updated.spec == hourly
    await store.delete_schedule(namespace=NS, schedule_id="nightly")
    assert await table(store, s.schedule_fires) == []
    assert len(await scheduled_runs(store)) == 2


async def test_jitter_delays_the_due_time_not_the_fire_time(store: Store) -> None:
    """issue 30: a jittered fire keeps its nominal time (and workflow id) and is due later."""
    await create(store, spec=EVERY_MINUTE, jitter_seconds=50)
    [row] = await table(store, s.schedules)
    delay = jitter_for("nightly", row["next_fire_at"], 50)
    assert row["next_due_at"] - row["next_fire_at"] == delay <= timedelta(seconds=50)


async def test_a_schedule_that_cannot_fire_is_isolated(store: Store) -> None:
    """issue 30: a stored spec that no longer reads is rolled back alone; the others fire."""
    await create(store, "broken")
    await create(store, "healthy", overlap_policy=OverlapPolicy.ALLOW_ALL)
    await due_since(store, 2, "broken")
    await due_since(store, 2, "healthy")
    await execute(store, "UPDATE schedules SET spec = '{}' WHERE schedule_id = 'broken'")
    result = await store.sweep()
    assert result.isolated == 1
    assert await scheduled_runs(store, "broken") == []
    assert len(await scheduled_runs(store, "healthy")) >= 3
    # Held out with a backoff: the next pass neither retries it nor wakes for its due time
    # (which passed: waking for it would make every sweeper loop without a pause).
    [mark] = await table(store, s.repair_failures)
    assert (mark["step"], mark["row_key"], mark["run_id"]) == ("schedule", f"{NS}/broken", None)
    again = await store.sweep()
    assert again.isolated == 0
    assert again.next_timer_at is not None and again.next_timer_at > await db_now(store)
    # Repaired and due again once its retry time has come: it fires, and its mark is cleared.
    await execute(
        store,
        "UPDATE schedules SET spec = :spec WHERE schedule_id = 'broken'",
        spec=EVERY_SECOND.model_dump_json(),
    )
    await execute(store, "UPDATE repair_failures SET retry_after = now() - interval '1 second'")
    assert (await store.sweep()).isolated == 0
    assert len(await scheduled_runs(store, "broken")) == 1  # the rest skipped: it is open
    fired = [f for f in await table(store, s.schedule_fires) if f["schedule_id"] == "broken"]
    assert len(fired) >= 3
    assert await table(store, s.repair_failures) == []


async def test_old_fire_rows_are_pruned_and_refire_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 30: a schedule keeps its latest fires; an older time fired again starts no run."""
    monkeypatch.setattr(schedule_fires, "KEEP_FIRES", 3)
    monkeypatch.setattr(schedule_fires, "PRUNE_EVERY", 1)
    await create(store, overlap_policy=OverlapPolicy.ALLOW_ALL)
    first = await due_since(store, 6)
    await store.sweep()
    kept = await table(store, s.schedule_fires)
    assert len(kept) == 3 and min(r["fire_at"] for r in kept) > first
    runs = len(await scheduled_runs(store))
    [again] = await store.backfill_schedule(
        namespace=NS, schedule_id="nightly", start=first, end=first + timedelta(seconds=1)
    )
    assert again.outcome is FireOutcome.FAILED and len(await scheduled_runs(store)) == runs
